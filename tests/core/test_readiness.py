"""Readiness after admission in a running system's engine (docs/admission-rules.md R10).

Scenarios (tests/scenarios/40-43) pin the rules with instant release; here the engine decides
as a dequeuer does: a requeued workload keeps counting, like a preempted victim, until the
ledger's ``Released`` is on the log, and is not offered before that or before its backoff.
"""

from __future__ import annotations

import pytest

from schemas import (
    Admitted,
    Millis,
    Preempted,
    QueueName,
    QuotaPath,
    QuotaTreeApplied,
    Reason,
    Released,
    Requeued,
    WorkloadKey,
    WorkloadProgress,
    Zone,
)
from tests.builders.events import CORE, observed
from tests.builders.trees import two_leaf_tree
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import restore, snapshot
from usher.core.model.config import EngineConfig, ReadinessPolicy
from usher.core.state.indexed import JobState

ROOT = QuotaPath("root")
A = QuotaPath("root/A")
B = QuotaPath("root/B")
QUEUE_A = QueueName("root-a-a1")
STUCK = WorkloadKey("a1/stuck")
OTHER = WorkloadKey("b1/other")
ATTRIBUTES = {
    "usher.io/ready-timeout-seconds": "60",
    "usher.io/requeue-backoff-seconds": "10",
    "usher.io/requeue-max-attempts": "2",
}


MAY_PREEMPT = {**ATTRIBUTES, "usher.io/requeued-may-preempt": "true"}


def running(config: EngineConfig | None = None, attributes: dict[str, str] = ATTRIBUTES) -> Engine:
    """A running system's engine (no instant release): stuck (4 pods, 60 cpu) admitted at 0,
    other (60 cpu) waiting in B behind it; A's ready timeout is 60 s."""
    engine = Engine(config or EngineConfig())
    engine.apply(QuotaTreeApplied(root=two_leaf_tree(a_attributes=attributes)), Millis(0))
    engine.apply(observed("a1", "stuck", 60, count=4), Millis(0))
    [admitted] = engine.decide(Millis(0))
    assert isinstance(admitted, Admitted)
    # The ledger's grant on the log: the ready deadline runs from it.
    engine.apply(admitted, Millis(0))
    engine.apply(observed("b1", "other", 60, created=1), Millis(1))
    assert engine.decide(Millis(1)) == []
    return engine


def used(engine: Engine, path: QuotaPath = ROOT) -> int:
    return engine.quota_used()[path].get("cpu", 0) // CORE


def test_the_deadline_is_a_wakeup_and_the_requeue_keeps_counting_until_released() -> None:
    engine = running()
    engine.apply(WorkloadProgress(workload=STUCK, ready=3, total=4), Millis(30_000))
    assert engine.next_wakeup() == 60_000
    [requeued] = engine.decide(Millis(60_000))
    assert isinstance(requeued, Requeued)
    assert (requeued.attempt, requeued.max_attempts, requeued.retry_after_ms) == (1, 2, 70_000)
    assert requeued.reason.message == (
        "3/4 pods ready after 60 s, attempt 1 of 2, next try after 10 s"
    )
    # Its pods may still run: it counts (R7), other does not fit, nobody borrows it away.
    assert used(engine) == 60 and used(engine, A) == 60
    view = engine.job_state(STUCK)
    assert view is not None and view.state == JobState.PENDING
    reason = engine.reason_now(STUCK)
    assert reason is not None and reason.code == "RequeueBackoff"
    assert "not seen stopped" in reason.message
    # Past its backoff but not released: still not offered.
    assert [type(d) for d in engine.decide(Millis(80_000))] == []
    engine.apply(
        Released(workload=STUCK, quota=A, requests={"cpu": 60 * CORE}, cause="Requeued"),
        Millis(81_000),
    )
    assert used(engine) == 0
    # Released: offered again at its place, before other (A is within its guarantee).
    decisions = engine.decide(Millis(81_000))
    assert [(type(d), d.workload) for d in decisions] == [(Admitted, STUCK)]


@pytest.mark.parametrize("may_preempt", [False, True])
def test_a_requeued_gang_waits_for_its_backoff_once_released(may_preempt: bool) -> None:
    engine = running(attributes=MAY_PREEMPT if may_preempt else ATTRIBUTES)
    [requeued] = engine.decide(Millis(60_000))
    assert isinstance(requeued, Requeued)
    engine.apply(
        Released(workload=STUCK, quota=A, requests={"cpu": 60 * CORE}, cause="Requeued"),
        Millis(61_000),
    )
    # other takes the quota; stuck waits for its backoff (70 s) at its place.
    assert [(type(d), d.workload) for d in engine.decide(Millis(61_000))] == [(Admitted, OTHER)]
    reason = engine.reason_now(STUCK)
    assert reason is not None and reason.code == "RequeueBackoff"
    assert "offered again in 9 s" in reason.message
    assert engine.next_wakeup() == 70_000
    decisions = engine.decide(Millis(70_000))
    if not may_preempt:
        # Requeued for readiness, it takes only free room: B's borrower keeps running.
        assert decisions == []
        return
    # Allowed by its tree: like anyone within its guarantee, it reclaims what B borrows.
    assert [(type(d), d.workload) for d in decisions] == [(Preempted, OTHER), (Admitted, STUCK)]


