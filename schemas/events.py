"""Cluster events: what the watcher saw in Kubernetes, as facts on the log.

What it does: one frozen, tagged, versioned msgspec Struct per kind of observation. Tags are
``<noun>.<verb>.v<N>`` and are never reused; new fields arrive only with defaults.
What it must never do: carry decisions (see ``schemas.decisions``) or loose dicts.
"""

from __future__ import annotations

import msgspec

from schemas.common import FieldError, Resources, TopologyAsk
from schemas.ids import ClusterName, Millis, NodeName, WorkloadKey, Zone
from schemas.quota import QuotaNode


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event; the ``type`` tag selects the concrete struct."""


class PodSet(msgspec.Struct, frozen=True, kw_only=True):
    """A group of identical pods of one workload (a Job, one replica type of a TFJob...)."""

    name: str
    count: int
    """Pods in the set."""
    requests: Resources
    """Per pod, canonical units: containers summed, max with each init container, plus overhead."""
    min_count: int | None = None
    """The fewest pods of this set the workload may start with (partial admission, R11);
    None: all ``count`` of them (all-or-nothing)."""


class RetryAsk(msgspec.Struct, frozen=True, kw_only=True):
    """What a job's own annotations ask of retries (R12, R13); None: the annotation is absent.

    Checked where the manifest is read: a limit >= 0, a factor >= 1, a cap not below any
    container's memory request."""

    limit: int | None = None
    """``usher.io/retry-limit``: further attempts after a failure (bounded by the tree's)."""
    memory_factor: str | None = None
    """``usher.io/oom-memory-factor`` as written (an exact decimal, e.g. ``"1.5"``)."""
    memory_cap: int | None = None
    """``usher.io/oom-memory-cap`` in bytes: no container's memory grows past it."""


class WorkloadObserved(_Event, frozen=True, kw_only=True, tag="workload.observed.v1"):
    """A suspended (or running) job of a supported kind exists with this shape."""

    workload: WorkloadKey
    namespace: str
    name: str
    kind: str
    """``apiVersion/kind`` style short name, e.g. ``batch/v1/Job``, ``kubeflow.org/v1/TFJob``."""
    uid: str = ""
    zone: Zone
    priority_class: str | None = None
    priority: int | None = None
    """``spec.priority`` when set; the PriorityClass value wins when the class is known."""
    created_ms: Millis
    pod_sets: list[PodSet]
    quota_name: str | None = None
    """Value of label ``quota.scheduling.alibabacloud.com/name`` (overrides namespace mapping)."""
    suspended: bool = True
    resource_version: str = ""
    retry: RetryAsk | None = None
    """The job's retry annotations (R12, R13); None when it carries none."""
    zones: list[Zone] = []
    """``usher.io/zones``: every zone it accepts, most preferred first (``zone`` is the first);
    empty when it accepts only ``zone`` (Z2)."""
    max_runtime_seconds: int | None = None
    """Its declared maximum runtime (RT1): the smaller of ``usher.io/max-runtime-seconds`` and
    the kind's own deadline (a batch Job's ``spec.activeDeadlineSeconds``); None: none declared.
    Left out by watchers older than RT1."""
    admission_gates: list[str] = []
    """``usher.io/admission-gated-by``: the admission gates still listed, in order (G1); it is
    not admitted while any is. Empty: none (left out by watchers older than G1)."""
    topology: TopologyAsk | None = None
    """``usher.io/topology-required`` or ``-preferred``: all its pods in one domain of a
    topology level (TP1); None: anywhere in its zone (left out by watchers older than TP1)."""


class ContainerTermination(msgspec.Struct, frozen=True, kw_only=True):
    """How one container of a failed pod ended, as the kubelet reported it."""

    pod_set: str
    container: str
    reason: str
    """Kubernetes' ``state.terminated.reason``, e.g. ``OOMKilled``, ``Error``."""
    exit_code: int
    """The container's exit code (an integer, e.g. 137 after a SIGKILL)."""
    memory_request: int | None = None
    """The container's memory request (bytes) as this attempt ran it, when set."""
    memory_limit: int | None = None
    """The container's memory request and limit (bytes) as this attempt ran it, when set: what
    an OOM scale-up (R13) grows. Left out by watchers older than R13."""


class WorkloadFinished(_Event, frozen=True, kw_only=True, tag="workload.finished.v1"):
    """All pods of the workload completed (or it failed terminally); its quota is released."""

    workload: WorkloadKey
    succeeded: bool = True
    finished_ms: Millis | None = None
    terminations: list[ContainerTermination] = []
    """For a failure: the failed containers' last terminations, one per pod set and container."""
    min_success: int | None = None
    """Set when it succeeded because this many pods succeeded (a declared minSuccess)."""


class WorkloadProgress(_Event, frozen=True, kw_only=True, tag="workload.progress.v1"):
    """How far an admitted workload's pods have come; published when the counts change."""

    workload: WorkloadKey
    ready: int
    """Pods Running with every container ready, plus pods that already succeeded."""
    total: int
    """Pods the admitted workload should have (its admitted gang size)."""
    succeeded: int = 0
    """Pods that succeeded (a count of pods)."""
    failed: int = 0
    """Pods that failed (a count of pods)."""
    observed_ms: Millis | None = None


class WorkloadDeleted(_Event, frozen=True, kw_only=True, tag="workload.deleted.v1"):
    """The workload object is gone from the cluster."""

    workload: WorkloadKey


class WorkloadRejected(_Event, frozen=True, kw_only=True, tag="workload.rejected.v1"):
    """A job manifest could not be turned into a workload; the errors say exactly why."""

    workload: WorkloadKey
    kind: str
    errors: list[FieldError]


