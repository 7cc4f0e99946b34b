"""Job manifests of the supported kinds, turned into the typed ``WorkloadObserved`` fact.

What it does: reads a manifest of any kind in the registry (``usher.core.kinds``: Job, TFJob,
PyTorchJob, MPIJob, RayJob, JobSet, SparkApplication, Argo Workflow; a dict from YAML or the API
server) and extracts what admission needs: identity, zone, quota label, priority, suspension and
the pod sets with their exact per-pod requests (T3, T4). Where a kind keeps its pod
sets, suspend flag and workload-level priority class is its family module's knowledge; this
module reads the pod templates. Every problem is collected with its field path and reported
together.

Choices Usher makes (Kubernetes' own rules where it has one):
- Per pod: containers summed (a missing request falls back to the limit), plus sidecar init
  containers (``restartPolicy: Always``, which run alongside); then the max with each ordinary
  init container (plus the sidecars started before it); plus ``spec.overhead``. Resources whose
  total is zero are left out, so a pod set names only what it really requests.
- A workload-level priority class (Kubeflow's ``runPolicy.schedulingPolicy.priorityClass``, as
  in Kueue) wins over pod templates; otherwise the first pod set, in pod-set order, that names
  a class. Each family module documents its pod sets (RayJob head and worker groups, JobSet
  replicated Jobs, Spark driver and executors, Argo's parallelism bound).
- Replica types keep their written names (``PS``, ``Worker``); pod set names must be unique.
- ``usher.io/min-parallelism`` (an annotation) gives the kind's scalable pod set the fewest
  pods it may start with (R11, docs/admission-rules.md); a kind without one refuses it.
- A declared maximum runtime (RT1) is read by ``kinds.runtime``.

It also says where each kind keeps its suspend flag (``suspend_path``, for the admission
webhook), fills containers that request nothing from a namespace's LimitRange defaults
(``with_container_defaults``) and names the containers that still request nothing
(``unrequested_containers``), so such a job is not admitted for free.

What it must never do: guess a quantity, silently drop a malformed field, mutate a manifest it
was given, or do I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from schemas import (
    DEFAULT_ZONE,
    FieldError,
    Millis,
    PodSet,
    RetryAsk,
    WorkloadObserved,
    Zone,
    workload_key,
)
from usher.core.kinds import SUPPORTED_KINDS as SUPPORTED_KINDS  # re-exported: its users
from usher.core.kinds import KindFamily, PodSetSource, family_of_kind_id, runtime, topology
from usher.core.kinds.family import ZONE_LABEL as ZONE_LABEL  # re-exported: its users
from usher.core.kinds.fields import (
    ANNOTATIONS_PREFIX,
    Errors,
    Raw,
    annotation,
    annotations_of,
    container_requests,
    dig,
    error,
    optional_mapping,
    optional_string,
    pod_requests,
    pod_spec,
    required_mapping,
    required_string,
    type_name,
)
from usher.core.model.errors import InputError, ValueRefused, WorkloadInvalid
from usher.core.model.quantity import format_quantity
from usher.core.model.reasons import seconds_text
from usher.core.rules.retry import container_memory
from usher.core.tree.zone_fallback import parse_accepted_zones
from usher.core.values.labels import is_topology_key
from usher.core.values.names import MAX_GATES, MAX_ZONES, is_gate_name, is_zone_name, zone_name
from usher.core.values.numbers import MAX_COUNT, MAX_PRIORITY, MIN_PRIORITY
from usher.core.values.quantities import MAX_QUANTITY
from usher.core.values.registry import (
    ADMISSION_GATED_BY,
    MAX_RETRY_LIMIT,
    MIN_PARALLELISM,
    MIN_SUCCESS,
    OOM_MEMORY_CAP,
    OOM_MEMORY_FACTOR,
    RETRY_LIMIT,
    SIM_DURATION,
    Setting,
)

QUOTA_LABEL = "quota.scheduling.alibabacloud.com/name"
MIN_PARALLELISM_ANNOTATION = MIN_PARALLELISM.key
"""The fewest pods the job may start with when all of them do not fit (R11)."""
OOM_MEMORY_CAP_ANNOTATION = OOM_MEMORY_CAP.key
"""The most memory an OOM scale-up gives any container of the job (R13)."""
RETRY_ANNOTATIONS = (RETRY_LIMIT.key, OOM_MEMORY_FACTOR.key, OOM_MEMORY_CAP.key)
"""Job annotations of retries: the tree's attribute names, and the cap (R12, R13)."""
DEFAULT_NAMESPACE = "default"

