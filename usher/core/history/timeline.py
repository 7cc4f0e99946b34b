"""Scenario timeline entries (docs/admission-rules.md S1, S2) as the events they stand for.

What it does: ``load_timeline`` turns a scenario's ``timeline:`` into ``Step`` values (each
entry's event at its ``at``: ``create``, ``finish``, ``delete``, ``apply``, ``node``,
``removeNode``, ``ready``, ``progress``, ``fail``/``oom``, ``hold``/``drain``/``resume``,
``connect``/``disconnect``/``lost``; a ``create`` may name its ``cluster``, M1), and
``node_event``/``object_event`` do the same for a node or a manifest (shared with the setup
part, ``usher.core.history.scenario``); ``FieldErrors`` collects every bad field.
What it must never do: open files, read a clock or stop at the first bad field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import msgspec

from schemas import (
    ClusterConnected,
    ClusterDisconnected,
    ClusterLost,
    ContainerTermination,
    FieldError,
    HoldAction,
    Millis,
    NodeName,
    NodeObserved,
    NodeRemoved,
    PriorityClassObserved,
    QuotaTreeApplied,
    QuotaTreeRejected,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    WorkloadProgress,
    Zone,
    workload_key,
)
from schemas.events import ClusterEvent
from usher.core.intake.workload import extract_priority_class, extract_workload
from usher.core.kinds import success
from usher.core.model.errors import InputError, TreeInvalid, ValueRefused, WorkloadInvalid
from usher.core.model.quantity import parse_resources
from usher.core.rules.holds import HoldOrder
from usher.core.rules.retry import container_memory
from usher.core.tree.quota_tree import parse_tree
from usher.core.values import names
from usher.core.values.clusters import cluster_name
from usher.core.values.labels import topology_labels

RUN_KEY = "runSeconds"
"""A ``create`` entry's optional runtime: the job finishes that long after each admission
(a preemption throws the run away; the next admission starts it again: S2)."""
ACTIONS = (
    "create",
    "finish",
    "delete",
    "apply",
    "node",
    "removeNode",
    "ready",
    "progress",
    "fail",
    "oom",
    "hold",
    "drain",
    "resume",
    "connect",
    "disconnect",
    "lost",
)
CLUSTER_KEY = "cluster"
"""A ``create`` entry's optional cluster (M1): the job lives there (its key ``ns/name@cluster``)."""
FLEET_KEYS = ("cluster", "zones", "reason", "by")
"""Keys of a ``connect: {cluster, zones}``, ``disconnect: {cluster, reason}`` or
``lost: {cluster, by, reason}`` entry (M1)."""
PROGRESS_KEYS = ("job", "ready", "total", "succeeded")
FAIL_KEYS = ("job", "container", "exitCode")
"""``fail: {job, container, exitCode}`` (or ``fail: ns/name``); ``oom`` takes job and container."""
OOM_EXIT_CODE = 137
"""What the kubelet reports for a container the OOM killer ended (SIGKILL)."""
ORDER_KEYS = ("node", "by", "reason", "grace")
"""Keys of a ``hold``/``drain``/``resume`` entry (R14/R15); ``grace`` is the drain's."""
ORDER_ACTIONS: dict[str, HoldAction] = {"hold": "Hold", "drain": "Drain", "resume": "Resume"}
ORDER_FIELDS = {"target": "node", "grace_seconds": "grace"}
"""An order's fields as a scenario names them (a refusal names the scenario's key)."""
SCENARIO_OPERATOR = "scenario"
"""Who orders a hold in a scenario that names nobody."""


@dataclass(frozen=True)
class Step:
    """One timeline entry turned into the event it stands for."""

    at_ms: Millis
    event: ClusterEvent | HoldOrder
    """What the entry stands for; an operator's order is judged when it is played (R14)."""
    manifest: Mapping[str, object] | None = None
    """The manifest of a ``create``: a retry of the job is made from it (R12)."""
    run_ms: Millis | None = None
    """A ``create``'s ``runSeconds``: it finishes this long after it is admitted."""


