"""R16 admitted jobs do not grow, in the engine: what counts is what was admitted.

An admitted job seen running while asking more than its admission counts keeps counting its
admitted size (``quota_used``, explain's requests) and says that it grew (``reason_now``);
the next pass of its zone stops it like a drain's preemption (its own preemptor), counted
until the ledger's ``Released``; then it waits at its new size like anyone. Asking as much or
less, or being seen suspended (an admission not carried out yet), changes nothing. Snapshots
keep it; the log checks accept the stop.
"""

from __future__ import annotations

from schemas import (
    Admitted,
    Millis,
    PodSet,
    Preempted,
    QueueName,
    QuotaPath,
    QuotaTreeApplied,
    Released,
    WorkloadKey,
    WorkloadObserved,
    Zone,
)
from tests.builders.events import cpu, observed
from tests.builders.log import BASE_MS, QA, Log
from tests.builders.log import A as LA
from tests.builders.trees import two_leaf_tree
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import restore, snapshot
from usher.core.history import explain
from usher.core.model.config import EngineConfig
from usher.core.state.indexed import JobState

A = QuotaPath("root/A")
B = QuotaPath("root/B")
JOB = WorkloadKey("a1/job")


def sized(cores: int, *, suspended: bool = False, pods: int = 1) -> WorkloadObserved:
    """``a1/job`` asking ``cores`` cpu per pod for ``pods`` pods, as the watcher sees it."""
    event = observed("a1", "job", cores * pods, count=pods)
    return WorkloadObserved(**{**_fields(event), "suspended": suspended})


def _fields(event: WorkloadObserved) -> dict[str, object]:
    return {name: getattr(event, name) for name in event.__struct_fields__}


def admitted_at_ten() -> Engine:
    """A running system's engine: ``a1/job`` (10 cpu) admitted in A, granted, running, and
    ``b1/other`` (40 cpu) admitted in B: 50 of the root's 100 cpu are used."""
    engine = Engine(EngineConfig())
    engine.apply(QuotaTreeApplied(root=two_leaf_tree()), Millis(0))
    engine.apply(sized(10, suspended=True), Millis(0))
    engine.apply(observed("b1", "other", 40), Millis(0))
    decisions = engine.decide(Millis(0))
    assert sorted(d.workload for d in decisions if isinstance(d, Admitted)) == [
        "a1/job",
        "b1/other",
    ]
    for decision in decisions:
        engine.apply(decision, Millis(0))
    engine.apply(sized(10), Millis(1000))  # the watcher unsuspended it: it runs
    assert engine.decide(Millis(1000)) == []
    return engine


def test_a_job_grown_after_admission_counts_its_admission_and_is_stopped() -> None:
    engine = admitted_at_ten()
    engine.apply(sized(95), Millis(2000))  # patched 10 -> 95 cpu with no webhook in the way
    # Nothing adopts the new size: what counts is what was admitted, and it says it grew.
    assert engine.quota_used()[A] == cpu(10)
    assert engine.counted_requests(JOB) == cpu(10)
    why = engine.reason_now(JOB)
    assert why is not None and why.code == "GrewAfterAdmission"
    assert (why.resource, why.used, why.requested) == ("cpu", 10_000, 95_000)
    assert why.message == (
        "the job grew after its admission (cpu 10 -> 95); its admission counts only what was "
        "admitted, so it is suspended and waits again at its new size"
    )
    assert engine.check_drain(JOB, Millis(2000)) is None  # the log checks accept its stop
    [stop] = engine.decide(Millis(2000))
    assert isinstance(stop, Preempted)
    assert (stop.workload, stop.preemptor, stop.quota, stop.reason) == (JOB, JOB, A, why)
    # Counted until its pods are seen stopped and the ledger's Released (R7).
    assert engine.quota_used()[A] == cpu(10)
    assert engine.decide(Millis(2500)) == []
    engine.apply(stop, Millis(2500))  # the ledger's decision back on the log: no change
    engine.apply(sized(95, suspended=True), Millis(3000))  # the watcher suspended it
    assert engine.quota_used()[A] == cpu(10)
    engine.apply(Released(workload=JOB, quota=A, requests=cpu(10), cause="Preempted"), Millis(4000))
    assert engine.quota_used().get(A, {}) == {}
    # It waits at its new size: 95 + the 40 of B do not fit the root's 100.
    assert engine.decide(Millis(5000)) == []
    view = engine.job_state(JOB)
    assert view is not None and view.state == JobState.PENDING
    assert view.reason is not None and view.reason.code == "QuotaExceeded"
    assert (view.reason.requested, view.reason.used) == (95_000, 40_000)
    assert engine.counted_requests(JOB) is None