NOT_ADMITTED = "not-admitted"
"""The error code of a job found running without an admission from Usher (created
unsuspended where no admission webhook ran, or unsuspended by someone else): the watcher
suspends it and it is queued like every other job; its manifest was not at fault."""


def bypassed_queue(errors: list[FieldError]) -> bool:
    """Whether a ``WorkloadRejected`` with ``errors`` only says the job ran unadmitted (the
    watcher suspended it; it waits in its queue), not that its manifest is invalid."""
    return bool(errors) and all(e.code == NOT_ADMITTED for e in errors)


SUSPENDED_BY_USHER = "suspended"
"""What a ``WorkloadRejected`` that only says the job ran unadmitted (``bypassed_queue``) is
called wherever it is told (explain's history, the console's feed): the watcher suspended it
and queued it; it was not rejected."""


def suspended_by_usher(
    at_ms: Millis, previous: WorkloadObserved | None, created_ms: Millis | None
) -> str:
    """The one story of a job the watcher found running unadmitted (no admission webhook
    suspended it at creation) and suspended at ``at_ms``: created unsuspended (``previous``,
    its last observation before, is None) or unsuspended later, and, once its creation time
    (``created_ms``) is known, how long its pods could run."""
    if previous is None:
        said = "created unsuspended; suspended by Usher and queued"
    else:
        said = "unsuspended without an admission; suspended by Usher and queued again"
    if previous is None and created_ms is not None and at_ms >= created_ms:
        ran = seconds_text(at_ms - created_ms)
        said += f" (no admission webhook suspended it at creation: its pods could run {ran} s)"
    return said


CHECKED_ONLY: tuple[Setting[Any], ...] = (MIN_SUCCESS, SIM_DURATION)
"""Annotations read elsewhere (the watcher counts ``min-success`` against the job's pods, the
local emulator runs a job for its ``sim-duration``) that a job is refused for here, once, when
malformed: ``extract_workload`` is where every annotation's syntax is checked."""

PRIORITY_CLASS_API_VERSION = "scheduling.k8s.io/v1"
PRIORITY_CLASS_KIND = "PriorityClass"


def extract_workload(
    manifest: object, *, created_ms: Millis, name: str | None = None
) -> WorkloadObserved:
    """Extract the workload of a job manifest; ``name`` overrides ``metadata.name`` when given.

    Raises ``WorkloadInvalid`` carrying every problem found, each with its field path.
    """
    if not isinstance(manifest, Mapping):
        message = f"expected a manifest mapping, got {type_name(manifest)}"
        problem = error("", "not-a-mapping", message)
        raise WorkloadInvalid(workload_key(DEFAULT_NAMESPACE, name or ""), "", [problem])
    errors: Errors = []
    kind = _kind_id(manifest, errors)
    identity = _identity(manifest, name, errors)
    key = workload_key(identity.namespace, identity.name)
    rule = family_of_kind_id(kind)
    if rule is None:
        if not errors:
            errors.append(_unsupported(kind))
        raise WorkloadInvalid(key, kind, errors)
    spec = required_mapping(manifest.get("spec"), "spec", errors)
    if spec is None:
        raise WorkloadInvalid(key, kind, errors)
    pod_sets, priority_class, priority = _pod_sets(rule, spec, errors)
    pod_sets = _with_minimum(manifest, rule, pod_sets, errors)
    suspended = _suspended(spec, rule.suspend_path, errors)
    retry_ask = _retry_ask(manifest, errors)
    for entry in CHECKED_ONLY:
        annotation(entry, manifest, errors)
    max_runtime = runtime.declared_seconds(manifest, rule, errors)
    admission_gates = annotation(ADMISSION_GATED_BY, manifest, errors) or []
    topology_ask = topology.asked(manifest, errors)
    errors += size_errors(pod_sets, "spec")
    if errors:
        raise WorkloadInvalid(key, kind, errors)
    return WorkloadObserved(
        workload=key,
        namespace=identity.namespace,
        name=identity.name,
        kind=kind,
        uid=identity.uid,
        zone=identity.zone,
        priority_class=priority_class,
        priority=priority,
        created_ms=created_ms,
        pod_sets=pod_sets,
        quota_name=identity.quota_name,
        suspended=suspended,
        resource_version=identity.resource_version,
        retry=retry_ask,
        zones=identity.zones,
        max_runtime_seconds=max_runtime,
        admission_gates=admission_gates,
        topology=topology_ask,
    )


