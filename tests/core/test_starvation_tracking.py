"""N1's head tracking follows only what changed, and decides exactly as looking at every head.

The property: over random histories (trees with small starvation thresholds, some leaves with
the guard off, some with a ready timeout that requeues jobs into a backoff; jobs in two zones
created, finished, deleted and observed again, the ledger's decisions echoed back late, the
clock moving, holds, drains and resumes, a snapshot restored, the tree applied again with
other thresholds; the engine as a dequeuer runs it or as scenarios do), an engine with the
production tracking and one whose tracking looks up every leaf's head after each pass and each
``Admitted`` (``_track_every_head``: the tracking as it was before it became incremental, kept
here as the reference) make the same decisions and keep the same starvation clocks at every
step; and after each pass the heads the guard follows are every guarded leaf's head.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from unittest.mock import patch

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import (
    Admitted,
    Decision,
    Millis,
    NodeHeld,
    NodeResumed,
    QuotaNode,
    QuotaPath,
    QuotaTreeApplied,
    Released,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
)
from schemas.envelope import LogEvent
from tests.builders.events import observed
from tests.builders.generated import leaves_of, paths_of, trees
from usher.core.engine import starvation
from usher.core.engine.context import EngineContext
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import restore, snapshot
from usher.core.model.config import EngineConfig

GUARD = "usher.io/starvation-seconds"
READINESS = {
    "usher.io/ready-timeout-seconds": "1",
    "usher.io/requeue-backoff-seconds": "2",
    "usher.io/requeue-max-attempts": "3",
}


def _track_every_head(e: EngineContext, decisions: list[Decision]) -> None:
    """The reference: every guarded leaf's head looked up through the gates, every call."""
    heads: dict[WorkloadKey, None] = {}
    for leaf in e.state.tree.leaves:
        info = e.state.tree.nodes[leaf]
        queue = e.leaf_queues.get(leaf)
        if not info.starvation_ms or queue is None or e.hold_over(leaf) is not None:
            continue
        head = e.head(leaf)
        if head is not None:
            heads[head] = None
    starving = e.state.starving
    for key in [key for key in starving if key not in heads]:
        del starving[key]
    admitted = {d.workload for d in decisions if isinstance(d, Admitted)}
    if not admitted:
        return
    for head in heads:
        if head not in starving and head not in admitted:
            starving[head] = e.state.now


def _every_guarded_head(e: EngineContext) -> dict[QuotaPath, WorkloadKey]:
    found = {leaf: starvation.guarded_head(e, leaf) for leaf in e.state.tree.leaves}
    return {leaf: head for leaf, head in found.items() if head is not None}


@contextmanager
def _reference_tracking() -> Iterator[None]:
    with patch.object(starvation, "track", _track_every_head):
        yield


@dataclass(frozen=True)
class Step:
    kind: str
    index: int = 0
    cores: int = 1
    priority: int = 0
    zone: str = "default"


def _guarded(tree: QuotaNode, thresholds: list[int], timed: bool) -> QuotaNode:
    """``tree`` with the root's threshold ``thresholds[0]`` and each leaf's the next ones (a
    leaf past the list sets none: the root's is in force; 0 turns the guard off there);
    ``timed``: the root's ready timeout requeues jobs into a backoff (R10), so that a leaf's
    head moves with the clock alone."""
    leaves = {leaf.name: i + 1 for i, leaf in enumerate(leaves_of(tree))}

    def set_on(node: QuotaNode, root: bool) -> QuotaNode:
        at = 0 if root else leaves.get(node.name, len(thresholds)) if not node.children else -1
        attributes = dict(node.attributes)
        if root and timed:
            attributes.update(READINESS)
        if 0 <= at < len(thresholds):
            attributes[GUARD] = str(thresholds[at])
        children = [set_on(child, False) for child in node.children]
        return msgspec.structs.replace(node, attributes=attributes, children=children)

    return set_on(tree, True)


