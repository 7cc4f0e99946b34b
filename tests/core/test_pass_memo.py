"""The pass's memo (``PassMemo``) decides exactly as asking every question afresh.

The property: over random histories (trees whose leaves set preemption and lending policies --
``LowerPriority`` within quota, preempting while borrowing, ``WithinMin`` requests, reclaim
within the cohort and lending limits -- with the starvation guard on or off and a ready timeout
that requeues jobs into a backoff; jobs in two zones, some accepting both, some scalable,
created, finished, deleted and observed again, the ledger's decisions echoed back late, the
clock moving, holds, drains and resumes, a snapshot restored, the tree applied again with other
policies; Round and Block, the engine as a dequeuer runs it or as scenarios do), an engine with
the production memo and one whose memo remembers nothing (``_Recomputing``: every gate and every
fit asked again for each candidate, every candidate tried, as the pass did before the memo) make
the same decisions and keep the same starvation clocks at every step.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from unittest.mock import patch

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import (
    Millis,
    QuotaNode,
    QuotaPath,
    QuotaTreeApplied,
    WorkloadKey,
    WorkloadObserved,
    Zone,
)
from tests.builders.events import CORE, observed
from tests.builders.generated import trees
from tests.core.test_starvation_tracking import Step, _guarded, _Run, creates, thresholds
from usher.core.engine import decision_pass
from usher.core.engine.facade import Engine
from usher.core.engine.pass_end import PassEnd
from usher.core.engine.pass_memo import PassMemo
from usher.core.gates import chain
from usher.core.gates.view import Gate
from usher.core.model.config import EngineConfig
from usher.core.state.indexed import Job, QuotaNodeInfo, Shape, SortKey


class _Recomputing(PassMemo):
    """The reference: a memo that remembers nothing and never spares a try."""

    def gates(self, leaf: QuotaPath) -> tuple[Gate, ...]:
        return chain.passing_over(self.e, leaf)

    def dead(self, info: QuotaNodeInfo, shape: Shape) -> bool:
        return not self.e.fits_quota(info.path, shape) and not self.e.within_min(info, shape)

    def within(self, info: QuotaNodeInfo, shape: Shape) -> bool:
        return self.e.within_min(info, shape)

    def known_dead(self, leaf: QuotaPath, shape: Shape) -> bool:
        return False

    def hopeless(self, info: QuotaNodeInfo, job: Job) -> bool:
        return False


class NeverProven(PassEnd):
    """A pass that never ends before its interleave runs dry but where the root is full and
    nobody may preempt: what this file compares is the interleave itself, whose length
    ``PassEnd`` cuts at a point that counts failed candidates (``test_pass_end`` checks the
    cut)."""

    def proven(self, cursor: Mapping[QuotaPath, SortKey], potential: int) -> bool:
        return False

    def no_room_anywhere(self, root: QuotaNodeInfo) -> bool:
        return False


POLICIES = {
    "usher.io/within-quota": ["Never", "LowerPriority"],
    "usher.io/preempt-while-borrowing": ["Never", "LowerPriority", "LowerPriorityBorrowersOnly"],
    "usher.io/within-quota-request": ["Any", "WithinMin"],
    "usher.io/reclaim-within": ["Any", "LowerPriority", "Never"],
    "usher.io/lending-limit": ["cpu=2", "cpu=10"],
}
"""Per attribute, the values a leaf may set (absent: inherited or the default)."""

policies = st.lists(
    st.one_of(
        st.just({}),
        st.just({}),
        st.fixed_dictionaries(
            {}, optional={key: st.sampled_from(values) for key, values in POLICIES.items()}
        ),
    ),
    min_size=1,
    max_size=6,
)
"""Per node in pre-order, what it sets; most set nothing (R5 alone: the memo spares most)."""


def _with_policies(tree: QuotaNode, chosen: list[dict[str, str]]) -> QuotaNode:
    """``tree`` with its n-th node in pre-order setting ``chosen[n]`` (past the list: none)."""
    order: list[int] = [0]

    def set_on(node: QuotaNode) -> QuotaNode:
        at = order[0]
        order[0] += 1
        attributes = dict(node.attributes)
        if at < len(chosen):
            attributes.update(chosen[at])
        children = [set_on(child) for child in node.children]
        return msgspec.structs.replace(node, attributes=attributes, children=children)

    return set_on(tree)


def _varied(namespace: str, name: str, step: Step, now: int) -> WorkloadObserved:
    """A ``create`` step's workload, shaped by its cores: some of several pods of which fewer
    may run (R11), some accepting both zones (Z2)."""
    pods = 1 + step.cores % 3
    event = observed(
        namespace,
        name,
        step.cores,
        count=pods,
        created=now,
        priority=step.priority,
        zone=step.zone,
    )
    if step.cores % 4 == 1:
        sets = [msgspec.structs.replace(event.pod_sets[0], min_count=1)]
        event = msgspec.structs.replace(event, pod_sets=sets)
    if step.cores % 5 == 2:
        other = Zone("z2" if step.zone == "default" else "default")
        event = msgspec.structs.replace(event, zones=[Zone(step.zone), other])
    return event


small = st.builds(
    Step,
    kind=st.just("create"),
    index=st.integers(0, 8),
    cores=st.integers(1, 12),
    priority=st.integers(0, 3),
    zone=st.sampled_from(["default", "z2"]),
)
crowded = st.lists(
    st.one_of(
        *[small] * 8,
        creates,
        st.builds(
            Step,
            kind=st.sampled_from(["finish", "delete", "again", "echo", "hold", "drain", "resume"]),
            index=st.integers(0, 60),
        ),
        st.builds(Step, kind=st.sampled_from(["pass", "pass", "pass", "restore", "retree"])),
        st.builds(Step, kind=st.just("tick"), index=st.integers(1, 4000)),
    ),
    min_size=40,
    max_size=150,
)
"""Histories where queues grow long between passes (so most candidates cannot move)."""

configs = st.builds(
    EngineConfig,
    policy=st.sampled_from(["Round", "Round", "Block"]),
    within_quota=st.sampled_from(["Never", "Never", "LowerPriority"]),
    min_runtime_ms=st.sampled_from([0, 2000]),
    instant_release=st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(configs, trees(), policies, policies, thresholds, st.booleans(), crowded)
def test_the_pass_memo_decides_as_asking_every_question_again(
    config: EngineConfig,
    tree: QuotaNode,
    first: list[dict[str, str]],
    second: list[dict[str, str]],
    guard: list[int],
    timed: bool,
    history: list[Step],
) -> None:
    guarded = _guarded(tree, guard, timed)
    trees_ = (_with_policies(guarded, first), _with_policies(guarded, second))
    with _popped() as order, patch.object(decision_pass, "PassEnd", NeverProven):
        ours = _Run(config, *trees_, check_heads=False, observe=_varied).play(history)
    with (
        patch.object(decision_pass, "PassEnd", NeverProven),
        patch.object(decision_pass, "PassMemo", _Recomputing),
        patch.object(decision_pass.DecisionPass, "skip_failing", _take_each),
        _popped() as reference_order,
    ):
        reference = _Run(config, *trees_, check_heads=False, observe=_varied).play(history)
    for number, (step, mine, theirs) in enumerate(zip(history, ours, reference, strict=True)):
        assert mine == theirs, f"step {number} ({step}) differs"
    assert order == reference_order  # the interleave itself, not only what it decided


def _take_each(self: decision_pass.DecisionPass, leaf: QuotaPath) -> None:
    """The reference passes nothing at once: each workload is taken from the interleave."""


@contextmanager
def _popped() -> Iterator[list[tuple[QuotaPath, WorkloadKey] | None]]:
    """Every candidate the passes take from the interleave, in order (None: it ran dry); a
    workload ``skip_failing`` passes counts as taken there (unless tried already or passed
    over by a gate: the interleave would not have offered it)."""
    taken: list[tuple[QuotaPath, WorkloadKey] | None] = []
    pop = decision_pass.DecisionPass.pop
    skip = decision_pass.DecisionPass.skip_failing

    def recording(self: decision_pass.DecisionPass) -> tuple[QuotaPath, Job] | None:
        found = pop(self)
        taken.append(None if found is None else (found[0], found[1].key))
        return found

    def passing(self: decision_pass.DecisionPass, leaf: QuotaPath) -> None:
        before = self.cursor[leaf]
        skip(self, leaf)
        gates = chain.passing_over(self.e, leaf)
        for entry in self.e.leaf_queues[leaf].entries:
            job = self.e.state.jobs[entry[2]]
            offered = job.key not in self.tried and chain.passed_over(self.e, job, gates) is None
            if before < entry <= self.cursor[leaf] and offered:
                taken.append((leaf, job.key))

    with (
        patch.object(decision_pass.DecisionPass, "pop", recording),
        patch.object(decision_pass.DecisionPass, "skip_failing", passing),
    ):
        yield taken


def _three_leaves() -> QuotaNode:
    def leaf(name: str, cores: int) -> QuotaNode:
        return QuotaNode(
            name=name, min={"cpu": cores * CORE}, max={"cpu": 10 * CORE}, namespaces=[name]
        )

    return QuotaNode(
        name="root",
        min={"cpu": 10 * CORE},
        max={"cpu": 10 * CORE},
        children=[leaf("a", 5), leaf("b", 5), leaf("c", 0)],
    )


def test_a_shape_that_could_not_move_moves_after_a_preemption_in_the_same_pass() -> None:
    """The root is full (b borrows 1 core); c's 2-core jobs neither fit nor ask within c's
    guarantee, and c is looked at first (the lowest share). Then a's head does not fit either,
    and a's next, within a's guarantee, reclaims b's borrower: the 6 cores freed at once
    (scenarios release at once) leave room that c's second job takes in the same pass, as a
    pass asking afresh decides -- the memo forgets what usage going down can change."""
    engine = Engine(EngineConfig(instant_release=True))
    engine.apply(QuotaTreeApplied(root=_three_leaves()), Millis(0))
    engine.apply(observed("b", "b1", 6), Millis(0))
    engine.apply(observed("a", "a1", 4), Millis(0))
    for decision in engine.decide(Millis(0)):
        engine.apply(decision, Millis(0))
    for name, cores, created in (("c/c1", 2, 1), ("c/c2", 2, 2), ("a/big", 6, 3), ("a/a2", 1, 4)):
        namespace, _, job = name.partition("/")
        engine.apply(observed(namespace, job, cores, created=created), Millis(5))
    made = engine.decide(Millis(10))
    assert [(type(d).__name__, d.workload) for d in made] == [
        ("Preempted", "b/b1"),
        ("Admitted", "a/a2"),
        ("Admitted", "c/c2"),
    ]


def _even_shares(c_runtime: str = "0") -> Engine:
    """a and b at the same share (3 of 4, 6 of 8 cores; b preempts lower priority in its own
    leaf, ``LowerPriority``), c borrowing the rest (its work protected for ``c_runtime``
    seconds): the root is full."""

    def leaf(name: str, cores: int, **attributes: str) -> QuotaNode:
        return QuotaNode(
            name=name,
            min={"cpu": cores * CORE},
            max={"cpu": 12 * CORE},
            namespaces=[name],
            attributes=attributes,
        )

    root = QuotaNode(
        name="root",
        min={"cpu": 12 * CORE},
        max={"cpu": 12 * CORE},
        children=[
            leaf("a", 4),
            leaf("b", 8, **{"usher.io/within-quota": "LowerPriority"}),
            leaf("c", 0, **{"usher.io/min-runtime-seconds": c_runtime}),
        ],
    )
    engine = Engine(EngineConfig(instant_release=True))
    engine.apply(QuotaTreeApplied(root=root), Millis(0))
    for namespace, name, cores in (("a", "a0", 3), ("b", "low", 6), ("c", "c0", 3)):
        engine.apply(observed(namespace, name, cores, priority=0), Millis(0))
    for decision in engine.decide(Millis(0)):
        engine.apply(decision, Millis(0))
    return engine


def _pass_after(engine: Engine, waiting: list[tuple[str, int]]) -> list[tuple[str, str]]:
    """Create ``waiting`` (key, cores) at priority 5 in that order; what a pass decides."""
    for created, (key, cores) in enumerate(waiting, start=1):
        namespace, _, name = key.partition("/")
        engine.apply(observed(namespace, name, cores, created=created, priority=5), Millis(5))
    return [(type(d).__name__, d.workload) for d in engine.decide(Millis(10))]


def test_workloads_passed_at_once_stop_where_another_leaf_comes_first() -> None:
    """a's a1 cannot fit nor reclaim; a2, the same, comes after b's high in the interleave;
    high preempts b's lower-priority work and frees room that a2 then takes: passing a2 at
    once with a1 would have skipped it."""
    made = _pass_after(_even_shares(), [("a/a1", 2), ("b/high", 3), ("a/a2", 2), ("a/a3", 1)])
    assert made == [
        ("Preempted", "b/low"),
        ("Admitted", "b/high"),
        ("Admitted", "a/a2"),
        ("Admitted", "a/a3"),
    ]


def test_workloads_passed_at_once_stop_where_the_queue_stops_being_viable() -> None:
    """c's work is protected, so a's 1-core jobs (within a's guarantee) find no victims (a5 at
    once: the same search failed in this state); its 2-core jobs cannot fit nor reclaim.
    Past a5 nothing in a may fit or reclaim: a2 is taken, fails and a stops there. After b's
    high preempts, a offers again from a2: a6 takes the room (passing a6 too would give it
    to a4)."""
    waiting = [("a/a3", 1), ("a/a1", 2), ("a/a5", 1), ("a/a2", 2), ("a/a6", 2)]
    made = _pass_after(_even_shares("60"), [*waiting, ("b/high", 3), ("a/a4", 2)])
    assert made == [("Preempted", "b/low"), ("Admitted", "b/high"), ("Admitted", "a/a6")]
