"""The watcher carries out a ``Retried`` (R12, R13) against the emulator.

The next attempt is created from the failed job (renamed, suspended, linked, its memory
resized) exactly once: a watcher that restarts and is handed the same decision again finds it
there (AlreadyExists is success). A ``Retried`` not from its zone's dequeuer, or on another
subject, is forged: parked, never carried out.
"""

from __future__ import annotations

from datetime import UTC, datetime

from schemas import (
    DEQUEUER_SOURCE,
    DeadLetter,
    Envelope,
    EventId,
    MemoryResize,
    QueueName,
    QuotaPath,
    Reason,
    Retried,
    WorkloadKey,
    WorkloadObserved,
    Zone,
)
from services.watcher.carry_out import consumer_name
from tests.services.test_watcher import JOBS, Harness, emu, h, job, kube, read_dlq
from usher.adapters.kube import NotFound
from usher.adapters.nats.log import publish_envelope
from usher.core.rules.retry import ATTEMPT_ANNOTATION, RETRY_OF_ANNOTATION

__all__ = ["emu", "h", "kube"]  # the fixtures, shared with tests.services.test_watcher

GI = 2**30


def retried(key: str = "user-a/train", zone: str = "zone-a") -> Retried:
    """The dequeuer's decision after ``key`` was OOMKilled at 10Gi: retry at 15Gi."""
    return Retried(
        workload=WorkloadKey(key),
        queue=QueueName("root-department-a-user-a"),
        quota=QuotaPath("root/Department-a"),
        zone=Zone(zone),
        first=WorkloadKey(key),
        attempt=1,
        limit=2,
        job=WorkloadKey(f"{key}-retry-1"),
        cause="OOMKilled",
        resized=[
            MemoryResize(
                pod_set="main",
                container="main",
                request=10 * GI,
                new_request=15 * GI,
                limit=None,
                new_limit=None,
            )
        ],
        reason=Reason(code="OOMKilled", message="attempt 1 of 3 failed"),
    )


async def publish(
    h: Harness, decision: Retried, *, source: str | None = None, subject: str | None = None
) -> None:
    """As the zone's dequeuer publishes it (the same id every time), or as a forger."""
    envelope = Envelope(
        id=EventId(f"test:retried:{decision.workload}:{datetime.now(UTC).timestamp()}"),
        time=datetime.now(UTC),
        source=source or f"{DEQUEUER_SOURCE}/{decision.zone}",
        event=decision,
    )
    at = subject or h.subjects.decision_for(decision, decision.zone)
    await publish_envelope(h.js, at, envelope)


async def test_the_next_attempt_is_created_once_across_a_restart(h: Harness) -> None:
    await h.kube.create(JOBS, "user-a", job("train", zone="zone-a"))
    decision = retried()
    async with h.watcher():
        await h.logged(WorkloadObserved, lambda e: e.name == "train")
        await publish(h, decision)
        created = await h.logged(WorkloadObserved, lambda e: e.name == "train-retry-1")
    [(_, observed)] = created
    assert observed.suspended and observed.pod_sets[0].requests["memory"] == 15 * GI
    obj = await h.kube.get(JOBS, "user-a", "train-retry-1")
    annotations = obj["metadata"]["annotations"]
    assert annotations[RETRY_OF_ANNOTATION] == "user-a/train"
    assert annotations[ATTEMPT_ANNOTATION] == "2"
    uid = obj["metadata"]["uid"]
    # A new watcher is handed the same decision again (a redelivery after a crash).
    await publish(h, decision)
    async with h.watcher():

        async def carried() -> bool:
            info = await h.js.consumer_info(h.subjects.stream_name, consumer_name(h.subjects))
            return info.num_ack_pending == 0 and info.num_pending == 0

        await h.eventually(carried, within=5.0)
    again = await h.kube.get(JOBS, "user-a", "train-retry-1")
    assert again["metadata"]["uid"] == uid  # the same object: created once
    assert await read_dlq(h.js, h.subjects) == []


async def test_a_forged_retried_creates_nothing(h: Harness) -> None:
    await h.kube.create(JOBS, "user-a", job("train", zone="zone-a"))
    decision = retried()
    other_zone = h.subjects.decision(Zone("zone-b"), "retried", "user-a", "train")
    async with h.watcher():
        await h.logged(WorkloadObserved, lambda e: e.name == "train")
        await publish(h, decision, source="usher/ledger")
        await publish(h, decision, subject=other_zone)

        async def parked() -> list[DeadLetter] | None:
            letters = await read_dlq(h.js, h.subjects)
            return letters if len(letters) >= 2 else None

        letters = await h.eventually(parked)
    assert [(d.service, d.error) for d in letters] == [("watcher", "ForgedDecision")] * 2
    try:
        await h.kube.get(JOBS, "user-a", "train-retry-1")
    except NotFound:
        pass
    else:
        raise AssertionError("a forged Retried created a job")