class FieldErrors:
    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def add(self, path: str, code: str, message: str) -> None:
        self.items.append(FieldError(path=path, code=code, message=message))

    def absorb(self, prefix: str, failure: InputError) -> None:
        for error in failure.errors:
            path = f"{prefix}.{error.path}" if error.path else prefix
            self.items.append(FieldError(path=path, code=error.code, message=error.message))


def exact_number(raw: object, path: str, errors: FieldErrors) -> Fraction | None:
    """A YAML number (or numeric string) as an exact fraction; ``1.1`` means 11/10."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        errors.add(path, "invalid-number", f"expected a number, got {type(raw).__name__}")
        return None
    try:
        # repr of a float is its shortest exact decimal, so 0.1 stays one tenth.
        return Fraction(repr(raw) if isinstance(raw, float) else str(raw))
    except (ValueError, ZeroDivisionError):
        errors.add(path, "invalid-number", f"expected a number, got {raw!r}")
        return None


def node_event(raw: object, path: str, errors: FieldErrors) -> NodeObserved | None:
    if not isinstance(raw, Mapping):
        errors.add(path, "not-a-mapping", "a node must be {name, zone, allocatable}")
        return None
    for key in sorted(str(k) for k in raw):
        if key not in ("name", "zone", "allocatable", "unschedulable", "labels"):
            message = "node keys: name, zone, allocatable, unschedulable, labels"
            errors.add(f"{path}.{key}", "unknown-key", message)
    name = raw.get("name")
    zone = raw.get("zone", "default")
    if not isinstance(name, str) or not name:
        errors.add(f"{path}.name", "missing-name", "a node needs a name")
        return None
    if not isinstance(zone, str) or not zone:
        errors.add(f"{path}.zone", "invalid-zone", "zone must be a non-empty string")
        return None
    unschedulable = raw.get("unschedulable", False)
    if not isinstance(unschedulable, bool):
        errors.add(f"{path}.unschedulable", "invalid-value", "unschedulable must be a boolean")
        return None
    try:
        allocatable = parse_resources(raw.get("allocatable"), f"{path}.allocatable")
    except InputError as failure:
        errors.items.extend(failure.errors)
        return None
    labels = raw.get("labels", {})
    kept = topology_labels(labels)
    if not isinstance(labels, Mapping) or kept != labels:
        message = (
            "labels must map topology label keys (kubernetes.io/hostname or naming 'topology') "
            "to label values"
        )
        errors.add(f"{path}.labels", "invalid-value", message)
        return None
    return NodeObserved(
        node=NodeName(name),
        zone=Zone(zone),
        allocatable=allocatable,
        unschedulable=unschedulable,
        labels=kept,
    )


def object_event(manifest: object, path: str, errors: FieldErrors) -> ClusterEvent | None:
    """An ElasticQuotaTree (valid or rejected) or PriorityClass manifest as its event."""
    kind = manifest.get("kind") if isinstance(manifest, Mapping) else None
    if kind == "ElasticQuotaTree":
        try:
            return QuotaTreeApplied(root=parse_tree(manifest))
        except TreeInvalid as failure:
            # Not a scenario error: the engine must see the rejection and keep the last tree.
            return QuotaTreeRejected(errors=failure.errors)
    if kind == "PriorityClass":
        try:
            name, value = extract_priority_class(manifest)
        except InputError as failure:
            errors.absorb(path, failure)
            return None
        return PriorityClassObserved(name=name, value=value)
    errors.add(
        f"{path}.kind", "unsupported-kind", f"expected ElasticQuotaTree or PriorityClass: {kind!r}"
    )
    return None


def load_timeline(raw: object, errors: FieldErrors) -> list[Step]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        errors.add("timeline", "not-a-list", "timeline must be a list")
        return []
    steps: list[Step] = []
    live: dict[WorkloadKey, int] = {}
    """Workloads created so far -> their pods (``ready`` and ``progress`` count them)."""
    manifests: dict[WorkloadKey, Mapping[str, object]] = {}
    last_ms = -1
    for index, entry in enumerate(raw):
        path = f"timeline[{index}]"
        if not isinstance(entry, Mapping):
            errors.add(path, "not-a-mapping", "a timeline entry must be a mapping")
            continue
        at_ms = timeline_at(entry.get("at"), f"{path}.at", errors)
        if at_ms is not None:
            if at_ms < last_ms:
                errors.add(f"{path}.at", "not-monotonic", "at values must not decrease")
            last_ms = max(last_ms, at_ms)
        event = _timeline_event(entry, path, Millis(at_ms or 0), live, manifests, errors)
        run_ms = _run_ms(entry, path, errors) if RUN_KEY in entry else None
        if event is not None and at_ms is not None:
            created = manifests.get(event.workload) if isinstance(event, WorkloadObserved) else None
            steps.append(Step(at_ms=Millis(at_ms), event=event, manifest=created, run_ms=run_ms))
    return steps


def timeline_at(raw: object, path: str, errors: FieldErrors) -> int | None:
    if raw is None:
        errors.add(path, "missing-at", "every timeline entry needs at (seconds)")
        return None
    if isinstance(raw, str):
        errors.add(path, "invalid-at", f"at must be a number of seconds, got {raw!r}")
        return None
    seconds = exact_number(raw, path, errors)
    if seconds is None:
        return None
    if seconds < 0 or (seconds * 1000).denominator != 1:
        errors.add(path, "invalid-at", "at must be >= 0 with at most millisecond precision")
        return None
    return int(seconds * 1000)


def _run_ms(entry: Mapping[object, object], path: str, errors: FieldErrors) -> Millis | None:
    """``runSeconds`` of a ``create``: > 0 with at most millisecond precision."""
    where = f"{path}.{RUN_KEY}"
    if "create" not in entry:
        errors.add(where, "unexpected-run", f"{RUN_KEY} is only allowed with create")
        return None
    seconds = exact_number(entry[RUN_KEY], where, errors)
    if seconds is None:
        return None
    if seconds <= 0 or (seconds * 1000).denominator != 1:
        errors.add(where, "invalid-run", f"{RUN_KEY} must be > 0 with at most ms precision")
        return None
    return Millis(int(seconds * 1000))


def _timeline_event(
    entry: Mapping[object, object],
    path: str,
    at_ms: Millis,
    live: dict[WorkloadKey, int],
    manifests: dict[WorkloadKey, Mapping[str, object]],
    errors: FieldErrors,
) -> ClusterEvent | HoldOrder | None:
    actions = [a for a in ACTIONS if a in entry]
    for key in sorted(str(k) for k in entry):
        if key not in (*ACTIONS, "at", "name", RUN_KEY, CLUSTER_KEY):
            errors.add(f"{path}.{key}", "unknown-action", f"unknown key; actions are {ACTIONS}")
    if len(actions) != 1:
        if not any(str(k) not in (*ACTIONS, "at", "name", RUN_KEY, CLUSTER_KEY) for k in entry):
            errors.add(path, "one-action", f"exactly one of {ACTIONS} is required")
        return None
    action = actions[0]
    if "name" in entry and action != "create":
        errors.add(f"{path}.name", "unexpected-name", "name is only allowed with create")
    if CLUSTER_KEY in entry and action != "create":
        errors.add(
            f"{path}.{CLUSTER_KEY}", "unexpected-cluster", "cluster is only allowed with create"
        )
    value = entry[action]
    if action in ("connect", "disconnect", "lost"):
        return _fleet_event(action, value, f"{path}.{action}", errors)
    if action == "create":
        event = _create_event(value, entry.get("name"), path, at_ms, live, errors)
        if CLUSTER_KEY in entry and isinstance(event, WorkloadObserved):
            event = _in_cluster(event, entry[CLUSTER_KEY], f"{path}.{CLUSTER_KEY}", live, errors)
        if isinstance(event, WorkloadObserved) and isinstance(value, Mapping):
            manifests[event.workload] = value
        return event
    if action in ("fail", "oom"):
        return _failure_event(action, value, f"{path}.{action}", live, manifests, errors)
    if action in ("finish", "delete"):
        return _finish_or_delete(action, value, f"{path}.{action}", live, errors)
    if action in ("ready", "progress"):
        event = _progress_event(action, value, f"{path}.{action}", at_ms, live, errors)
        return _min_success_reached(event, manifests)
    if action == "apply":
        return object_event(value, f"{path}.apply", errors)
    if action == "node":
        return node_event(value, f"{path}.node", errors)
    if action in ORDER_ACTIONS:
        return _hold_order(ORDER_ACTIONS[action], value, f"{path}.{action}", errors)
    return _remove_node_event(value, f"{path}.removeNode", errors)


def _create_event(
    manifest: object,
    name: object,
    path: str,
    at_ms: Millis,
    live: dict[WorkloadKey, int],
    errors: FieldErrors,
) -> ClusterEvent | None:
    if name is not None and (not isinstance(name, str) or not name):
        errors.add(f"{path}.name", "invalid-name", "name must be a non-empty string")
        return None
    metadata = manifest.get("metadata") if isinstance(manifest, Mapping) else None
    if (
        name is None
        and isinstance(metadata, Mapping)
        and not metadata.get("name")
        and metadata.get("generateName")
    ):
        errors.add(
            f"{path}.name",
            "missing-name",
            "the manifest has only generateName; give the job a name with name:",
        )
        return None
    try:
        event = extract_workload(manifest, created_ms=at_ms, name=name)
    except WorkloadInvalid as failure:
        errors.absorb(f"{path}.create", failure)
        return None
    live[event.workload] = sum(p.count for p in event.pod_sets if p.count > 0)
    return event


def _in_cluster(
    event: WorkloadObserved,
    raw: object,
    path: str,
    live: dict[WorkloadKey, int],
    errors: FieldErrors,
) -> WorkloadObserved | None:
    """``event`` as the watcher of cluster ``raw`` reports it: its key names the cluster."""
    try:
        cluster = cluster_name(raw, path)
    except ValueRefused as refused:
        errors.absorb(path, refused)
        return None
    key = workload_key(event.namespace, event.name, cluster)
    live[key] = live.pop(event.workload)
    return msgspec.structs.replace(event, workload=key)


def _fleet_event(action: str, value: object, path: str, errors: FieldErrors) -> ClusterEvent | None:
    """``connect: {cluster, zones}``, ``disconnect: {cluster, reason}``, ``lost: {cluster,
    by, reason}`` (M1): what a cluster's watcher, or an operator, puts on the log."""
    if not isinstance(value, Mapping):
        errors.add(path, "not-a-mapping", f"takes {{{', '.join(FLEET_KEYS)}}}")
        return None
    allowed = {"connect": ("cluster", "zones"), "disconnect": ("cluster", "reason")}.get(
        action, ("cluster", "by", "reason")
    )
    for key_name in sorted(str(k) for k in value):
        if key_name not in allowed:
            errors.add(f"{path}.{key_name}", "unknown-key", f"{action} takes {allowed}")
    reason, by = value.get("reason", ""), value.get("by", SCENARIO_OPERATOR)
    try:
        cluster = cluster_name(value.get("cluster"), f"{path}.cluster")
        zones = names.zone_names(value["zones"], f"{path}.zones") if "zones" in value else []
    except ValueRefused as refused:
        errors.absorb("", refused)
        return None
    if not isinstance(reason, str) or not isinstance(by, str) or not by:
        errors.add(path, "invalid-type", "reason and by are strings (by non-empty)")
        return None
    if action == "connect":
        return ClusterConnected(cluster=cluster, zones=zones, watcher=SCENARIO_OPERATOR)
    if action == "disconnect":
        return ClusterDisconnected(cluster=cluster, reason=reason)
    return ClusterLost(cluster=cluster, by=by, reason=reason)


