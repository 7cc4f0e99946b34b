"""One preemption group per preemptor, in a running system's engine (docs/admission-rules.md R7).

Scenarios release at once, so they cannot hold a victim stopping; here the engine decides as a
dequeuer does. A preemptor deleted while its hold waits leaves its victims stopping in its
group; the same workload created again must not preempt before they have stopped (the ledger
refuses it too: ``tests/adapters/test_ledger_store.py``), else two preemptions' victims and
one hold would be counted as one group.
"""

from __future__ import annotations

from schemas import (
    Millis,
    Preempted,
    QuotaPath,
    QuotaTreeApplied,
    Released,
    WorkloadDeleted,
    WorkloadKey,
)
from tests.builders.events import CORE, observed
from tests.builders.trees import two_leaf_tree
from usher.core.engine.facade import Engine
from usher.core.model.config import EngineConfig

A = QuotaPath("root/A")
B = QuotaPath("root/B")
P = WorkloadKey("a1/p")
VICTIM = WorkloadKey("b1/small")  # the newest borrower goes first
OTHER = WorkloadKey("b1/big")


def kinds(decisions: list[object]) -> list[tuple[str, str]]:
    return [(type(d).__name__, str(getattr(d, "workload", ""))) for d in decisions]


def borrowed() -> Engine:
    """B (min 40) runs big (70 cpu), then small (30): it borrows 60 of A's guarantee."""
    engine = Engine(EngineConfig())
    engine.apply(QuotaTreeApplied(root=two_leaf_tree()), Millis(0))
    for index, (name, cores) in enumerate((("big", 70), ("small", 30))):
        engine.apply(observed("b1", name, cores, created=index), Millis(index))
        for decision in engine.decide(Millis(index)):
            engine.apply(decision, Millis(index))
    return engine


def test_a_preemptor_created_again_waits_for_the_victims_of_its_first_life() -> None:
    engine = borrowed()
    engine.apply(observed("a1", "p", 30, created=10), Millis(10))
    first = engine.decide(Millis(10))
    assert kinds(first) == [("Preempted", str(VICTIM)), ("Admitted", str(P))]
    preempted = first[0]
    assert isinstance(preempted, Preempted)
    engine.apply(preempted, Millis(10))

    # p is deleted while held; its victim still runs until seen stopped, and counts whole.
    engine.apply(WorkloadDeleted(workload=P), Millis(20))
    # The ledger releases the hold; the victim is not seen stopped yet.
    engine.apply(
        Released(workload=P, quota=A, requests={"cpu": 30 * CORE}, cause="Deleted"), Millis(21)
    )
    assert engine.quota_used()[QuotaPath("root")]["cpu"] == 100 * CORE
    # Created again, larger (60): small's 30 will not make room, big would (with small counted).
    engine.apply(observed("a1", "p", 60, created=30), Millis(30))
    assert engine.decide(Millis(30)) == []  # no second preemption for the same preemptor
    view = engine.job_state(P)
    assert view is not None and view.state.value == "Pending"

    engine.apply(
        Released(workload=VICTIM, quota=B, requests={"cpu": 30 * CORE}, cause="Preempted"),
        Millis(40),
    )
    # The victim stopped: now p preempts anew, in a group of its own; small, back in its
    # queue, takes the 30 left beside max(big 70, p's hold 60).
    assert kinds(engine.decide(Millis(40))) == [
        ("Preempted", str(OTHER)),
        ("Admitted", str(P)),
        ("Admitted", str(VICTIM)),
    ]
    assert engine.quota_used()[QuotaPath("root")]["cpu"] == 100 * CORE


def test_the_check_of_a_reclaim_decided_elsewhere_says_why() -> None:
    engine = borrowed()
    engine.apply(observed("a1", "p", 30, created=10), Millis(10))
    [preempted, _] = engine.decide(Millis(10))
    engine.apply(preempted, Millis(10))
    engine.apply(WorkloadDeleted(workload=P), Millis(20))
    engine.apply(observed("a1", "p", 50, created=30), Millis(30))
    refusal = engine.check_preemption(P, [OTHER], Millis(31))
    assert refusal is not None
    assert (refusal.code, refusal.blocker) == ("PreemptionInProgress", str(VICTIM))
