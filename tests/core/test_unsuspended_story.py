"""A job created unsuspended where no admission webhook ran (issue 28): the watcher suspends
it and says so on the log (``not-admitted``); ``usher explain`` tells that story -- created
unsuspended, suspended by Usher and queued, how long its pods could run -- instead of
labelling the job ``rejected``, and the job is explained as what it is now (pending, here).
"""

from __future__ import annotations

from schemas import (
    FieldError,
    Millis,
    PodSet,
    WorkloadKey,
    WorkloadObserved,
    WorkloadRejected,
    Zone,
)
from tests.builders.log import BASE_MS, CPU, Log
from usher.core.history import explain
from usher.core.intake.workload import NOT_ADMITTED
from usher.core.model.config import EngineConfig
from usher.core.state.indexed import JobState

JOB = WorkloadKey("user-a/eager")
UNADMITTED = FieldError(
    path="spec.suspend",
    code=NOT_ADMITTED,
    message="user-a/eager was running without an admission from Usher (spec.suspend false); "
    "suspended: it waits in its queue like every other job",
)


def _observed(created_s: float, cpu: int) -> WorkloadObserved:
    return WorkloadObserved(
        workload=JOB,
        namespace="user-a",
        name="eager",
        kind="batch/v1/Job",
        zone=Zone("default"),
        created_ms=Millis(BASE_MS + int(created_s * 1000)),
        pod_sets=[PodSet(name="main", count=1, requests={"cpu": cpu * CPU})],
        suspended=True,
    )


def _log(cpu: int) -> Log:
    """Created at t=10 s unsuspended; the watcher suspended it 30 ms later and published
    ``not-admitted``, then observed it suspended."""
    rejected = WorkloadRejected(workload=JOB, kind="batch/v1/Job", errors=[UNADMITTED])
    return Log().tree(0).add(10.030, rejected).add(10.040, _observed(10, cpu))


def test_explain_tells_a_job_created_unsuspended_as_suspended_and_queued() -> None:
    log = _log(cpu=1)  # no pass ran on this log: it waits
    e = explain.explain(log.history(), EngineConfig(), JOB, Millis(BASE_MS + 20_000))
    assert e.state == JobState.PENDING
    first = e.history[0]
    assert first.what == "suspended"
    assert first.detail == (
        "created unsuspended; suspended by Usher and queued (no admission webhook suspended "
        "it at creation: its pods could run 0.03 s)"
    )
    text = explain.render_explain_table(e)
    assert "rejected" not in text


def test_a_job_unsuspended_later_without_an_admission_is_told_so() -> None:
    rejected = WorkloadRejected(workload=JOB, kind="batch/v1/Job", errors=[UNADMITTED])
    log = _log(cpu=1).add(60, rejected).add(60.01, _observed(10, 1))
    e = explain.explain(log.history(), EngineConfig(), JOB, Millis(BASE_MS + 70_000))
    assert e.state == JobState.PENDING
    assert [line.what for line in e.history] == ["suspended", "observed", "suspended", "observed"]
    assert e.history[2].detail == (
        "unsuspended without an admission; suspended by Usher and queued again"
    )


def test_a_manifest_rejected_for_a_real_error_stays_rejected() -> None:
    bad = FieldError(path="spec.template", code="invalid", message="no containers")
    log = Log().tree(0).add(1, WorkloadRejected(workload=JOB, kind="batch/v1/Job", errors=[bad]))
    e = explain.explain(log.history(), EngineConfig(), JOB, Millis(BASE_MS + 2_000))
    assert e.state == JobState.REJECTED
    assert e.history[0].what == "rejected"


def test_the_feed_tells_the_same_story_as_explain() -> None:
    """The console's feed and the live view (the people's projection of the log) label the
    watcher's suspension ``suspend``, not ``reject``, with explain's own words, once the
    first observation says when the job was created."""
    from usher.client.state import FEED_SUSPENDED, PeopleProjection

    log = _log(cpu=1)
    state = PeopleProjection()
    for item in log.history().items:
        state.apply(item)
    [told] = [d for d in state.decisions if d.job == JOB]
    e = explain.explain(log.history(), EngineConfig(), JOB, Millis(BASE_MS + 20_000))
    assert (told.action, told.reason) == (FEED_SUSPENDED, e.history[0].detail)
    assert told.action != "reject"