def _finish_or_delete(
    action: str, value: object, path: str, live: dict[WorkloadKey, int], errors: FieldErrors
) -> ClusterEvent | None:
    if not isinstance(value, str) or value.count("/") != 1:
        errors.add(path, "invalid-job", f"{action} takes namespace/name, got {value!r}")
        return None
    key = WorkloadKey(value)
    if key not in live:
        errors.add(path, "unknown-job", f"{value} was not created earlier in the timeline")
        return None
    if action == "delete":
        live.pop(key, None)
        return WorkloadDeleted(workload=key)
    return WorkloadFinished(workload=key)


def _live_job(
    value: object, path: str, live: dict[WorkloadKey, int], errors: FieldErrors
) -> WorkloadKey | None:
    if not isinstance(value, str) or value.count("/") != 1:
        errors.add(path, "invalid-job", f"expected namespace/name, got {value!r}")
        return None
    key = WorkloadKey(value)
    first = first_attempt(key)
    if key not in live and first in live:
        # A retry the run may create (R12): it has its first attempt's pods.
        live[key] = live[first]
    if key not in live:
        errors.add(path, "unknown-job", f"{value} was not created earlier in the timeline")
        return None
    return key


def first_attempt(key: WorkloadKey) -> WorkloadKey:
    """``ns/name`` of ``ns/name-retry-<n>`` (R12); any other key itself."""
    head, sep, tail = key.rpartition("-retry-")
    return WorkloadKey(head) if sep and tail.isdigit() else key