def _retry_ask(manifest: Raw, errors: Errors) -> RetryAsk | None:
    """The job's retry annotations (R12, R13), checked; None when it carries none."""
    annotations = annotations_of(manifest)
    if not any(name in annotations for name in RETRY_ANNOTATIONS):
        return None
    limit = annotation(RETRY_LIMIT, manifest, errors)
    refused = len(errors)
    annotation(OOM_MEMORY_FACTOR, manifest, errors)
    factor = annotations.get(OOM_MEMORY_FACTOR.key) if len(errors) == refused else None
    cap = _memory_cap(manifest, errors)
    return RetryAsk(
        limit=limit, memory_factor=factor if isinstance(factor, str) else None, memory_cap=cap
    )


def _memory_cap(manifest: Raw, errors: Errors) -> int | None:
    """``usher.io/oom-memory-cap``: a memory quantity no container already requests more of."""
    cap = annotation(OOM_MEMORY_CAP, manifest, errors)
    if cap is None:
        return None
    path = f"{ANNOTATIONS_PREFIX}.{OOM_MEMORY_CAP_ANNOTATION}"
    for (pod_set, container), (request, _) in container_memory(manifest).items():
        if request is not None and request > cap:
            message = (
                f"{format_quantity('memory', cap)} is below the memory request "
                f"{format_quantity('memory', request)} of container {container} of {pod_set}"
            )
            errors.append(error(path, "cap-below-request", message))
            return None
    return cap


def observed_errors(event: WorkloadObserved) -> list[FieldError]:
    """What in a typed ``WorkloadObserved`` no manifest read by ``extract_workload`` could
    give (the bounds of the registry): the engine does not fold such an event, which only a
    forged log entry carries. Never raises."""
    found: list[FieldError] = []
    zones = [event.zone, *event.zones]
    if not all(is_zone_name(zone) for zone in zones) or len(event.zones) > MAX_ZONES:
        found.append(error("zones", "invalid-value", "a zone is not a zone name"))
    ask = event.retry
    if ask is not None:
        found += _ask_errors(ask)
    found += size_errors(event.pod_sets, "pod_sets")
    for pod_set in event.pod_sets:
        if pod_set.min_count is not None and not 1 <= pod_set.min_count <= pod_set.count:
            found.append(error("pod_sets.min_count", "out-of-range", "not 1 to the pod count"))
    declared = event.max_runtime_seconds
    if declared is not None and not 1 <= declared <= runtime.MOST_SECONDS:
        found.append(error("max_runtime_seconds", "out-of-range", "not a declarable runtime"))
    gates = event.admission_gates
    if len(gates) > MAX_GATES or len(set(gates)) != len(gates) or not all(map(is_gate_name, gates)):
        found.append(error("admission_gates", "invalid-value", "not a list of gate names"))
    if event.topology is not None and not is_topology_key(event.topology.level):
        found.append(error("topology.level", "invalid-value", "not a topology level"))
    return found


MAX_PODS = MAX_COUNT
"""Pods one pod set may ask for (a million: far beyond any cluster, far below int32)."""


def size_errors(pod_sets: list[PodSet], path: str) -> list[FieldError]:
    """A workload's size within the bounds every count of the queue is kept in: at most
    ``MAX_PODS`` pods a set, no negative amount, and at most ``MAX_QUANTITY`` of each resource
    per pod and in all (count x per pod, summed). A bigger one (parallelism 2147483647 of
    1P cpu) could never be admitted, and its numbers would overflow what the log, the
    ledger and a snapshot store (int64). Never raises."""
    found: list[FieldError] = []
    total: dict[str, int] = {}
    for pod_set in pod_sets:
        where = f"{path}.pod_sets({pod_set.name})"
        if not 0 <= pod_set.count <= MAX_PODS:
            found.append(error(f"{where}.count", "out-of-range", f"not 0 to {MAX_PODS} pods"))
            continue
        for resource, amount in pod_set.requests.items():
            if not 0 <= amount <= MAX_QUANTITY:
                most = format_quantity(resource, MAX_QUANTITY)
                message = f"{resource} per pod is not 0 to {most}"
                found.append(error(f"{where}.requests.{resource}", "out-of-range", message))
            else:
                total[resource] = total.get(resource, 0) + pod_set.count * amount
    for resource, amount in sorted(total.items()):
        if amount > MAX_QUANTITY:
            most = format_quantity(resource, MAX_QUANTITY)
            message = f"{resource} in all (pods x per pod) is more than {most}"
            found.append(error(f"{path}.{resource}", "out-of-range", message))
    return found


