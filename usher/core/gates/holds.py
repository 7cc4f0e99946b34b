"""R14/R15 holds as a gate: a leaf below a held (or draining) node admits nothing new.

What it does: shuts every waiting workload of a held leaf but a preemptor the ledger already
holds capacity for (``job.held``), naming the nearest hold, who ordered it and why; closes
the whole leaf for pruning.
What it must never do: judge an order (``usher.core.rules.holds`` does), or read a clock.
"""

from __future__ import annotations

from schemas import QuotaPath, Reason
from usher.core.gates.view import AdmissionView, Gate, Opening
from usher.core.state.indexed import Job


def held(view: AdmissionView, leaf: QuotaPath) -> bool:
    return view.hold_over(leaf) is not None


def shuts(view: AdmissionView, job: Job) -> bool:
    return not job.held and job.leaf is not None and held(view, job.leaf)


def reason(view: AdmissionView, job: Job) -> Reason:
    assert job.leaf is not None
    record = view.hold_over(job.leaf)
    assert record is not None
    return record.pending_reason()


def opens(view: AdmissionView, job: Job) -> Opening:
    assert job.leaf is not None
    record = view.hold_over(job.leaf)
    assert record is not None
    return Opening(on=f"{record.node} is resumed")


GATE = Gate(
    name="R14 hold",
    says="a node on its path is held (R14)",
    shuts=shuts,
    reason=reason,
    opens=opens,
    may_shut=held,
    closes=held,
)
