"""A pass that ends where the rest could move nothing (``PassEnd``) decides exactly as one that
takes every candidate.

The property: over the crowded random histories of ``test_pass_memo`` (policies, both
zones, scalable and multi-zone jobs, late echoes, holds, drains, snapshot restore, tree swaps;
Round and Block; the engine as a dequeuer runs it, where victims keep counting while they
stop, and as scenarios run it), an engine whose passes end at the proof and one whose passes
never end before the interleave runs dry make the same decisions and keep the same starvation
clocks at every step; and each early end is checked on the spot: the pass is run on to its
dry end on a working copy and must decide nothing more, and before every proof the kept
refusals and counts it asks are those a fresh look gives. Tables pin the cases the proof must
refuse: a scalable workload, a held preemptor, a request that may search.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest.mock import patch

import msgspec
from hypothesis import given, settings

from schemas import (
    Admitted,
    Decision,
    Millis,
    Preempted,
    QueueName,
    QuotaNode,
    QuotaPath,
    QuotaTreeApplied,
    Reason,
    WorkloadKey,
)
from tests.builders.events import CORE, observed
from tests.builders.generated import trees
from tests.core.test_pass_memo import (
    NeverProven,
    _varied,
    _with_policies,
    configs,
    crowded,
    policies,
)
from tests.core.test_starvation_tracking import Step, _guarded, _Run, thresholds
from usher.core.engine import decision_pass
from usher.core.engine.facade import Engine
from usher.core.engine.pass_end import PassEnd
from usher.core.model.config import EngineConfig
from usher.core.state.indexed import QuotaNodeInfo, Shape, SortKey

ENDED: list[int] = []
"""How many passes each run of the property ended at the proof (so it is seen to fire)."""
NO_ROOM: list[int] = []
"""How many times each run found no room anywhere though the root had some."""


class _Counted(PassEnd):
    """The production proof, counted (and the ends where no room is anywhere)."""

    def proven(self, cursor: dict[QuotaPath, SortKey], potential: int) -> bool:  # type: ignore[override]
        found = super().proven(cursor, potential)
        ENDED[-1] += found
        return found

    def no_room_anywhere(self, root: QuotaNodeInfo) -> bool:
        found = super().no_room_anywhere(root)
        NO_ROOM[-1] += found
        return found


def _checked(self: decision_pass.DecisionPass) -> bool:
    """``nothing_can_move``, and on every early end: the scalable counts agree with the
    queues, and the pass run on to its dry end on a working copy of the engine
    (``preview_pass``'s) from exactly here decides nothing more."""
    _assert_refusals_kept(self.e)
    ends = _NOTHING_CAN_MOVE(self)
    if ends:
        _assert_scalables_counted(self.e)
        _assert_nothing_more(self)
    return ends


_NOTHING_CAN_MOVE = decision_pass.DecisionPass.nothing_can_move


def _assert_refusals_kept(e: Engine) -> None:
    """What the proof trusts: every leaf not changed since the last refresh keeps the refusal
    a fresh look gives (a leaf changed since is looked at afresh), and the counts are those
    of the kept refusals."""
    for leaf, has in e.leaf_potential.items():
        if has and leaf not in e.dirty:
            fresh = e._leaf_refusal(e.state.tree.nodes[leaf], e.leaf_queues[leaf])
            assert e.leaf_refusals.get(leaf) == fresh, leaf
    counts: dict[tuple[QuotaPath, Shape], int] = {}
    for leaf, (is_open, needs) in e.leaf_refusals.items():
        assert is_open == (leaf in e.open_leaves)
        for ancestor in e.state.tree.nodes[leaf].ancestors[:-1]:
            for shape in needs:
                counts[(ancestor.path, shape)] = counts.get((ancestor.path, shape), 0) + 1
    assert counts == e.needs_above


def _assert_scalables_counted(e: Engine) -> None:
    for leaf, queue in e.leaf_queues.items():
        scalable = [k for *_, k in queue.entries if e.state.jobs[k].scalable is not None]
        assert queue.scalables == len(scalable), leaf


def _assert_nothing_more(ended: decision_pass.DecisionPass) -> None:
    e = ended.e
    assert isinstance(e, Engine)
    kept = e._set_aside_for_trial()
    try:
        decisions: list[Decision] = []
        rest = decision_pass.DecisionPass(e, decisions)
        rest.end = NeverProven(e, rest.closed)
        rest.nothing_can_move = lambda: False  # type: ignore[method-assign]  # runs dry
        rest.cursor = dict(ended.cursor)
        rest.tried = set(ended.tried)
        rest.closed.update(ended.closed)
        rest.stands = dict(ended.stands)
        rest.run()
        assert not [d for d in decisions if isinstance(d, Admitted | Preempted)], decisions
    finally:
        e._put_back_after_trial(kept)


@contextmanager
def _pass_end(kind: type[PassEnd]) -> Iterator[None]:
    with patch.object(decision_pass, "PassEnd", kind):
        yield


@settings(max_examples=200, deadline=None)
@given(configs, trees(), policies, policies, thresholds, crowded)
def test_a_pass_ended_at_the_proof_decides_as_one_run_dry(
    config: EngineConfig,
    tree: QuotaNode,
    first: list[dict[str, str]],
    second: list[dict[str, str]],
    guard: list[int],
    history: list[Step],
) -> None:
    guarded = _guarded(tree, guard, False)
    trees_ = (_with_policies(guarded, first), _with_policies(guarded, second))
    ENDED.append(0)
    NO_ROOM.append(0)
    with (
        _pass_end(_Counted),
        patch.object(decision_pass.DecisionPass, "nothing_can_move", _checked),
    ):
        ours = _Run(config, *trees_, check_heads=False, observe=_varied).play(history)
    with _pass_end(NeverProven):
        reference = _Run(config, *trees_, check_heads=False, observe=_varied).play(history)
    for number, (step, mine, theirs) in enumerate(zip(history, ours, reference, strict=True)):
        assert mine == theirs, f"step {number} ({step}) differs"


def test_the_property_saw_passes_end_at_the_proof() -> None:
    """Run after the property (file order): some of its histories reached the proof."""
    if not ENDED:
        test_a_pass_ended_at_the_proof_decides_as_one_run_dry()
    assert sum(ENDED) > 0, ENDED
    assert sum(NO_ROOM) > 0, NO_ROOM


def _full_tree(leaves: int) -> QuotaNode:
    """``leaves`` leaves of 2 cores guaranteed each, allowed 8 (the first: all); the root
    exactly their sum."""
    total = 2 * leaves * CORE
    return QuotaNode(
        name="root",
        min={"cpu": total},
        max={"cpu": total},
        children=[
            QuotaNode(
                name=f"l{n}",
                min={"cpu": 2 * CORE},
                max={"cpu": total if n == 0 else 8 * CORE},
                namespaces=[f"l{n}"],
            )
            for n in range(leaves)
        ],
    )


def _stopping_engine(leaves: int, waiting: int) -> Engine:
    """As a dequeuer runs it (R7): leaf l0 borrows everything its neighbours do not use, in
    2-core jobs; then l1's 1-core head reclaims one of them. While that victim stops, every
    other leaf's waiting 1-core jobs ask within their guarantee and would fit in the core it
    frees beyond l1's need: reclaim refuses them without a search (room is coming)."""
    engine = Engine(EngineConfig())
    engine.apply(QuotaTreeApplied(root=_full_tree(leaves)), Millis(0))
    for n in range(leaves):
        engine.apply(observed("l0", f"b{n}", 2, created=n), Millis(0))
    engine.decide(Millis(1))
    for n in range(1, leaves):
        for m in range(waiting):
            engine.apply(observed(f"l{n}", f"w{m}", 1, created=100 + m), Millis(2))
    return engine


def test_a_pass_while_a_victim_stops_ends_after_its_preemption() -> None:
    """l1's first job reclaims one of l0's borrowed cores; the others would all fit once
    that core is free: the pass ends there instead of taking each of them."""
    taken: list[int] = []
    pop = decision_pass.DecisionPass.pop

    def counted(self: decision_pass.DecisionPass) -> object:
        taken[-1] += 1
        return pop(self)

    made = {}
    for kind in (PassEnd, NeverProven):
        engine = _stopping_engine(leaves=20, waiting=10)
        taken.append(0)
        with _pass_end(kind), patch.object(decision_pass.DecisionPass, "pop", counted):
            made[kind] = engine.decide(Millis(3))
    assert made[PassEnd] == made[NeverProven]
    assert [type(d).__name__ for d in made[PassEnd]][:2] == ["Preempted", "Admitted"]
    ended, dry = taken
    assert dry > 150 and ended < 20, taken  # 19 leaves x 10 waiting, against a handful


def _after_the_preemption() -> Engine:
    """Four leaves: l1 has reclaimed a 2-core job of l0 for its 1-core head, which stops."""
    engine = _stopping_engine(leaves=4, waiting=2)
    made = engine.decide(Millis(3))
    assert [type(d).__name__ for d in made] == ["Preempted", "Admitted"]
    assert engine.state.stops and not engine.state.held
    return engine


def test_plain_waiting_work_that_fits_once_the_victim_stopped_cannot_move() -> None:
    engine = _after_the_preemption()
    end = decision_pass.DecisionPass(engine, []).end
    assert not end.may_move(QuotaPath("root/l2"), None)
    assert not end.may_move(QuotaPath("root/l3"), None)
    assert end.may_move(QuotaPath("root/l0"), None) is False  # nothing waits there


def test_a_scalable_workload_keeps_its_leaf_open() -> None:
    """Grouped by the least it starts with, its whole request may still search."""
    engine = _after_the_preemption()
    event = observed("l2", "gang", 2, count=2, created=50)
    sets = [msgspec.structs.replace(event.pod_sets[0], min_count=1)]
    engine.apply(msgspec.structs.replace(event, pod_sets=sets), Millis(4))
    end = decision_pass.DecisionPass(engine, []).end
    assert end.may_move(QuotaPath("root/l2"), None)
    assert not end.may_move(QuotaPath("root/l3"), None)


def test_a_request_beyond_what_is_coming_keeps_its_leaf_open() -> None:
    """l3's 2-core job asks within its guarantee but would not fit in the one core coming
    free: reclaim searches for it."""
    engine = _after_the_preemption()
    engine.apply(observed("l3", "wide", 2, created=1), Millis(4))
    end = decision_pass.DecisionPass(engine, []).end
    assert end.may_move(QuotaPath("root/l3"), None)


def test_nothing_is_proven_while_a_preemptor_is_held() -> None:
    """A reclaim decided by another replica holds its preemptor (R7); its try drops the hold,
    so usage goes down within the pass: no proof is made."""
    engine = _stopping_engine(leaves=4, waiting=2)
    engine.apply(
        Preempted(
            workload=WorkloadKey("l0/b3"),
            queue=QueueName("l0"),
            quota=QuotaPath("root/l0"),
            preemptor=WorkloadKey("l1/w0"),
            reason=Reason(code="Reclaim", message="elsewhere"),
        ),
        Millis(3),
    )
    assert engine.state.held
    pass_ = decision_pass.DecisionPass(engine, [])
    pass_.end.failures = 10**6  # as if a look were long due
    assert not pass_.end.proven({}, 3)