def _ask_errors(ask: RetryAsk) -> list[FieldError]:
    found: list[FieldError] = []
    if ask.limit is not None and not 0 <= ask.limit <= MAX_RETRY_LIMIT:
        found.append(error("retry.limit", "out-of-range", f"not 0 to {MAX_RETRY_LIMIT}"))
    factor = ask.memory_factor
    if factor is not None and OOM_MEMORY_FACTOR.read({OOM_MEMORY_FACTOR.key: factor}) is None:
        found.append(error("retry.memory_factor", "invalid-value", "not a memory factor"))
    if ask.memory_cap is not None and not 0 < ask.memory_cap <= MAX_QUANTITY:
        found.append(error("retry.memory_cap", "out-of-range", f"not 1 to {MAX_QUANTITY}"))
    return found


def suspend_path(kind: str) -> tuple[str, ...] | None:
    """Where a supported ``apiVersion/Kind`` keeps its suspend flag under ``spec``; None for a
    kind Usher does not admit."""
    rule = family_of_kind_id(kind)
    return rule.suspend_path if rule is not None else None


def _app_containers(manifest: object) -> Iterator[tuple[str, dict[str, object]]]:
    """``(field path, container)`` of every app container of every pod template of a supported
    manifest, in pod-set order; what is malformed is skipped (``extract_workload`` reports it)."""
    if not isinstance(manifest, Mapping):
        return
    scratch: Errors = []
    rule = family_of_kind_id(_kind_id(manifest, scratch))
    spec = manifest.get("spec")
    if rule is None or not isinstance(spec, Mapping):
        return
    for source in rule.pod_sets(spec, scratch):
        template = source.template
        pod_spec = template.get("spec") if isinstance(template, Mapping) else None
        containers = pod_spec.get("containers") if isinstance(pod_spec, Mapping) else None
        for index, container in enumerate(containers if isinstance(containers, list) else []):
            if isinstance(container, dict):
                yield f"{source.template_path}.spec.containers[{index}]", container


def _declared(container: Mapping[str, object], field: str) -> Mapping[str, object]:
    resources = container.get("resources")
    declared = resources.get(field) if isinstance(resources, Mapping) else None
    return declared if isinstance(declared, Mapping) else {}


def with_container_defaults(manifest: object, defaults: Mapping[str, str]) -> object:
    """A copy of ``manifest`` where each app container gets ``defaults`` (a namespace's
    LimitRange ``defaultRequest``, else ``default``) as the request of every resource it
    neither requests nor limits, as the API server's LimitRanger does to the pods."""
    if not defaults:
        return manifest
    copied = copy.deepcopy(manifest)
    for _, container in _app_containers(copied):
        requests = dict(_declared(container, "requests"))
        limits = _declared(container, "limits")
        missing = {r: q for r, q in defaults.items() if r not in requests and r not in limits}
        if not missing:
            continue
        resources = container.get("resources")
        resources = dict(resources) if isinstance(resources, Mapping) else {}
        resources["requests"] = {**requests, **missing}
        container["resources"] = resources
    return copied


def unrequested_containers(manifest: object) -> list[FieldError]:
    """One error per app container that requests (or limits) nothing but zeros, or nothing at
    all: it would cost no quota at all, however the manifest was written (T3)."""
    errors: Errors = []
    for path, container in _app_containers(manifest):
        if not any(container_requests(container, path, []).values()):
            message = (
                f"{path} requests no resources: it would run without counting against any "
                "quota; set resources.requests, give the namespace a LimitRange with defaults, "
                "or allow it in the quota tree"
            )
            errors.append(error(f"{path}.resources.requests", "no-requests", message))
    return errors


