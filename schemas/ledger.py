"""Ledger request/reply messages (NATS request/reply on ``<prefix>.ledger.*``).

What it does: the reservation and release contract between dequeuers/preemptor and the ledger.
What it must never do: carry logic; the ledger alone decides whether a reservation is granted.
"""

from __future__ import annotations

import msgspec

from schemas.common import Reason, Resources, TopologyPin
from schemas.decisions import Preempted, ReleaseCause, Requeued
from schemas.ids import QueueName, QuotaPath, RequestId, WorkloadKey, Zone


class Reservation(msgspec.Struct, frozen=True, kw_only=True):
    """Ask to hold ``requests`` on every node of the path root..``quota`` for a workload."""

    workload: WorkloadKey
    queue: QueueName
    quota: QuotaPath
    zone: Zone
    requests: Resources
    priority: int = 0
    """Its Kubernetes priority (a 32-bit integer; higher is more important)."""
    preempting: list[WorkloadKey] = msgspec.field(default_factory=list)
    """Victims whose release this reservation counts on (capacity held for the preemptor)."""
    pod_counts: dict[str, int] | None = None
    """A partial admission's pods per pod set (R11); ``requests`` counts exactly these."""
    reason: Reason | None = None
    """Why it is admitted as it is (``PartialAdmission``), for the ``Admitted`` decision."""
    topology: TopologyPin | None = None
    """The topology domain its pods are pinned to (TP1), for the ``Admitted`` decision."""


class ReserveRequest(msgspec.Struct, frozen=True, kw_only=True, tag="ledger.reserve.v1"):
    """Many reservations at once; each is granted or refused on its own, in order."""

    request_id: RequestId
    zone: Zone
    reservations: list[Reservation]
    log_seq: int | None = None
    """The last log sequence the proposer had applied: a workload the ledger saw end after it
    (finished or deleted) is refused, not granted for ever (docs/admission-rules.md R8)."""


class ReservationResult(msgspec.Struct, frozen=True, kw_only=True):
    """Outcome of one reservation."""

    workload: WorkloadKey
    granted: bool
    reason: Reason | None = None
    """Why it was refused (the node and resource that would be over-committed)."""


class ReserveReply(msgspec.Struct, frozen=True, kw_only=True, tag="ledger.reserve-reply.v1"):
    """Reply to a ``ReserveRequest``; results are in request order."""

    request_id: RequestId
    results: list[ReservationResult]


class PreemptRequest(msgspec.Struct, frozen=True, kw_only=True, tag="ledger.preempt.v1"):
    """Carry out one reclaim: suspend ``victims`` and hold their quota for ``preemptor``.

    A dequeuer sends it to the preemptor (``<prefix>.preempt.request``), which re-checks it with
    the core on its own projection of the log and forwards it to the ledger
    (``<prefix>.ledger.preempt``). The ledger moves the victims' usage to a hold for the
    preemptor in one transaction and publishes the ``Preempted`` decisions through its outbox;
    the preemptor is admitted once every victim was observed stopped. Reply: ``ReserveReply``
    with one result, for the preemptor.
    """

    request_id: RequestId
    zone: Zone
    preemptor: Reservation
    victims: list[Preempted]
    log_seq: int = 0
    """Stream sequence of the last log entry the proposer had applied (0 = unknown)."""


class RequeueRequest(msgspec.Struct, frozen=True, kw_only=True, tag="ledger.requeue.v1"):
    """Carry out requeues for readiness a dequeuer decided (docs/admission-rules.md R10).

    The ledger grants each only while the workload's allocation is ``admitted`` on the same
    quota: it becomes ``preempting`` (still counted until its pods are seen stopped, R7) and
    the ``Requeued`` decision is published through the outbox. Reply: ``ReserveReply`` with
    one result per requeue, in order.
    """

    request_id: RequestId
    zone: Zone
    requeues: list[Requeued]
    log_seq: int | None = None
    """The last log sequence the proposer had applied."""
    drains: list[Preempted] = msgspec.field(default_factory=list)
    """Preemptions for a drain whose grace ran out (R15): each workload is its own
    preemptor, granted like a requeue (``admitted`` -> ``preempting``, no hold). Results
    follow the requeues', in order."""


class ReleaseRequest(msgspec.Struct, frozen=True, kw_only=True, tag="ledger.release.v1"):
    """Free what a workload holds."""

    request_id: RequestId
    workload: WorkloadKey
    cause: ReleaseCause


class ReleaseReply(msgspec.Struct, frozen=True, kw_only=True, tag="ledger.release-reply.v1"):
    """Reply to a ``ReleaseRequest``; ``released`` is false when nothing was held."""

    request_id: RequestId
    workload: WorkloadKey
    released: bool
    requests: Resources = msgspec.field(default_factory=dict)


class LedgerError(msgspec.Struct, frozen=True, kw_only=True, tag="ledger.error.v1"):
    """The ledger could not process a request; ``transient`` says whether a retry may help."""

    request_id: RequestId
    code: str
    message: str
    transient: bool
