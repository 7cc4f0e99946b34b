"""R10 readiness backoff as a gate: a workload requeued for readiness waits out its backoff.

What it does: shuts a workload requeued because its pods were not ready in time while its
backoff runs, or while the usage of its earlier admission still lingers until the ledger
releases it (R7); says so with the attempt, the attempts allowed and the time left; the
backoff's end is when the answer changes by time alone.
What it must never do: shut a workload that was never requeued, or read a clock (``now`` is
the state's).
"""

from __future__ import annotations

from schemas import Millis, Reason
from usher.core.gates.view import AdmissionView, Gate, Opening, Timed
from usher.core.model import reasons
from usher.core.state.indexed import Job


def shuts(view: AdmissionView, job: Job) -> bool:
    record = job.readiness
    if record is None or not record.requeues:
        return False
    return record.not_before_ms > view.state.now or view.stopping_for(job.key) is not None


def reason(view: AdmissionView, job: Job) -> Reason:
    record = job.readiness
    assert record is not None and job.leaf is not None
    return reasons.requeue_backoff(
        record.requeues,
        view.state.tree.nodes[job.leaf].readiness.max_attempts,
        record.not_before_ms - view.state.now,
        view.stopping_for(job.key) is not None,
    )


def opens(view: AdmissionView, job: Job) -> Opening:
    record = job.readiness
    if record is None or record.not_before_ms <= view.state.now:
        # Only the release of its lingering usage opens it (R7).
        return Opening(on="the usage of its earlier admission is released")
    return Opening(at_ms=Millis(record.not_before_ms), on="its readiness backoff ends")


GATE = Gate(
    name="R10 readiness backoff",
    says="it was requeued for readiness and its backoff runs (R10)",
    shuts=shuts,
    reason=reason,
    timed=Timed.WHEN_SHUT,
    opens=opens,
)