def extract_priority_class(manifest: object) -> tuple[str, int]:
    """``(name, value)`` of a ``scheduling.k8s.io/v1`` PriorityClass; ``InputError`` otherwise."""
    if not isinstance(manifest, Mapping):
        message = f"expected a manifest mapping, got {type_name(manifest)}"
        raise InputError([error("", "not-a-mapping", message)])
    errors: Errors = []
    if manifest.get("apiVersion") != PRIORITY_CLASS_API_VERSION:
        message = (
            f"apiVersion must be {PRIORITY_CLASS_API_VERSION}, got {manifest.get('apiVersion')!r}"
        )
        errors.append(error("apiVersion", "invalid-api-version", message))
    if manifest.get("kind") != PRIORITY_CLASS_KIND:
        message = f"kind must be {PRIORITY_CLASS_KIND}, got {manifest.get('kind')!r}"
        errors.append(error("kind", "invalid-kind", message))
    metadata = optional_mapping(manifest.get("metadata"), "metadata", errors)
    name = required_string(metadata.get("name"), "metadata.name", errors)
    value = _priority_value(manifest.get("value"), errors)
    if errors:
        raise InputError(errors)
    return name, value


def _priority_value(raw: object, errors: Errors) -> int:
    if raw is None:
        errors.append(error("value", "missing-field", "a PriorityClass needs a value"))
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int):
        errors.append(error("value", "invalid-type", f"value must be an integer, got {raw!r}"))
        return 0
    if not MIN_PRIORITY <= raw <= MAX_PRIORITY:
        errors.append(error("value", "out-of-range", f"value {raw} is outside the int32 range"))
        return 0
    return raw


# --- identity ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Identity:
    namespace: str
    name: str
    uid: str
    resource_version: str
    zone: Zone
    zones: list[Zone]
    """Every zone it accepts in order (Z2); empty when only ``zone``."""
    quota_name: str | None


def _kind_id(manifest: Raw, errors: Errors) -> str:
    """``apiVersion/kind``, e.g. ``batch/v1/Job``; empty parts when missing (reported)."""
    api_version = required_string(manifest.get("apiVersion"), "apiVersion", errors)
    kind = required_string(manifest.get("kind"), "kind", errors)
    return f"{api_version}/{kind}"


def _unsupported(kind: str) -> FieldError:
    supported = ", ".join(SUPPORTED_KINDS)
    message = f"kind {kind} is not supported; Usher admits {supported}"
    return error("kind", "unsupported-kind", message)


def _identity(manifest: Raw, name_override: str | None, errors: Errors) -> _Identity:
    metadata = optional_mapping(manifest.get("metadata"), "metadata", errors)
    namespace = optional_string(metadata.get("namespace"), "metadata.namespace", errors)
    labels = optional_mapping(metadata.get("labels"), "metadata.labels", errors)
    zone = _zone_label(labels, errors)
    quota = optional_string(labels.get(QUOTA_LABEL), f"metadata.labels.{QUOTA_LABEL}", errors)
    version = metadata.get("resourceVersion")
    zones, problems = parse_accepted_zones(annotations_of(manifest), zone, "metadata.annotations.")
    errors.extend(problems)
    return _Identity(
        namespace=namespace or DEFAULT_NAMESPACE,
        name=name_override or _workload_name(metadata, errors),
        uid=optional_string(metadata.get("uid"), "metadata.uid", errors) or "",
        resource_version=optional_string(version, "metadata.resourceVersion", errors) or "",
        # With accepted zones and no label, the first accepted zone owns the job (Z2).
        zone=Zone(zone) if zone else (zones[0] if zones else DEFAULT_ZONE),
        zones=zones,
        quota_name=quota or None,
    )


def _zone_label(labels: Raw, errors: Errors) -> str | None:
    """The ``usher.io/zone`` label: a zone name (it goes into subjects), else reported."""
    raw = labels.get(ZONE_LABEL)
    if raw is None or raw == "":
        return None
    try:
        return zone_name(raw, f"metadata.labels.{ZONE_LABEL}", name=ZONE_LABEL)
    except ValueRefused as refused:
        errors.extend(refused.errors)
        return None