def test_the_last_attempt_ends_it_inadmissible() -> None:
    engine = running(EngineConfig(instant_release=True), MAY_PREEMPT)
    engine.decide(Millis(60_000))
    admitted = engine.decide(Millis(70_000))[-1]
    assert isinstance(admitted, Admitted) and admitted.workload == STUCK
    decisions = engine.decide(Millis(130_000))
    # Requeued for the last time (which says it is inadmissible now); other gets in.
    assert [(type(d).__name__, d.workload) for d in decisions] == [
        ("Requeued", STUCK),
        ("Admitted", OTHER),
    ]
    final = decisions[0]
    assert isinstance(final, Requeued) and final.retry_after_ms is None
    assert final.reason.message.endswith("attempt 2 of 2, no attempts left")
    view = engine.job_state(STUCK)
    assert view is not None and view.state == JobState.INADMISSIBLE
    # A new tree re-maps waiting workloads: it stays inadmissible for good.
    engine.apply(QuotaTreeApplied(root=two_leaf_tree(a_attributes=ATTRIBUTES)), Millis(131_000))
    view = engine.job_state(STUCK)
    assert view is not None and view.state == JobState.INADMISSIBLE


def test_ready_in_time_stops_the_deadline() -> None:
    engine = running()
    engine.apply(WorkloadProgress(workload=STUCK, ready=4, total=4), Millis(59_000))
    assert engine.decide(Millis(60_000)) == []
    assert engine.next_wakeup() is None


def test_a_requeue_preempted_by_the_ledger_moves_to_the_preemptors_group() -> None:
    """The ledger preempted the workload before it read the requeue: it counts once."""
    engine = running()
    engine.decide(Millis(60_000))
    reason = Reason(code="Reclaim", message="other reclaims")
    engine.apply(
        Preempted(
            workload=STUCK,
            queue=QUEUE_A,
            quota=A,
            preemptor=OTHER,
            reason=reason,
        ),
        Millis(60_500),
    )
    # Victim 60 whole, other's hold carved out of it: still 60 on the root.
    assert used(engine) == 60
    engine.apply(
        Released(workload=STUCK, quota=A, requests={"cpu": 60 * CORE}, cause="Preempted"),
        Millis(61_000),
    )
    assert used(engine) == 60 and used(engine, A) == 0  # other's hold only


def test_the_deadline_runs_from_the_ledgers_grant() -> None:
    """The deciding engine and every replay agree: the deadline starts at the Admitted."""
    engine = running()
    engine.apply(
        Admitted(
            workload=STUCK,
            queue=QUEUE_A,
            quota=A,
            zone=Zone("default"),
            requests={"cpu": 60 * CORE},
        ),
        Millis(2_000),
    )
    assert engine.decide(Millis(61_000)) == []
    assert [type(d) for d in engine.decide(Millis(62_000))] == [Requeued]


def test_a_snapshot_keeps_readiness() -> None:
    engine = running()
    engine.apply(WorkloadProgress(workload=STUCK, ready=1, total=4), Millis(10_000))
    twin = restore(snapshot(engine), engine.config)
    assert snapshot(twin) == snapshot(engine)
    assert engine.decide(Millis(60_000)) == twin.decide(Millis(60_000))


@pytest.mark.parametrize(
    ("attempt", "wait_s"), [(1, 10), (2, 20), (3, 40), (4, 45), (40, 45), (0, 0)]
)
def test_backoff_doubles_up_to_its_cap(attempt: int, wait_s: int) -> None:
    policy = ReadinessPolicy(timeout_ms=1, backoff_base_ms=10_000, backoff_cap_ms=45_000)
    assert policy.backoff_ms(attempt) == wait_s * 1000


def test_bad_policies_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="timeout_ms"):
        ReadinessPolicy(timeout_ms=-1)
    with pytest.raises(ValueError, match="max_attempts"):
        ReadinessPolicy(max_attempts=0)


def test_a_preemptors_deadline_starts_with_its_grant() -> None:
    """A preemptor waits, held, for its victims to stop: no requeue before its Admitted."""
    engine = Engine(EngineConfig())
    engine.apply(QuotaTreeApplied(root=two_leaf_tree(a_attributes=ATTRIBUTES)), Millis(0))
    engine.apply(observed("b1", "big", 100), Millis(0))
    [admitted] = engine.decide(Millis(0))
    assert isinstance(admitted, Admitted)
    engine.apply(observed("a1", "pre", 60, created=1, count=2), Millis(1))
    decisions = engine.decide(Millis(1))
    assert [type(d) for d in decisions] == [Preempted, Admitted]
    assert engine.decide(Millis(100_000)) == []  # its victim never stopped: still held
    grant = decisions[1]
    assert isinstance(grant, Admitted)
    engine.apply(grant, Millis(120_000))
    assert engine.decide(Millis(179_999)) == []
    [requeued] = engine.decide(Millis(180_000))
    assert isinstance(requeued, Requeued) and requeued.workload == "a1/pre"
    assert requeued.reason.message.startswith("0/2 pods ready after 60 s")  # since its grant


def test_no_deadline_runs_before_the_ledgers_grant() -> None:
    """A pass's own admission is only proposed: a log that lags the ledger requeues nothing."""
    engine = Engine(EngineConfig())
    engine.apply(QuotaTreeApplied(root=two_leaf_tree(a_attributes=ATTRIBUTES)), Millis(0))
    engine.apply(observed("a1", "stuck", 60, count=4), Millis(0))
    [admitted] = engine.decide(Millis(0))
    assert engine.next_wakeup() is None
    assert engine.decide(Millis(300_000)) == []
    engine.apply(admitted, Millis(300_000))
    assert engine.next_wakeup() == 360_000
