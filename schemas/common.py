"""Small value types used inside several wire messages.

What it does: resource maps, field errors and the human-and-machine readable ``Reason``.
What it must never do: perform I/O or contain decision logic.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from schemas.ids import QuotaPath, WorkloadKey

Resources = dict[str, int]
"""Resource name -> amount in canonical integer units: ``cpu`` in millicores, everything else
(memory in bytes, ``nvidia.com/gpu``, pods, extended resources) in base units."""


class FieldError(msgspec.Struct, frozen=True, kw_only=True):
    """One precise problem with an input: where it is and what is wrong."""

    path: str
    """Location in the input, e.g. ``spec.root.children[0].min.cpu``."""
    code: str
    """Stable machine code, e.g. ``invalid-quantity``, ``min-exceeds-max``."""
    message: str
    """Sentence for a person."""


ReasonCode = Literal[
    "QuotaExceeded",  # some node on the path would exceed max x oversellRate
    "ZoneCapacity",  # the zone's nodes have no room
    "NoNodeFits",  # no single node of the zone can host one pod of the workload
    "BlockedByHead",  # Block policy: an earlier workload of the queue does not fit
    "HeldForPreemptor",  # capacity is held for a preemptor that has not been admitted yet
    "ExceedsMax",  # inadmissible: request above max x oversellRate on its path
    "PodTooLarge",  # inadmissible: a pod larger than every node of its zone
    "NoLeaf",  # unmapped: namespace belongs to no leaf
    "UnknownQuota",  # unmapped: the quota label names no leaf
    "NoTree",  # unmapped: no valid quota tree applied yet
    "Reclaim",  # preempted: the owner of a guarantee reclaimed it
    "WithinQuotaPriority",  # preempted: a higher-priority workload of the same leaf
    "ReclaimWhileBorrowing",  # preempted: a lower-priority borrower, taken while borrowing (P2)
    "NotYetEvaluated",  # pending: arrived after the last pass
    "PreemptionInProgress",  # ledger: a victim is still stopping, or the hold awaits it
    "AlreadyAdmitted",  # ledger: the workload already holds a live allocation elsewhere
    "StaleView",  # preemptor/ledger: the proposal was made on state that changed since
    "VictimsStopping",  # pending: it fits once preempted workloads have stopped
    "ZoneNotServed",  # pending: no dequeuer serves the workload's zone
    "Rejected",  # the manifest could not be read (explain of a rejected job)
    "PodsNotReady",  # requeued: admitted, its pods not all ready within the ready timeout
    "RequeueBackoff",  # pending: requeued for readiness, not offered again before a time
    "PartialAdmission",  # admitted with fewer pods than its gang: the minimum it declared fits
    "OOMKilled",  # retried: a container was OOMKilled; the next attempt has more memory
    "Failed",  # retried: the attempt failed otherwise; the next attempt is the same size
    "RetryLimitReached",  # not retried: the failed attempt was the last one allowed
    "MemoryCapReached",  # not retried: an OOMKilled container already had the most memory allowed
    "Held",  # pending: a node on its path is held or drained by an operator (R14)
    "Drained",  # preempted: a drain of a node on its path ran out of grace (R15)
    "BudgetExhausted",  # pending: a budget on its path is spent for the window (B1)
    "Reserved",  # pending: waited past the starvation threshold; capacity is held for it (N1)
    "BehindReservation",  # pending: it would fit but for capacity reserved for a starved head (N1)
    "ZoneQuotaExceeded",  # pending: a node's cap in the workload's zone has no room (Z1)
    "ZoneFallback",  # admitted in a later accepted zone: the earlier ones had no room (Z2)
    "Backfilled",  # admitted beside a reservation: it declared it ends before it is needed (N2)
    "BudgetOverrun",  # pending: its declared runtime x request is more than a budget has left (B2)
    "GrewAfterAdmission",  # stopped: it asks more than its admission counted (R16)
    "AdmissionGated",  # pending: admission gates are still listed on it (G1)
    "GuaranteeNotLent",  # pending: it would take idle guarantee another node does not lend (L1, L2)
    "TopologyNoFit",  # pending: no domain of its topology level has room for all its pods (TP1)
    "TopologyLevelUnknown",  # inadmissible: its topology level is not one its tree names (TP1)
    "ClusterDisconnected",  # pending: its cluster's watcher lost its API server (M1)
    "ClusterLost",  # pending: an operator declared its cluster lost (M1)
    "ZoneInOtherCluster",  # pending: a zone it accepts is another cluster's (M1)
]


class TopologyAsk(msgspec.Struct, frozen=True, kw_only=True):
    """Where a job asks all its pods to run together (TP1): one domain of ``level``."""

    level: str
    """A node label key the tree names as a topology level (``topology.usher.io/rack``)."""
    required: bool = True
    """True: ``usher.io/topology-required`` (only in one domain of ``level``); False:
    ``usher.io/topology-preferred`` (the narrowest level from ``level`` up that fits, else
    anywhere in the zone)."""


class TopologyPin(msgspec.Struct, frozen=True, kw_only=True):
    """The domain an admission chose for all of a job's pods (TP1): the nodes whose label
    ``level`` has the value ``domain``; the watcher pins its pods there."""

    level: str
    domain: str


class Reason(msgspec.Struct, frozen=True, kw_only=True):
    """Why a workload is where it is. Fields are typed so nobody has to parse ``message``."""

    code: ReasonCode
    message: str
    node: QuotaPath | None = None
    """The limiting quota node, when there is one."""
    resource: str | None = None
    used: int | None = None
    """What the node already counts of ``resource``, in canonical units (see ``Resources``)."""
    requested: int | None = None
    """What the workload asks of ``resource``, in canonical units (see ``Resources``)."""
    limit: int | None = None
    """The effective limit that was hit (``max x oversellRate``), in canonical units."""
    blocker: WorkloadKey | None = None
    """For ``BlockedByHead``/``HeldForPreemptor``/``BehindReservation``: the workload in the way."""
