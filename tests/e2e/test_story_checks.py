"""The per-job story check of ``checks.py`` on hand-written logs.

An eviction (a preemption, or a requeue after the ready timeout, R10) ends an admission and
lets the job be admitted once more; an admission while quota is held, or after the job
finished, is a problem named with its log sequence.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from schemas.common import Reason
from schemas.decisions import Admitted, Preempted, Released, Requeued
from schemas.events import WorkloadFinished
from schemas.ids import Millis, QueueName, QuotaPath, WorkloadKey, Zone
from tests.e2e.checks import story_checks

JOB = WorkloadKey("l1/w00001")
OTHER = WorkloadKey("l2/w00002")
WHY = Reason(code="PodsNotReady", message="0/1 pods ready after 10 s")


def admitted(key: WorkloadKey = JOB) -> Admitted:
    return Admitted(workload=key, queue=QueueName("q"), quota=QuotaPath("root/l1"),
                    zone=Zone("a"), requests={"cpu": 1000})  # fmt: skip


def released(key: WorkloadKey = JOB) -> Released:
    return Released(workload=key, quota=QuotaPath("root/l1"), requests={"cpu": 1000},
                    cause="Preempted")  # fmt: skip


def requeued(retry_after_ms: int | None) -> Requeued:
    return Requeued(
        workload=JOB, queue=QueueName("q"), quota=QuotaPath("root/l1"), zone=Zone("a"),
        requests={"cpu": 1000}, ready=0, total=1, attempt=1, max_attempts=2,
        retry_after_ms=None if retry_after_ms is None else Millis(retry_after_ms), reason=WHY,
    )  # fmt: skip


def preempted() -> Preempted:
    return Preempted(workload=JOB, queue=QueueName("q"), quota=QuotaPath("root/l1"),
                     preemptor=OTHER, reason=WHY)  # fmt: skip


def finished() -> WorkloadFinished:
    return WorkloadFinished(workload=JOB)


def log(*events: Any) -> list[tuple[int, str, Any]]:
    return [(seq, "", SimpleNamespace(event=e)) for seq, e in enumerate(events, start=1)]


@pytest.mark.parametrize(
    "events",
    [
        (admitted(), released(), finished()),
        (admitted(), preempted(), released(), admitted(), released(), finished()),
        (admitted(), requeued(1000), released(), admitted(), released(), finished()),
        # Finished before the ledger carried the preemption out: nothing left to admit.
        (admitted(), preempted(), finished(), released()),
    ],
    ids=["plain", "preempted-then-readmitted", "requeued-then-readmitted", "finished-first"],
)
def test_a_consistent_story_passes(events: tuple[Any, ...]) -> None:
    story_checks(log(*events), {JOB})


@pytest.mark.parametrize(
    ("events", "problem"),
    [
        ((admitted(), released(), admitted(), released()),
         "admitted 2x, preempted 0x, requeued 0x"),
        ((admitted(), admitted(), released()), "seq 2: l1/w00001 admitted while it still holds"),
        ((admitted(), released(), finished(), admitted(), released()),
         "seq 4: l1/w00001 admitted after it finished"),
        # A last requeue (no retry) ends the job: it must not be admitted again.
        ((admitted(), requeued(None), released(), admitted(), released()), "admitted 2x"),
        ((admitted(),), "l1/w00001 still holds quota at the end"),
    ],
    ids=["readmitted-unevicted", "double", "after-finish", "after-last-requeue", "held"],
)  # fmt: skip
def test_a_broken_story_is_named(events: tuple[Any, ...], problem: str) -> None:
    with pytest.raises(AssertionError) as failed:
        story_checks(log(*events), {JOB})
    assert problem in str(failed.value)