class QuotaTreeApplied(_Event, frozen=True, kw_only=True, tag="quota.applied.v1"):
    """A valid ElasticQuotaTree is now in force."""

    root: QuotaNode
    resource_version: str = ""


class QuotaTreeRejected(_Event, frozen=True, kw_only=True, tag="quota.rejected.v1"):
    """An ElasticQuotaTree was invalid as a whole; the previous tree stays in force."""

    errors: list[FieldError]
    resource_version: str = ""
    namespace: str = ""
    name: str = ""
    """The tree object's name (empty in entries written before it was recorded)."""


class QuotaTreeDeleted(_Event, frozen=True, kw_only=True, tag="quota.deleted.v1"):
    """The ElasticQuotaTree object was deleted. Nothing changes: the last valid tree stays in
    force (admissions go on under it, nothing is evicted) until another tree is applied; this
    event says so on the log, for people (``usher quota``) and the audit trail."""

    namespace: str = ""
    name: str = ""
    """Empty when the watcher found the tree gone at a relist after a restart (it keeps no
    names of objects across restarts)."""


class NodeObserved(_Event, frozen=True, kw_only=True, tag="node.observed.v1"):
    """A Kubernetes Node with its allocatable resources."""

    node: NodeName
    zone: Zone
    allocatable: Resources
    unschedulable: bool = False
    labels: dict[str, str] = {}
    """Its labels a topology level may name (``usher.core.values.labels.topology_labels``:
    ``kubernetes.io/hostname`` and keys naming ``topology``), at most 16; empty from watchers
    older than TP1."""


class NodeRemoved(_Event, frozen=True, kw_only=True, tag="node.removed.v1"):
    """A Kubernetes Node disappeared."""

    node: NodeName
    zone: Zone


class PriorityClassObserved(_Event, frozen=True, kw_only=True, tag="priorityclass.observed.v1"):
    """A PriorityClass and its value."""

    name: str
    value: int
    """Its priority (a 32-bit integer; higher is more important)."""


class ZoneServed(_Event, frozen=True, kw_only=True, tag="zone.served.v1"):
    """A dequeuer serves ``zone``: it decides for that zone's workloads from now on.

    Not seen in Kubernetes: each dequeuer replica announces its zone when it starts (on
    ``<prefix>.zone.<zone>.served``). A zone stays served once announced: a stopped
    dequeuer is expected back, and its zone's workloads wait for it. Until the log holds a
    first ``ZoneServed`` (a log written before these events existed) nobody knows which zones
    are served, and no workload is said to be in an unserved one."""

    zone: Zone
    replica: str = ""
    """Which process announced it (for people reading the log)."""


class PriorityClassDeleted(_Event, frozen=True, kw_only=True, tag="priorityclass.deleted.v1"):
    """A PriorityClass was removed; workloads naming it fall back to ``spec.priority`` or 0."""

    name: str


class ClusterConnected(_Event, frozen=True, kw_only=True, tag="cluster.connected.v1"):
    """The watcher of ``cluster`` reaches its API server and has listed it: its workloads and
    nodes on the log are as it sees them, and its zones may admit again (C1).

    Published by that cluster's watcher (on ``<p>.cluster.fleet.<cluster>.connected``, which
    NATS lets only it publish) when it starts and whenever it reconnects. Its ``zones`` are
    the cluster's: the dequeuers of those zones admit into it, and no other cluster may
    claim them (the first claim on the log stands)."""

    cluster: ClusterName
    zones: list[Zone] = []
    watcher: str = ""
    """Which process announced it (for people reading the log)."""


class ClusterDisconnected(_Event, frozen=True, kw_only=True, tag="cluster.disconnected.v1"):
    """The watcher of ``cluster`` lost its API server: until it is ``ClusterConnected``
    again (or ``ClusterLost``), its admitted workloads keep counting and nothing is admitted
    there (C1)."""

    cluster: ClusterName
    reason: str = ""
    """What failed, for people (``connection refused``...)."""


class ClusterLost(_Event, frozen=True, kw_only=True, tag="cluster.lost.v1"):
    """An operator declared ``cluster`` lost (``usher cluster lost``): its workloads are gone
    as if deleted (their quota is released) and nothing is admitted there until its watcher
    announces it ``ClusterConnected`` again. Only the operator identity may publish it (on
    ``<p>.cluster.lost.<cluster>``); every reader believes it only there, from the operator."""

    cluster: ClusterName
    by: str
    """Who declared it (the operator's name as given)."""
    reason: str = ""


ClusterEvent = (
    WorkloadObserved
    | WorkloadFinished
    | WorkloadProgress
    | WorkloadDeleted
    | WorkloadRejected
    | QuotaTreeApplied
    | QuotaTreeRejected
    | QuotaTreeDeleted
    | NodeObserved
    | NodeRemoved
    | PriorityClassObserved
    | PriorityClassDeleted
    | ZoneServed
    | ClusterConnected
    | ClusterDisconnected
    | ClusterLost
)

CLUSTER_EVENT_TYPES: tuple[type[_Event], ...] = (
    WorkloadObserved,
    WorkloadFinished,
    WorkloadProgress,
    WorkloadDeleted,
    WorkloadRejected,
    QuotaTreeApplied,
    QuotaTreeRejected,
    QuotaTreeDeleted,
    NodeObserved,
    NodeRemoved,
    PriorityClassObserved,
    PriorityClassDeleted,
    ZoneServed,
    ClusterConnected,
    ClusterDisconnected,
    ClusterLost,
)

FLEET_EVENT_TYPES: tuple[type[_Event], ...] = (ClusterConnected, ClusterDisconnected, ClusterLost)
"""Cluster events about a whole cluster (C1): each only on its own cluster's subject."""