def _workload_name(metadata: Raw, errors: Errors) -> str:
    raw = metadata.get("name")
    if raw is None:
        # A generateName-only manifest has no name until the API server gives it one.
        generated = metadata.get("generateName")
        hint = f" (generateName {generated!r} alone is not a name)" if generated else ""
        errors.append(error("metadata.name", "missing-field", f"metadata.name is required{hint}"))
        return generated if isinstance(generated, str) else ""
    return required_string(raw, "metadata.name", errors)


# --- pod sets ---------------------------------------------------------------------------------


def _pod_sets(
    rule: KindFamily, spec: Raw, errors: Errors
) -> tuple[list[PodSet], str | None, int | None]:
    """The pod sets with their per-pod requests, the priority class and ``spec.priority``."""
    sources = rule.pod_sets(spec, errors)
    _check_unique_names(sources, errors)
    pod_sets: list[PodSet] = []
    priority_class = _workload_priority_class(spec, rule.priority_class_path, errors)
    priority: int | None = None
    for source in sources:
        if source.requests is not None:
            # Sized by the kind from its own fields (Spark cores/memory, Argo templates).
            pod_sets.append(PodSet(name=source.name, count=source.count, requests=source.requests))
            continue
        template_spec = pod_spec(source.template, source.template_path, errors)
        path = f"{source.template_path}.spec"
        requests = pod_requests(template_spec, path, errors) if template_spec is not None else {}
        pod_sets.append(PodSet(name=source.name, count=source.count, requests=requests))
        if template_spec is None:
            continue
        own_class = optional_string(
            template_spec.get("priorityClassName"), f"{path}.priorityClassName", errors
        )
        priority_class = priority_class or own_class or None
        own_priority = _pod_priority(template_spec.get("priority"), f"{path}.priority", errors)
        priority = own_priority if priority is None else priority
    return pod_sets, priority_class, priority


def _with_minimum(
    manifest: Raw, rule: KindFamily, pod_sets: list[PodSet], errors: Errors
) -> list[PodSet]:
    """The pod sets, the scalable one with its declared minimum (R11), checked."""
    annotations = annotations_of(manifest)
    if MIN_PARALLELISM_ANNOTATION not in annotations:
        return pod_sets
    path = f"{ANNOTATIONS_PREFIX}.{MIN_PARALLELISM_ANNOTATION}"
    minimum = annotation(MIN_PARALLELISM, manifest, errors)
    if minimum is None:
        return pod_sets
    scalable = rule.scalable_pod_set
    if scalable is None:
        message = f"a {rule.kind} cannot start with fewer pods than it asks for"
        errors.append(error(path, "not-scalable", message))
        return pod_sets
    out: list[PodSet] = []
    for pod_set in pod_sets:
        if pod_set.name == scalable and minimum < pod_set.count:
            pod_set = PodSet(
                name=pod_set.name,
                count=pod_set.count,
                requests=pod_set.requests,
                min_count=minimum,
            )
        elif pod_set.name == scalable and minimum > pod_set.count:
            message = f"{minimum} is more than the {pod_set.count} pods it runs"
            errors.append(error(path, "above-count", message))
        out.append(pod_set)
    return out


def _check_unique_names(sources: list[PodSetSource], errors: Errors) -> None:
    seen: set[str] = set()
    for source in sources:
        if source.name in seen:
            message = f"pod set name {source.name!r} is used twice"
            errors.append(error(source.name_path, "duplicate-pod-set", message))
        seen.add(source.name)


def _workload_priority_class(spec: Raw, path: tuple[str, ...] | None, errors: Errors) -> str | None:
    if path is None:
        return None
    raw = dig(spec, path, errors)
    return optional_string(raw, ".".join(("spec", *path)), errors) or None


def _pod_priority(raw: object, path: str, errors: Errors) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int):
        errors.append(error(path, "invalid-type", f"priority must be an integer, got {raw!r}"))
        return None
    return raw


def _suspended(spec: Raw, path: tuple[str, ...], errors: Errors) -> bool:
    raw = dig(spec, path, errors)
    if raw is None:
        return False
    if not isinstance(raw, bool):
        field_path = ".".join(("spec", *path))
        errors.append(
            error(field_path, "invalid-type", f"suspend must be true or false, got {raw!r}")
        )
        return False
    return raw
