"""Kubernetes objects as cluster events, with their subjects and deterministic ids.

What it does: turns a job (any supported kind), ElasticQuotaTree, PriorityClass or Node into
the cluster event the log carries (``schemas.events``), on its subject, under an id built only
from the object: ``<apiVersion>/<Kind>:<namespace>/<name>:<uid>:<resourceVersion>:<event tag>``
(cluster-scoped objects have no ``<namespace>/``). The same object at the same version always
gives the same id, so a re-list after a restart is dropped by JetStream's de-duplication; an
object found gone after a re-list has ``gone`` in place of the resourceVersion.
A job whose containers request nothing is rejected too (``no-requests``, naming each
container) unless its branch of the tree allows it, and so is a ``usher.io/min-success`` that
is not a positive integer or asks more pods than can succeed; one found running without an
admission is rejected with ``not-admitted`` (the observer suspends it). An admitted job's pod
counts become a ``WorkloadProgress`` (``workload_progress``; kinds whose pods are not
counted report all ready once active), and a failed one's
``WorkloadFinished`` carries its failed containers' terminations (``container_terminations``).
What it must never do: read a clock, do I/O, or guess: a manifest the core refuses becomes a
``WorkloadRejected`` / ``QuotaTreeRejected`` carrying every field error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from schemas import (
    DEFAULT_ZONE,
    ContainerTermination,
    EventId,
    FieldError,
    Millis,
    NodeName,
    NodeObserved,
    NodeRemoved,
    PriorityClassDeleted,
    PriorityClassObserved,
    QuotaTreeApplied,
    QuotaTreeDeleted,
    QuotaTreeRejected,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadProgress,
    WorkloadRejected,
    Zone,
    object_name,
)
from schemas.events import ClusterEvent
from services.watcher.fleet import in_this_cluster, key_here, subject_zone
from services.watcher.kinds import (
    NODES,
    PRIORITY_CLASSES,
    QUOTA_TREES,
    JobFamily,
    kind_id,
    parse_time_ms,
)
from usher.adapters.kube import JsonObj, Resource
from usher.adapters.nats.subjects import Subjects
from usher.core.intake.workload import (
    NOT_ADMITTED,
    extract_priority_class,
    extract_workload,
    unrequested_containers,
)
from usher.core.kinds import success
from usher.core.model.errors import InputError, TreeInvalid, WorkloadInvalid
from usher.core.model.quantity import collect_resources
from usher.core.rules.retry import container_memory
from usher.core.tree.quota_tree import parse_tree
from usher.core.tree.zone_fallback import owner_zone
from usher.core.values.labels import topology_labels

GONE = "gone"
OOM_KILLED = "OOMKilled"
"""Stands for the resourceVersion in the id of an object found missing after a re-list."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One cluster event ready to publish, plus what was wrong with the object (if anything)."""

    subject: str
    id: EventId
    event: ClusterEvent
    problems: list[FieldError] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who an object is, as its metadata says."""

    namespace: str
    name: str
    uid: str
    version: str
    zone: Zone

    @property
    def key(self) -> WorkloadKey:
        return key_here(self.namespace, self.name)


def identity(obj: JsonObj) -> Identity:
    meta = _mapping(obj.get("metadata"))
    # The label, else the first accepted zone (Z2): the subject the workload's events go on.
    zone = owner_zone(_mapping(meta.get("labels")), _mapping(meta.get("annotations")))
    return Identity(
        namespace=_text(meta.get("namespace")),
        name=_text(meta.get("name")),
        uid=_text(meta.get("uid")),
        version=_text(meta.get("resourceVersion")),
        zone=Zone(zone) if isinstance(zone, str) and zone else DEFAULT_ZONE,
    )


def event_tag(event: ClusterEvent) -> str:
    tag: Any = type(event).__struct_config__.tag
    return str(tag)


def event_id(kind: str, who: Identity, event: ClusterEvent, version: str | None = None) -> EventId:
    """The deterministic id of ``event`` about the object ``who`` of ``kind``."""
    name = f"{who.namespace}/{who.name}" if who.namespace else who.name
    at = who.version if version is None else version
    return EventId(f"{kind}:{name}:{who.uid}:{at}:{event_tag(event)}")


# --------------------------------------------------------------------------- workloads


def workload_event(
    resource: Resource,
    family: JobFamily,
    obj: JsonObj,
    subjects: Subjects,
    *,
    zero_requests_allowed: bool = True,
    terminations: list[ContainerTermination] | None = None,
) -> Outgoing:
    """Finished, observed (suspended only without active pods) or rejected, for a job; a job
    of a kind Usher does not admit is always rejected, with the core's ``unsupported-kind``,
    and so is one with a container that requests nothing unless ``zero_requests_allowed``, or
    with a ``usher.io/min-success`` it cannot have. A failed job's ``WorkloadFinished`` carries
    ``terminations`` (its failed containers', from its pods: ``container_terminations``)."""
    who = identity(obj)
    kind = kind_id(resource)
    subject = subjects.job(subject_zone(who.zone), who.namespace, who.name)
    outcome = family.outcome(obj)
    if outcome is not None:
        finished = WorkloadFinished(
            workload=who.key,
            succeeded=outcome.succeeded,
            finished_ms=outcome.finished_ms,
            terminations=[] if outcome.succeeded else list(terminations or []),
            min_success=outcome.min_success,
        )
        return Outgoing(subject, event_id(kind, who, finished), finished)
    created_ms = parse_time_ms(_mapping(obj.get("metadata")).get("creationTimestamp"))
    try:
        observed = extract_workload(obj, created_ms=created_ms or Millis(0))
        observed = msgspec.structs.replace(observed, workload=in_this_cluster(observed.workload))
    except WorkloadInvalid as invalid:
        rejected = WorkloadRejected(
            workload=in_this_cluster(invalid.workload), kind=invalid.kind or kind,
            errors=invalid.errors,
        )  # fmt: skip
        return Outgoing(subject, event_id(kind, who, rejected), rejected, invalid.errors)
    if not family.supported:
        # The core reads the kind but the watcher could not carry out a decision for it.
        error = FieldError(
            path="kind",
            code="unsupported-kind",
            message=f"kind {kind} is not supported; the watcher cannot admit it",
        )
        rejected = WorkloadRejected(workload=observed.workload, kind=kind, errors=[error])
        return Outgoing(subject, event_id(kind, who, rejected), rejected, [error])
    free = [] if zero_requests_allowed else unrequested_containers(obj)
    most = family.pods.most_successes(obj) if family.pods is not None else None
    refused = free + success.problems(obj, most, kind)
    if refused:
        rejected = WorkloadRejected(workload=observed.workload, kind=kind, errors=refused)
        return Outgoing(subject, event_id(kind, who, rejected), rejected, refused)
    # Suspended means "holds no capacity": the flag is set AND the controller reports no
    # active pods (a preempted job is not released until its pods are gone).
    suspended = observed.suspended and not family.active(obj)
    if suspended != observed.suspended:
        observed = msgspec.structs.replace(observed, suspended=suspended)
    return Outgoing(subject, event_id(kind, who, observed), observed)


def workload_progress(
    resource: Resource, family: JobFamily, obj: JsonObj, subjects: Subjects, observed_ms: Millis
) -> Outgoing | None:
    """How far the job's pods have come: ready counts the pods that succeeded too, total is
    its gang (the pods it runs at once). A kind whose pods the registry cannot count (its
    operator reports no per-pod status) counts as all ready once it is active and none
    before: coarser, but a ready timeout on its quota node then evicts only a job that never
    started, instead of every job of that kind."""
    who = identity(obj)
    total = sum(source.count for source in family.pod_sets(_mapping(obj.get("spec")), []))
    if family.pods is None:
        ready, succeeded, failed = (total if family.active(obj) else 0), 0, 0
    else:
        counts = family.pods.counts(obj)
        ready, succeeded, failed = counts.ready + counts.succeeded, counts.succeeded, counts.failed
    progress = WorkloadProgress(
        workload=who.key,
        ready=ready,
        total=total,
        succeeded=succeeded,
        failed=failed,
        observed_ms=observed_ms,
    )
    subject = subjects.job(subject_zone(who.zone), who.namespace, who.name)
    return Outgoing(subject, event_id(kind_id(resource), who, progress), progress)


def container_terminations(
    family: JobFamily, obj: JsonObj, pods: list[JsonObj]
) -> list[ContainerTermination]:
    """The failed containers' last terminations, one per pod set and container: an
    ``OOMKilled`` one wins (it is what more memory can fix), else the one that ended last."""
    chosen: dict[tuple[str, str], tuple[bool, str, ContainerTermination]] = {}
    # Each container's memory as this attempt ran it: what an OOM scale-up grows (R13).
    memory = container_memory(obj, family)
    reader = family.pods
    for pod in pods:
        pod_set = reader.pod_set(obj, pod) if reader is not None else ""
        for status in _list(_mapping(pod.get("status")).get("containerStatuses")):
            ended = _failed_termination(_mapping(status))
            if ended is None:
                continue
            reason, code, finished = ended
            container = _text(_mapping(status).get("name"))
            rank = (reason == OOM_KILLED, finished)
            request, limit = memory.get((pod_set, container), (None, None))
            termination = ContainerTermination(
                pod_set=pod_set,
                container=container,
                reason=reason,
                exit_code=code,
                memory_request=request,
                memory_limit=limit,
            )
            before = chosen.get((pod_set, container))
            if before is None or rank > before[:2]:
                chosen[(pod_set, container)] = (*rank, termination)
    return [chosen[key][2] for key in sorted(chosen)]


def _failed_termination(status: dict[str, Any]) -> tuple[str, int, str] | None:
    """(reason, exit code, finishedAt) of a container that ended in failure: its current
    state, else the last one before a restart."""
    for field_name in ("state", "lastState"):
        ended = _mapping(_mapping(status.get(field_name)).get("terminated"))
        code = ended.get("exitCode")
        if isinstance(code, int) and code != 0:
            reason = _text(ended.get("reason")) or "Error"
            return reason, code, _text(ended.get("finishedAt"))
    return None


def workload_unadmitted(
    resource: Resource, family: JobFamily, obj: JsonObj, subjects: Subjects
) -> Outgoing:
    """A managed job found running although the ledger never admitted it (created with its
    suspend flag false, or unsuspended by someone else): rejected with ``not-admitted``."""
    who = identity(obj)
    kind = kind_id(resource)
    path = ".".join(("spec", *family.suspend_path))
    error = FieldError(
        path=path,
        code=NOT_ADMITTED,
        message=(
            f"{who.key} was running without an admission from Usher ({path} false); "
            "suspended: it waits in its queue like every other job"
        ),
    )
    rejected = WorkloadRejected(workload=who.key, kind=kind, errors=[error])
    subject = subjects.job(subject_zone(who.zone), who.namespace, who.name)
    return Outgoing(subject, event_id(kind, who, rejected), rejected, [error])


def workload_deleted(resource: Resource, obj: JsonObj, subjects: Subjects) -> Outgoing:
    who = identity(obj)
    deleted = WorkloadDeleted(workload=who.key)
    subject = subjects.job(subject_zone(who.zone), who.namespace, who.name)
    return Outgoing(subject, event_id(kind_id(resource), who, deleted), deleted)


def workload_gone(
    key: WorkloadKey, kind: str, uid: str, zone: Zone, subjects: Subjects
) -> Outgoing:
    """A workload the log holds live but the cluster no longer has (deleted unseen)."""
    namespace, name = object_name(key)
    who = Identity(namespace=namespace, name=name, uid=uid, version=GONE, zone=zone)
    deleted = WorkloadDeleted(workload=key)
    subject = subjects.job(subject_zone(zone), namespace, name)
    return Outgoing(subject, event_id(kind, who, deleted), deleted)


# --------------------------------------------------------------------------- nodes


def node_observed(obj: JsonObj, subjects: Subjects) -> Outgoing:
    """A Node's allocatable resources (what parses; the rest is reported as problems)."""
    who = identity(obj)
    status = _mapping(obj.get("status"))
    allocatable, problems = collect_resources(status.get("allocatable"), "status.allocatable")
    unschedulable = _mapping(obj.get("spec")).get("unschedulable") is True
    labels = topology_labels(_mapping(obj.get("metadata")).get("labels"))  # TP1's levels
    observed = NodeObserved(
        node=NodeName(who.name),
        zone=who.zone,
        allocatable=allocatable,
        unschedulable=unschedulable,
        labels=labels,
    )
    subject = subjects.node(who.zone, NodeName(who.name))
    return Outgoing(subject, event_id(kind_id(NODES), who, observed), observed, problems)


def node_removed(obj: JsonObj, subjects: Subjects, *, gone: bool = False) -> Outgoing:
    who = identity(obj)
    removed = NodeRemoved(node=NodeName(who.name), zone=who.zone)
    subject = subjects.node(who.zone, NodeName(who.name))
    version = GONE if gone else None
    return Outgoing(subject, event_id(kind_id(NODES), who, removed, version), removed)


# --------------------------------------------------------------------------- priority classes


def priority_class_observed(obj: JsonObj, subjects: Subjects) -> Outgoing | None:
    """The class and its value; None (nothing to publish) when the object is unusable."""
    try:
        name, value = extract_priority_class(obj)
    except InputError:
        return None
    who = identity(obj)
    observed = PriorityClassObserved(name=name, value=value)
    subject = subjects.priority_class(name)
    return Outgoing(subject, event_id(kind_id(PRIORITY_CLASSES), who, observed), observed)


def priority_class_problems(obj: JsonObj) -> list[FieldError]:
    try:
        extract_priority_class(obj)
    except InputError as error:
        return error.errors
    return []


def priority_class_deleted(obj: JsonObj, subjects: Subjects, *, gone: bool = False) -> Outgoing:
    who = identity(obj)
    deleted = PriorityClassDeleted(name=who.name)
    version = GONE if gone else None
    kind = kind_id(PRIORITY_CLASSES)
    return Outgoing(
        subjects.priority_class(who.name), event_id(kind, who, deleted, version), deleted
    )


# --------------------------------------------------------------------------- quota trees


def tree_event(obj: JsonObj, subjects: Subjects) -> Outgoing:
    """``QuotaTreeApplied`` for a valid tree, ``QuotaTreeRejected`` with every error otherwise."""
    who = identity(obj)
    event: QuotaTreeApplied | QuotaTreeRejected
    problems: list[FieldError] = []
    try:
        event = QuotaTreeApplied(root=parse_tree(obj), resource_version=who.version)
    except TreeInvalid as invalid:
        problems = invalid.errors
        event = QuotaTreeRejected(
            errors=invalid.errors,
            resource_version=who.version,
            namespace=who.namespace,
            name=who.name,
        )
    return Outgoing(subjects.quota, event_id(kind_id(QUOTA_TREES), who, event), event, problems)


def tree_deleted(obj: JsonObj, subjects: Subjects, *, gone: bool = False) -> Outgoing:
    """``QuotaTreeDeleted`` for a tree object the watch saw deleted (``gone``: found missing
    by a relist instead, so without its last resourceVersion)."""
    who = identity(obj)
    deleted = QuotaTreeDeleted(namespace=who.namespace, name=who.name)
    version = GONE if gone else None
    return Outgoing(subjects.quota, event_id(kind_id(QUOTA_TREES), who, deleted, version), deleted)


# --------------------------------------------------------------------------- helpers


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
