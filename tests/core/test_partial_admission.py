"""Partial admission in the engine as a dequeuer runs it, in snapshots and in the audit (R11).

Scenarios 44 and 45 pin the rule with instant release; here: what the ``Admitted`` carries,
that a reverted reclaim gives a partially admitted victim back exactly what it held, that a
snapshot keeps the least a waiting job may start with, and that the audit checks the pods.
"""

from __future__ import annotations

from schemas import (
    Admitted,
    Millis,
    PodSet,
    Preempted,
    QuotaPath,
    QuotaTreeApplied,
    Reason,
    WorkloadKey,
    WorkloadObserved,
    WorkloadProgress,
    Zone,
)
from tests.builders.events import CORE
from tests.builders.log import QA, Log
from tests.builders.trees import two_leaf_tree
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import restore, snapshot
from usher.core.history import audit
from usher.core.model.config import EngineConfig

A = QuotaPath("root/A")
TRAINER = WorkloadKey("a1/trainer")


def gang(
    namespace: str, name: str, pods: int, least: int | None, created: int = 0
) -> WorkloadObserved:
    """``pods`` pods of one cpu each; ``least`` the declared minimum (R11)."""
    return WorkloadObserved(
        workload=WorkloadKey(f"{namespace}/{name}"),
        namespace=namespace,
        name=name,
        kind="batch/v1/Job",
        zone=Zone("default"),
        created_ms=Millis(created),
        pod_sets=[PodSet(name="main", count=pods, requests={"cpu": CORE}, min_count=least)],
    )


def engine_with(*events: WorkloadObserved, attributes: dict[str, str] | None = None) -> Engine:
    """Root 10 cpu over A (min 6) and B (min 4), each up to 10; a running system's engine."""
    engine = Engine(EngineConfig())
    tree = two_leaf_tree(a_min=6, a_max=10, b_min=4, b_max=10, total=10, a_attributes=attributes)
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    for event in events:
        engine.apply(event, Millis(0))
    return engine


def test_the_admission_carries_the_pods_and_the_reason() -> None:
    engine = engine_with(
        gang("b1", "small", 2, None),
        gang("a1", "trainer", 12, 4, created=1),
        attributes={"usher.io/ready-timeout-seconds": "60"},
    )
    small, trainer = engine.decide(Millis(0))
    assert isinstance(small, Admitted) and small.reason is None and small.pod_counts is None
    assert isinstance(trainer, Admitted)
    assert trainer.pod_counts == {"main": 8}
    assert trainer.requests == {"cpu": 8 * CORE}
    assert trainer.reason is not None and trainer.reason.message == (
        "8 of 12 pods admitted (min 4); root/A cpu 2 short for 12"
    )
    assert engine.quota_used()[A] == {"cpu": 8 * CORE}
    # The ledger's grant changes nothing; the ready deadline counts the 8 admitted pods.
    engine.apply(trainer, Millis(10))
    assert engine.quota_used()[QuotaPath("root")] == {"cpu": 10 * CORE}
    engine.apply(WorkloadProgress(workload=TRAINER, ready=8, total=8), Millis(20))
    assert engine.decide(Millis(100_000)) == []


def test_a_whole_gang_that_fits_is_not_cut() -> None:
    engine = engine_with(gang("a1", "trainer", 6, 2))
    [admitted] = engine.decide(Millis(0))
    assert isinstance(admitted, Admitted) and admitted.pod_counts is None


def test_the_minimum_that_does_not_fit_waits() -> None:
    engine = engine_with(gang("a1", "big", 8, None), gang("a1", "trainer", 6, 3, created=1))
    [big] = engine.decide(Millis(0))
    assert big.workload == "a1/big"
    view = engine.job_state(TRAINER)
    assert view is not None and view.state == "Pending"
    assert view.reason is not None and view.reason.code == "QuotaExceeded"


def test_a_reverted_reclaim_gives_the_victim_back_what_it_held() -> None:
    engine = engine_with(gang("a1", "trainer", 12, 4))
    [trainer] = engine.decide(Millis(0))
    assert isinstance(trainer, Admitted) and trainer.requests == {"cpu": 10 * CORE}
    engine.apply(gang("b1", "claim", 4, None, created=1), Millis(1))
    decisions = engine.decide(Millis(1))
    assert [type(d) for d in decisions] == [Preempted, Admitted]
    victims = [d for d in decisions if isinstance(d, Preempted)]
    engine.revert_preemption(
        WorkloadKey("b1/claim"), victims, Reason(code="StaleView", message="refused")
    )
    assert engine.quota_used()[A] == {"cpu": 10 * CORE}
    assert engine.quota_used()[QuotaPath("root")] == {"cpu": 10 * CORE}


def test_a_snapshot_keeps_the_least_a_waiting_job_may_start_with() -> None:
    engine = engine_with(gang("a1", "big", 8, None), gang("a1", "trainer", 6, 3, created=1))
    engine.decide(Millis(0))
    twin = restore(snapshot(engine), engine.config)
    assert snapshot(twin) == snapshot(engine)
    engine.apply(gang("b1", "tiny", 1, None, created=2), Millis(5))
    twin.apply(gang("b1", "tiny", 1, None, created=2), Millis(5))
    assert engine.decide(Millis(5)) == twin.decide(Millis(5))


def partial_log(pods: int) -> Log:
    """A job of 12 pods (min 4) admitted with ``pods`` of them."""
    log = Log().tree()
    log.add(1, gang("user-a", "trainer", 12, 4))
    return log.add(
        1.1,
        Admitted(
            workload=WorkloadKey("user-a/trainer"),
            queue=QA,
            quota=QuotaPath("root/Department-a"),
            zone=Zone("default"),
            requests={"cpu": pods * CORE},
            pod_counts={"main": pods},
        ),
        id="ledger:admitted:user-a/trainer:1",
    )


def test_the_audit_checks_a_partial_admissions_pods() -> None:
    findings, _ = audit.audit_log(partial_log(8).history(), EngineConfig())
    assert findings == []
    below, _ = audit.audit_log(partial_log(3).history(), EngineConfig())
    assert [(f.check, f.seq) for f in below] == [("wrong-requests", 3)]
    assert "it may start with 4 to 12" in below[0].message