def _failure_event(
    action: str,
    value: object,
    path: str,
    live: dict[WorkloadKey, int],
    manifests: dict[WorkloadKey, Mapping[str, object]],
    errors: FieldErrors,
) -> ClusterEvent | None:
    """``fail`` / ``oom``: the job failed, one container ending with an exit code or OOMKilled
    (R12, R13). Its memory is filled in as the run plays it (the watcher reports it)."""
    raw = value if isinstance(value, Mapping) else {"job": value}
    allowed = FAIL_KEYS if action == "fail" else FAIL_KEYS[:2]
    for key_name in sorted(str(k) for k in raw):
        if key_name not in allowed:
            errors.add(f"{path}.{key_name}", "unknown-key", f"{action} keys: {allowed}")
    key = _live_job(
        raw.get("job"), f"{path}.job" if isinstance(value, Mapping) else path, live, errors
    )
    if key is None:
        return None
    containers = list(container_memory(manifests.get(first_attempt(key), {})))
    name = raw.get("container", containers[0][1] if containers else None)
    pod_sets = [pod_set for pod_set, container in containers if container == name]
    if not pod_sets:
        errors.add(f"{path}.container", "unknown-container", f"{key} has no container {name!r}")
        return None
    exit_code = raw.get("exitCode", 1) if action == "fail" else OOM_EXIT_CODE
    if isinstance(exit_code, bool) or not isinstance(exit_code, int) or exit_code == 0:
        errors.add(f"{path}.exitCode", "invalid-exit-code", "exitCode must be a non-zero integer")
        return None
    termination = ContainerTermination(
        pod_set=pod_sets[0],
        container=str(name),
        reason="OOMKilled" if action == "oom" else "Error",
        exit_code=exit_code,
    )
    return WorkloadFinished(workload=key, succeeded=False, terminations=[termination])