creates = st.builds(
    Step,
    kind=st.just("create"),
    index=st.integers(0, 8),
    cores=st.integers(1, 25),
    priority=st.integers(0, 3),
    zone=st.sampled_from(["default", "z2"]),
)
steps = st.lists(
    st.one_of(
        creates,
        creates,
        st.builds(
            Step,
            kind=st.sampled_from(["finish", "delete", "again", "echo", "hold", "drain", "resume"]),
            index=st.integers(0, 60),
        ),
        st.builds(Step, kind=st.sampled_from(["pass", "pass", "restore", "retree"])),
        st.builds(Step, kind=st.just("tick"), index=st.integers(1, 4000)),
    ),
    min_size=20,
    max_size=80,
)
thresholds = st.lists(st.sampled_from([0, 1, 2, 3, 600]), min_size=1, max_size=4)
configs = st.builds(
    EngineConfig,
    policy=st.sampled_from(["Round", "Block"]),
    within_quota=st.sampled_from(["Never", "LowerPriority"]),
    min_runtime_ms=st.sampled_from([0, 2000]),
    instant_release=st.booleans(),
)


def _observed(namespace: str, name: str, step: Step, now: int) -> WorkloadObserved:
    """A ``create`` step's workload: one pod of ``step.cores`` cores in ``step.zone``."""
    return observed(
        namespace, name, step.cores, created=now, priority=step.priority, zone=step.zone
    )


@dataclass
class _Run:
    """One engine fed a history, and what it did at each step."""

    config: EngineConfig
    tree: QuotaNode
    other: QuotaNode
    check_heads: bool
    observe: Callable[[str, str, Step, int], WorkloadObserved] = _observed
    """How a ``create`` step's workload is observed (namespace, name, the step, now)."""

    def play(self, history: list[Step]) -> list[tuple[list[Decision], list[tuple[str, int]]]]:
        engine = Engine(self.config)
        now = 0
        engine.apply(QuotaTreeApplied(root=self.tree), Millis(now))
        nodes = sorted(paths_of(self.tree))
        namespaces = [ns for leaf in leaves_of(self.tree) for ns in leaf.namespaces]
        created: list[WorkloadObserved] = []
        log: list[LogEvent] = []  # the ledger's decisions, not on the log yet
        trees = [self.tree, self.other]
        out: list[tuple[list[Decision], list[tuple[str, int]]]] = []
        for number, step in enumerate(history):
            made: list[Decision] = []
            at = Millis(now)
            if step.kind == "create":
                namespace = namespaces[step.index % len(namespaces)]
                event = self.observe(namespace, f"j{number}", step, now)
                created.append(event)
                made = engine.apply(event, at)
            elif step.kind in ("finish", "delete", "again") and created:
                job = created[step.index % len(created)]
                end = {
                    "finish": WorkloadFinished(workload=job.workload),
                    "delete": WorkloadDeleted(workload=job.workload),
                    "again": job,
                }[step.kind]
                made = engine.apply(end, at)
            elif step.kind == "echo":
                for decision in log[: step.index % 8 + 1]:
                    engine.apply(decision, at)
                del log[: step.index % 8 + 1]
            elif step.kind == "pass":
                made = engine.decide(at)
                if self.check_heads and engine.state.tree.starvation_on:
                    assert engine.guard_heads.of_leaf == _every_guarded_head(engine)
            elif step.kind == "tick":
                now += step.index
            elif step.kind in ("hold", "drain"):
                node = QuotaPath(nodes[step.index % len(nodes)])
                mode = "Hold" if step.kind == "hold" else "Drain"
                engine.apply(NodeHeld(node=node, mode=mode, by="ops", at_ms=at), at)
            elif step.kind == "resume":
                node = QuotaPath(nodes[step.index % len(nodes)])
                engine.apply(NodeResumed(node=node, by="ops", at_ms=at), at)
            elif step.kind == "restore":
                engine = restore(snapshot(engine), self.config)
            elif step.kind == "retree":
                trees.reverse()
                engine.apply(QuotaTreeApplied(root=trees[0]), at)
            log.extend(made)
            out.append((made, sorted(engine.state.starving.items())))
        return out


