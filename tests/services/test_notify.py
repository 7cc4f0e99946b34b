"""``services.watcher.notify``, decision by decision: each decision people care about becomes
a core/v1 Event on its job with the type, reason and sentence ``kubectl describe job`` shows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from schemas import (
    Inadmissible,
    MemoryResize,
    Preempted,
    QueueName,
    QuotaPath,
    Reason,
    Requeued,
    Retried,
    WorkloadKey,
    Zone,
)
from services.watcher.notify import MAX_MESSAGE, Told, decision_event
from tests.builders import events

NOW = datetime(2026, 1, 5, 10, 30, tzinfo=UTC)
JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "train",
        "namespace": "user-a",
        "uid": "u-1",
        "creationTimestamp": "2026-01-05T10:18:00Z",
    },
}
Q, P = QueueName("root-a"), QuotaPath("root/a")
GI = 2**30


def retried(job: str | None, code: str = "OOMKilled") -> Retried:
    return Retried(
        workload=WorkloadKey("user-a/train"),
        queue=Q,
        quota=P,
        zone=Zone("default"),
        first=WorkloadKey("user-a/train"),
        attempt=1,
        limit=2,
        job=None if job is None else WorkloadKey(job),
        cause="OOMKilled",
        resized=[
            MemoryResize(
                pod_set="main",
                container="main",
                request=4 * GI,
                new_request=6 * GI,
                limit=None,
                new_limit=None,
            )
        ],
        reason=Reason(code=code, message="OOMKilled at 4Gi"),
    )


CASES: list[tuple[Told, str, str, str]] = [
    (
        events.admitted("user-a/train", 2, quota="root/a", queue="root-a", zone="a"),
        "Normal",
        "Admitted",
        "Admitted by Usher into root/a (queue root-a, zone a) after waiting 12m",
    ),
    (
        Preempted(
            workload=WorkloadKey("user-a/train"),
            queue=Q,
            quota=P,
            preemptor=WorkloadKey("user-b/urgent"),
            reason=Reason(code="Reclaim", message="root/b reclaims its min"),
        ),
        "Warning",
        "Preempted",
        "Preempted by Usher for user-b/urgent: root/b reclaims its min",
    ),
    (
        Requeued(
            workload=WorkloadKey("user-a/train"),
            queue=Q,
            quota=P,
            zone=Zone("default"),
            requests={"cpu": 1000},
            ready=0,
            total=1,
            attempt=2,
            max_attempts=2,
            retry_after_ms=None,
            reason=Reason(code="PodsNotReady", message="0/1 pods ready after 300 s"),
        ),
        "Warning",
        "Requeued",
        "Requeued by Usher after attempt 2 of 2: 0/1 pods ready after 300 s (its last attempt:"
        " inadmissible from now on)",
    ),
    (
        retried("user-a/train-retry-1"),
        "Warning",
        "Retried",
        "Attempt 1 OOMKilled: retried as user-a/train-retry-1 (1 of 2 retries): OOMKilled at 4Gi",
    ),
    (
        retried(None, "MemoryCapReached"),
        "Warning",
        "GaveUp",
        "Attempt 1 OOMKilled, not retried: OOMKilled at 4Gi",
    ),
    (
        Inadmissible(
            workload=WorkloadKey("user-a/train"),
            reason=Reason(code="ExceedsMax", message="cpu 200 > max 100"),
        ),
        "Warning",
        "Inadmissible",
        "Usher: cpu 200 > max 100",
    ),
]


@pytest.mark.parametrize(("decision", "kind", "reason", "message"), CASES)
def test_each_decision_becomes_its_event_on_the_job(
    decision: Told, kind: str, reason: str, message: str
) -> None:
    event = decision_event(decision, JOB, NOW)
    assert (event["type"], event["reason"], event["message"]) == (kind, reason, message)
    assert event["involvedObject"] == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "namespace": "user-a",
        "name": "train",
        "uid": "u-1",
    }
    assert event["metadata"] == {"generateName": "train.", "namespace": "user-a"}
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-01-05T10:30:00Z"
    assert event["source"] == {"component": "usher-watcher"}


def test_a_long_reason_is_cut_to_what_kubernetes_keeps() -> None:
    long = Inadmissible(
        workload=WorkloadKey("user-a/train"), reason=Reason(code="ExceedsMax", message="x" * 5000)
    )
    message = decision_event(long, JOB, NOW)["message"]
    assert len(message) == MAX_MESSAGE and message.endswith("...")


def test_an_admission_without_a_creation_time_says_no_wait() -> None:
    bare = {**JOB, "metadata": {"name": "train", "namespace": "user-a", "uid": "u-1"}}
    admitted = events.admitted("user-a/train", 2, quota="root/a", queue="root-a")
    assert decision_event(admitted, bare, NOW)["message"] == (
        "Admitted by Usher into root/a (queue root-a, zone default)"
    )