def test_asking_as_much_or_less_or_being_suspended_changes_nothing() -> None:
    engine = admitted_at_ten()
    for event in (sized(10), sized(5, pods=2), sized(4), sized(95, suspended=True)):
        engine.apply(event, Millis(2000))
        assert engine.reason_now(JOB) is None
        assert engine.decide(Millis(2000)) == []
        assert engine.quota_used()[A] == cpu(10)
        view = engine.job_state(JOB)
        assert view is not None and view.state == JobState.ADMITTED
    engine.apply(sized(95), Millis(3000))
    engine.apply(sized(10), Millis(3000))  # changed back before a pass: nothing to stop
    assert engine.decide(Millis(3000)) == []


def test_more_pods_is_growth_and_the_snapshot_keeps_it() -> None:
    engine = admitted_at_ten()
    bigger = sized(10, pods=5)  # parallelism 1 -> 5
    assert bigger.pod_sets == [PodSet(name="main", count=5, requests=cpu(10))]
    engine.apply(bigger, Millis(2000))
    twin = restore(snapshot(engine), EngineConfig())
    assert twin.reason_now(JOB) == engine.reason_now(JOB)
    [stop] = twin.decide(Millis(2000))
    assert isinstance(stop, Preempted) and stop.reason.code == "GrewAfterAdmission"
    assert stop.reason.message.startswith("the job grew after its admission (cpu 10 -> 50)")


def test_an_engine_of_another_zone_only_applies_the_stop_from_the_log() -> None:
    engine = Engine(EngineConfig(zones=frozenset({Zone("elsewhere")})))
    engine.apply(QuotaTreeApplied(root=two_leaf_tree()), Millis(0))
    engine.apply(sized(10, suspended=True), Millis(0))
    grant = Admitted(
        workload=JOB, queue=QueueName("q"), quota=A, zone=Zone("default"), requests=cpu(10)
    )
    engine.apply(grant, Millis(0))
    engine.apply(sized(95), Millis(1000))
    assert engine.decide(Millis(1000)) == []  # not its zone: the zone's dequeuer stops it
    assert engine.quota_used()[A] == cpu(10)


def test_explain_shows_what_is_counted_and_that_the_job_grew() -> None:
    """``usher explain`` of a grown job: its requests are what its admission counts, its
    reason says it grew, and its history shows the new size and then its stop."""
    key = WorkloadKey("user-a/j")
    log = Log().tree(0).job(1, "user-a/j", 10).admitted(1, "user-a/j", 10)
    log.job(2, "user-a/j", 10, suspended=False).job(3, "user-a/j", 95, suspended=False)
    told = explain.explain(log.history(), EngineConfig(), key, Millis(BASE_MS + 4000))
    assert told.state == JobState.ADMITTED
    assert told.requests == {"cpu": "10"}
    assert told.reason is not None and told.reason.code == "GrewAfterAdmission"
    assert "requests cpu 95" in told.history[-1].detail
    text = explain.render_explain_table(told)
    assert "requests: cpu 10" in text and "GrewAfterAdmission" in text
    reason = told.reason
    log.add(4, Preempted(workload=key, queue=QA, quota=LA, preemptor=key, reason=reason))
    told = explain.explain(log.history(), EngineConfig(), key, Millis(BASE_MS + 5000))
    [line] = [line for line in told.history if line.what == "Preempted"]
    assert line.detail == "for growing on root/Department-a"
    assert line.reason == reason