@settings(max_examples=150, deadline=None)
@given(configs, trees(), thresholds, thresholds, st.booleans(), steps)
def test_tracking_what_changed_decides_as_tracking_every_head(
    config: EngineConfig,
    tree: QuotaNode,
    first: list[int],
    second: list[int],
    timed: bool,
    history: list[Step],
) -> None:
    trees = (_guarded(tree, first, timed), _guarded(tree, second, timed))
    run = _Run(config, *trees, check_heads=True)
    followed = run.play(history)
    with _reference_tracking():
        reference = _Run(config, run.tree, run.other, check_heads=False).play(history)
    for number, (step, ours, theirs) in enumerate(zip(history, followed, reference, strict=True)):
        assert ours == theirs, f"step {number} ({step}) differs"


def test_a_head_whose_leaf_did_not_change_keeps_its_clock_and_a_passed_over_one_gets_one() -> None:
    """Two leaves under a 1 s guard; a's head does not fit beside b's running job while b
    admits a small one: a's head gets its clock then, and keeps it while only b changes."""
    root = QuotaNode(
        name="root",
        min={"cpu": 4000},
        max={"cpu": 4000},
        attributes={GUARD: "1"},
        children=[
            QuotaNode(name="a", max={"cpu": 4000}, namespaces=["a"]),
            QuotaNode(name="b", max={"cpu": 4000}, namespaces=["b"]),
        ],
    )
    engine = Engine(EngineConfig())
    engine.apply(QuotaTreeApplied(root=root), Millis(0))
    engine.apply(observed("b", "running", 2), Millis(0))
    engine.decide(Millis(0))
    engine.apply(observed("a", "big", 4, created=5), Millis(5))
    engine.apply(observed("b", "small", 1, created=5), Millis(5))
    made = engine.decide(Millis(10))
    assert [d.workload for d in made if isinstance(d, Admitted)] == ["b/small"]
    assert engine.state.starving == {"a/big": 10}
    engine.apply(observed("b", "next", 1, created=20), Millis(20))
    engine.decide(Millis(20))
    assert engine.state.starving == {"a/big": 10}
    assert engine.guard_heads.of_leaf == {"root/a": "a/big"}


def test_a_head_back_from_its_backoff_gets_its_clock_at_the_next_admitted_without_a_pass() -> None:
    """A head that a backoff passed over is the head again once the backoff ends, by the clock
    alone (no event marks its leaf): an ``Admitted`` read from the log before any pass starts
    its clock, as tracking every head would (R10, N1)."""
    root = QuotaNode(
        name="root",
        min={"cpu": 4000},
        max={"cpu": 4000},
        attributes={GUARD: "1", **READINESS},
        children=[
            QuotaNode(name="a", max={"cpu": 4000}, namespaces=["a"]),
            QuotaNode(name="b", max={"cpu": 4000}, namespaces=["b"]),
        ],
    )
    engine = Engine(EngineConfig())
    engine.apply(QuotaTreeApplied(root=root), Millis(0))
    engine.apply(observed("a", "x", 2), Millis(0))
    for decision in engine.decide(Millis(0)):
        engine.apply(decision, Millis(0))  # the ledger's grant: x's ready deadline runs
    engine.apply(observed("a", "y", 3, created=10), Millis(10))
    engine.apply(observed("b", "z", 1, created=10), Millis(10))
    made = engine.decide(Millis(1500))  # x never got ready: requeued into a 2 s backoff
    assert [(type(d).__name__, d.workload) for d in made] == [
        ("Requeued", "a/x"),
        ("Admitted", "b/z"),
    ]
    engine.apply(made[0], Millis(1500))
    stopped = Released(workload="a/x", quota="root/a", requests={"cpu": 2000}, cause="Requeued")
    engine.apply(stopped, Millis(1600))
    assert [d.workload for d in engine.decide(Millis(1600)) if isinstance(d, Admitted)] == ["a/y"]
    assert engine.state.starving == {}  # x backs off: leaf a has no head
    engine.apply(observed("b", "w", 1, created=1700), Millis(1700))
    assert engine.decide(Millis(1700)) == []  # the root is full; leaf a did not change
    engine.apply(made[1], Millis(4000))  # z's grant, read after x's backoff ended
    assert engine.state.starving == {"a/x": 4000, "b/w": 4000}
