"""The one admission seam: the ordered gates, and the questions every place asks of them.

What it does: ``GATES`` is the order a workload meets the gates in (the order of the reasons
people read: a backoff, then a stopping victim, the zone, its cluster (M1), a hold, a spent
budget, an overrun, the job's own admission gates). ``refusal`` is the answer to "may it be
offered now, and if not why and until when" that the pass, the starvation guard, the reason
cascade, the reclaim preview, the dry run and the estimate all give;
``passing_over``/``passed_over`` are the same question as a pass's queue walk asks it (the
leaf's gates picked once, standing refusals left to the try), and ``closes_leaf``/``clocked``
are what pruning and the kept offers ask of a whole leaf.
What it must never do: hold state, change what it reads, reorder gates per caller, or let a
caller ask a subset of the gates (every place asks this list, so they cannot disagree).
"""

from __future__ import annotations

from schemas import QuotaPath
from usher.core.gates import (
    admission,
    budget,
    cluster,
    holds,
    overrun,
    readiness,
    stopping,
    zone,
)
from usher.core.gates.view import AdmissionView, Gate, Refusal, Timed
from usher.core.state.indexed import Job

GATES: tuple[Gate, ...] = (
    readiness.GATE,
    stopping.GATE,
    zone.GATE,
    cluster.GATE,
    holds.GATE,
    budget.GATE,
    overrun.GATE,
    admission.GATE,
)
"""Every gate, in the order a workload meets them: the first that shuts it gives the reason."""


def refusal(view: AdmissionView, job: Job) -> Refusal | None:
    """The first gate that shuts ``job`` now, with its reason and when it may next open;
    None: every gate lets it be offered (whether it fits is the pass's question)."""
    for gate in GATES:
        if gate.shuts(view, job):
            return Refusal(
                gate=gate.name,
                says=gate.says,
                reason=gate.reason(view, job),
                stands=gate.stands,
                opens=gate.opens(view, job),
            )
    return None


def may_offer(view: AdmissionView, job: Job) -> bool:
    """Whether no gate shuts ``job`` now: it may be tried (N1's reservations, N2)."""
    return not any(gate.shuts(view, job) for gate in GATES)


def passing_over(view: AdmissionView, leaf: QuotaPath) -> tuple[Gate, ...]:
    """The gates that make a pass pass over a workload of ``leaf`` now: every gate that may
    shut one there, but those whose shut workloads still stand (they are offered and fail,
    so that under Block they close their queue)."""
    return tuple(gate for gate in GATES if not gate.stands and gate.may_shut(view, leaf))


def passed_over(view: AdmissionView, job: Job, gates: tuple[Gate, ...]) -> Gate | None:
    """The first of ``gates`` (``passing_over`` of its leaf) that shuts ``job``, or None."""
    for gate in gates:
        if gate.shuts(view, job):
            return gate
    return None


def stands_shut(view: AdmissionView, job: Job) -> bool:
    """Whether a standing gate shuts ``job``: a pass offers it (it holds its place) and its
    try fails there (so that under Block it closes its queue)."""
    return any(gate.shuts(view, job) for gate in GATES if gate.stands)


def closes_leaf(view: AdmissionView, leaf: QuotaPath) -> bool:
    """Whether some gate shuts every workload of ``leaf`` but a preemptor whose capacity the
    ledger already holds (pruning: only such a preemptor may move there)."""
    return any(gate.closes(view, leaf) for gate in GATES)


def clocked(view: AdmissionView, leaf: QuotaPath) -> bool:
    """Whether some gate may shut a workload of ``leaf`` by time alone: the leaf's kept offer
    must be looked at again at every pass."""
    return any(gate.timed == Timed.ALWAYS and gate.may_shut(view, leaf) for gate in GATES)


def opens_by_time(gate: Gate) -> bool:
    """Whether a workload ``gate`` shut may open by time alone (its leaf's offer is timed)."""
    return gate.timed != Timed.NEVER