def _progress_event(
    action: str,
    value: object,
    path: str,
    at_ms: Millis,
    live: dict[WorkloadKey, int],
    errors: FieldErrors,
) -> ClusterEvent | None:
    """``ready: ns/name`` (every pod ready) or ``progress: {job, ready, total, succeeded}``
    (R10)."""
    if action == "ready":
        key = _live_job(value, path, live, errors)
        if key is None:
            return None
        return WorkloadProgress(workload=key, ready=live[key], total=live[key], observed_ms=at_ms)
    if not isinstance(value, Mapping):
        errors.add(path, "not-a-mapping", "progress takes {job, ready, total}")
        return None
    for key_name in sorted(str(k) for k in value):
        if key_name not in PROGRESS_KEYS:
            errors.add(f"{path}.{key_name}", "unknown-key", f"progress keys: {PROGRESS_KEYS}")
    key = _live_job(value.get("job"), f"{path}.job", live, errors)
    if key is None:
        return None
    total = value.get("total", live[key])
    ready = value.get("ready")
    succeeded = value.get("succeeded", 0)
    counts_valid = True
    for name, count in (("ready", ready), ("total", total), ("succeeded", succeeded)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            errors.add(f"{path}.{name}", "invalid-count", f"{name} must be a whole number >= 0")
            counts_valid = False
    if not counts_valid:
        return None
    assert isinstance(ready, int) and isinstance(total, int) and isinstance(succeeded, int)
    if ready > total:
        errors.add(f"{path}.ready", "invalid-count", f"ready {ready} is more than total {total}")
        return None
    if succeeded > ready:
        message = f"succeeded {succeeded} is more than ready {ready} (succeeded pods are ready)"
        errors.add(f"{path}.succeeded", "invalid-count", message)
        return None
    return WorkloadProgress(
        workload=key, ready=ready, total=total, succeeded=succeeded, observed_ms=at_ms
    )


def _min_success_reached(
    event: ClusterEvent | None, manifests: Mapping[WorkloadKey, Mapping[str, object]]
) -> ClusterEvent | None:
    """The watcher's part for minSuccess: once as many pods succeeded as the job's
    ``usher.io/min-success`` asks, it reports the job finished (succeeded), not progress."""
    if not isinstance(event, WorkloadProgress) or event.succeeded == 0:
        return event
    manifest = manifests.get(event.workload)
    outcome = success.reached(dict(manifest), event.succeeded) if manifest is not None else None
    if outcome is None:
        return event
    wanted = outcome.min_success
    return WorkloadFinished(workload=event.workload, succeeded=True, min_success=wanted)


def _hold_order(
    action: HoldAction, value: object, path: str, errors: FieldErrors
) -> HoldOrder | None:
    """``hold|drain|resume: {node, by, reason, grace}`` (R14/R15). Its shape is checked
    here; whether it names a node and a valid grace is judged when it is played, against
    the tree then in force, as the ledger judges an operator's order."""
    if not isinstance(value, Mapping):
        errors.add(path, "not-a-mapping", f"takes {{{', '.join(ORDER_KEYS)}}}")
        return None
    for key_name in sorted(str(k) for k in value):
        if key_name not in ORDER_KEYS or (key_name == "grace" and action != "Drain"):
            errors.add(f"{path}.{key_name}", "unknown-key", f"keys: {ORDER_KEYS} (grace: drain)")
    node, grace = value.get("node"), value.get("grace")
    by, reason = value.get("by", SCENARIO_OPERATOR), value.get("reason", "")
    for name, text in (("node", node), ("by", by), ("reason", reason)):
        if not isinstance(text, str) or (name != "reason" and not text):
            errors.add(f"{path}.{name}", "invalid-type", f"{name} must be a non-empty string")
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int)):
        errors.add(f"{path}.grace", "invalid-grace", "grace is a whole number of seconds")
        return None
    if not (isinstance(node, str) and isinstance(by, str) and isinstance(reason, str)):
        return None
    return HoldOrder(action=action, target=node, by=by, reason=reason, grace_seconds=grace)


def _remove_node_event(value: object, path: str, errors: FieldErrors) -> ClusterEvent | None:
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        errors.add(path, "invalid-node", "removeNode takes {name, zone}")
        return None
    zone = value.get("zone", "default")
    if not isinstance(zone, str):
        errors.add(f"{path}.zone", "invalid-zone", "zone must be a string")
        return None
    return NodeRemoved(node=NodeName(str(value["name"])), zone=Zone(zone))


__all__ = [
    "ACTIONS",
    "ORDER_FIELDS",
    "RUN_KEY",
    "FieldErrors",
    "Step",
    "exact_number",
    "first_attempt",
    "load_timeline",
    "node_event",
    "object_event",
    "timeline_at",
]
