"""Job manifests of the supported kinds, turned into the typed ``WorkloadObserved`` fact.

What it does: reads a Job, TFJob, PyTorchJob, MPIJob, RayJob or JobSet manifest (a dict from
YAML or the API server) and extracts what admission needs: identity, zone, quota label,
priority, suspension and the pod sets with their exact per-pod requests (SEMANTICS section 1).
Every problem is collected with its field path and reported together.

Choices where SEMANTICS is silent (Kubernetes' own rules where it has one):
- Per pod: containers summed (a missing request falls back to the limit), plus sidecar init
  containers (``restartPolicy: Always``, which run alongside); then the max with each ordinary
  init container (plus the sidecars started before it); plus ``spec.overhead``. Resources whose
  total is zero are left out, so a pod set names only what it really requests.
- Kubeflow: ``runPolicy.schedulingPolicy.priorityClass`` wins over pod templates (as in Kueue);
  otherwise the first pod set, in pod-set order, that names a class.
- RayJob: one ``head`` pod set plus one per worker group, ``replicas x numOfHosts`` pods. A RayJob
  without ``rayClusterSpec`` (one that borrows an existing cluster) is rejected.
- JobSet: ``replicas x`` the pod count of its Job template (``min(parallelism, completions)``).
- Replica types keep their written names (``PS``, ``Worker``); pod set names must be unique.

It also says where each kind keeps its suspend flag (``suspend_path``, for the admission
webhook), fills containers that request nothing from a namespace's LimitRange defaults
(``with_container_defaults``) and names the containers that still request nothing
(``unrequested_containers``), so such a job is not admitted for free.

What it must never do: guess a quantity, silently drop a malformed field, mutate a manifest it
was given, or do I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from schemas import (
    DEFAULT_ZONE,
    FieldError,
    Millis,
    PodSet,
    Resources,
    WorkloadObserved,
    Zone,
    workload_key,
)
from usher.core.errors import InputError, WorkloadInvalid
from usher.core.quantity import collect_resources

ZONE_LABEL = "usher.io/zone"
QUOTA_LABEL = "quota.scheduling.alibabacloud.com/name"
DEFAULT_NAMESPACE = "default"
MAIN_POD_SET = "main"
HEAD_POD_SET = "head"

PRIORITY_CLASS_API_VERSION = "scheduling.k8s.io/v1"
PRIORITY_CLASS_KIND = "PriorityClass"
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

Errors = list[FieldError]
Raw = Mapping[str, object]


@dataclass(frozen=True)
class _PodSetSource:
    """A pod set as found in the manifest, before its pod template is read."""

    name: str
    count: int
    template: object
    template_path: str
    name_path: str


@dataclass(frozen=True)
class _KindRule:
    """Where a kind keeps its pod sets, its suspend flag and its workload-level priority class."""

    pod_sets: Callable[[Raw, Errors], list[_PodSetSource]]
    suspend_path: tuple[str, ...]
    priority_class_path: tuple[str, ...] | None = None


def extract_workload(
    manifest: object, *, created_ms: Millis, name: str | None = None
) -> WorkloadObserved:
    """Extract the workload of a job manifest; ``name`` overrides ``metadata.name`` when given.

    Raises ``WorkloadInvalid`` carrying every problem found, each with its field path.
    """
    if not isinstance(manifest, Mapping):
        error = _error("", "not-a-mapping", f"expected a manifest mapping, got {_kind(manifest)}")
        raise WorkloadInvalid(workload_key(DEFAULT_NAMESPACE, name or ""), "", [error])
    errors: Errors = []
    kind = _kind_id(manifest, errors)
    identity = _identity(manifest, name, errors)
    key = workload_key(identity.namespace, identity.name)
    rule = _KIND_RULES.get(kind)
    if rule is None:
        if not errors:
            errors.append(_unsupported(kind))
        raise WorkloadInvalid(key, kind, errors)
    spec = _required_mapping(manifest.get("spec"), "spec", errors)
    if spec is None:
        raise WorkloadInvalid(key, kind, errors)
    pod_sets, priority_class, priority = _pod_sets(rule, spec, errors)
    suspended = _suspended(spec, rule.suspend_path, errors)
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
    )


def suspend_path(kind: str) -> tuple[str, ...] | None:
    """Where a supported ``apiVersion/Kind`` keeps its suspend flag under ``spec``; None for a
    kind Usher does not admit."""
    rule = _KIND_RULES.get(kind)
    return rule.suspend_path if rule is not None else None


def _app_containers(manifest: object) -> Iterator[tuple[str, dict[str, object]]]:
    """``(field path, container)`` of every app container of every pod template of a supported
    manifest, in pod-set order; what is malformed is skipped (``extract_workload`` reports it)."""
    if not isinstance(manifest, Mapping):
        return
    scratch: Errors = []
    rule = _KIND_RULES.get(_kind_id(manifest, scratch))
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
    """One error per app container that neither requests nor limits anything: it would cost
    no quota at all."""
    errors: Errors = []
    for path, container in _app_containers(manifest):
        if not _declared(container, "requests") and not _declared(container, "limits"):
            message = (
                f"{path} requests no resources: it would run without counting against any "
                "quota; set resources.requests, give the namespace a LimitRange with defaults, "
                "or allow it in the quota tree"
            )
            errors.append(_error(f"{path}.resources.requests", "no-requests", message))
    return errors


def extract_priority_class(manifest: object) -> tuple[str, int]:
    """``(name, value)`` of a ``scheduling.k8s.io/v1`` PriorityClass; ``InputError`` otherwise."""
    if not isinstance(manifest, Mapping):
        message = f"expected a manifest mapping, got {_kind(manifest)}"
        raise InputError([_error("", "not-a-mapping", message)])
    errors: Errors = []
    if manifest.get("apiVersion") != PRIORITY_CLASS_API_VERSION:
        message = (
            f"apiVersion must be {PRIORITY_CLASS_API_VERSION}, got {manifest.get('apiVersion')!r}"
        )
        errors.append(_error("apiVersion", "invalid-api-version", message))
    if manifest.get("kind") != PRIORITY_CLASS_KIND:
        message = f"kind must be {PRIORITY_CLASS_KIND}, got {manifest.get('kind')!r}"
        errors.append(_error("kind", "invalid-kind", message))
    metadata = _optional_mapping(manifest.get("metadata"), "metadata", errors)
    name = _required_string(metadata.get("name"), "metadata.name", errors)
    value = _priority_value(manifest.get("value"), errors)
    if errors:
        raise InputError(errors)
    return name, value


def _priority_value(raw: object, errors: Errors) -> int:
    if raw is None:
        errors.append(_error("value", "missing-field", "a PriorityClass needs a value"))
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int):
        errors.append(_error("value", "invalid-type", f"value must be an integer, got {raw!r}"))
        return 0
    if not _INT32_MIN <= raw <= _INT32_MAX:
        errors.append(_error("value", "out-of-range", f"value {raw} is outside the int32 range"))
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
    quota_name: str | None


def _kind_id(manifest: Raw, errors: Errors) -> str:
    """``apiVersion/kind``, e.g. ``batch/v1/Job``; empty parts when missing (reported)."""
    api_version = _required_string(manifest.get("apiVersion"), "apiVersion", errors)
    kind = _required_string(manifest.get("kind"), "kind", errors)
    return f"{api_version}/{kind}"


def _unsupported(kind: str) -> FieldError:
    supported = ", ".join(SUPPORTED_KINDS)
    message = f"kind {kind} is not supported; Usher admits {supported}"
    return _error("kind", "unsupported-kind", message)


def _identity(manifest: Raw, name_override: str | None, errors: Errors) -> _Identity:
    metadata = _optional_mapping(manifest.get("metadata"), "metadata", errors)
    namespace = _optional_string(metadata.get("namespace"), "metadata.namespace", errors)
    labels = _optional_mapping(metadata.get("labels"), "metadata.labels", errors)
    zone = _optional_string(labels.get(ZONE_LABEL), f"metadata.labels.{ZONE_LABEL}", errors)
    quota = _optional_string(labels.get(QUOTA_LABEL), f"metadata.labels.{QUOTA_LABEL}", errors)
    version = metadata.get("resourceVersion")
    return _Identity(
        namespace=namespace or DEFAULT_NAMESPACE,
        name=name_override or _workload_name(metadata, errors),
        uid=_optional_string(metadata.get("uid"), "metadata.uid", errors) or "",
        resource_version=_optional_string(version, "metadata.resourceVersion", errors) or "",
        zone=Zone(zone) if zone else DEFAULT_ZONE,
        quota_name=quota or None,
    )


def _workload_name(metadata: Raw, errors: Errors) -> str:
    raw = metadata.get("name")
    if raw is None:
        # A generateName-only manifest has no name until the API server gives it one.
        generated = metadata.get("generateName")
        hint = f" (generateName {generated!r} alone is not a name)" if generated else ""
        errors.append(_error("metadata.name", "missing-field", f"metadata.name is required{hint}"))
        return generated if isinstance(generated, str) else ""
    return _required_string(raw, "metadata.name", errors)


# --- pod sets ---------------------------------------------------------------------------------


def _pod_sets(
    rule: _KindRule, spec: Raw, errors: Errors
) -> tuple[list[PodSet], str | None, int | None]:
    """The pod sets with their per-pod requests, the priority class and ``spec.priority``."""
    sources = rule.pod_sets(spec, errors)
    _check_unique_names(sources, errors)
    pod_sets: list[PodSet] = []
    priority_class = _workload_priority_class(spec, rule.priority_class_path, errors)
    priority: int | None = None
    for source in sources:
        pod_spec = _pod_spec(source.template, source.template_path, errors)
        path = f"{source.template_path}.spec"
        requests = _pod_requests(pod_spec, path, errors) if pod_spec is not None else {}
        pod_sets.append(PodSet(name=source.name, count=source.count, requests=requests))
        if pod_spec is None:
            continue
        own_class = _optional_string(
            pod_spec.get("priorityClassName"), f"{path}.priorityClassName", errors
        )
        priority_class = priority_class or own_class or None
        own_priority = _pod_priority(pod_spec.get("priority"), f"{path}.priority", errors)
        priority = own_priority if priority is None else priority
    return pod_sets, priority_class, priority


def _check_unique_names(sources: list[_PodSetSource], errors: Errors) -> None:
    seen: set[str] = set()
    for source in sources:
        if source.name in seen:
            message = f"pod set name {source.name!r} is used twice"
            errors.append(_error(source.name_path, "duplicate-pod-set", message))
        seen.add(source.name)


def _workload_priority_class(spec: Raw, path: tuple[str, ...] | None, errors: Errors) -> str | None:
    if path is None:
        return None
    raw = _dig(spec, path, errors)
    return _optional_string(raw, ".".join(("spec", *path)), errors) or None


def _pod_priority(raw: object, path: str, errors: Errors) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int):
        errors.append(_error(path, "invalid-type", f"priority must be an integer, got {raw!r}"))
        return None
    return raw


def _suspended(spec: Raw, path: tuple[str, ...], errors: Errors) -> bool:
    raw = _dig(spec, path, errors)
    if raw is None:
        return False
    if not isinstance(raw, bool):
        field_path = ".".join(("spec", *path))
        errors.append(
            _error(field_path, "invalid-type", f"suspend must be true or false, got {raw!r}")
        )
        return False
    return raw


def _job_pod_sets(spec: Raw, errors: Errors) -> list[_PodSetSource]:
    count = _job_pod_count(spec, "spec", errors)
    return [_PodSetSource(MAIN_POD_SET, count, spec.get("template"), "spec.template", "spec")]


def _job_pod_count(job_spec: Raw, path: str, errors: Errors) -> int:
    """Pods a Job runs at once: ``parallelism`` (default 1), capped by ``completions``."""
    parallelism = _count(job_spec.get("parallelism"), f"{path}.parallelism", errors)
    if job_spec.get("completions") is None:
        return parallelism
    # Kubernetes never starts more pods than remaining completions.
    return min(parallelism, _count(job_spec.get("completions"), f"{path}.completions", errors))


def _replica_pod_sets(field: str) -> Callable[[Raw, Errors], list[_PodSetSource]]:
    """Kubeflow kinds: ``spec.<field>`` maps replica type -> {replicas, template}."""

    def pod_sets(spec: Raw, errors: Errors) -> list[_PodSetSource]:
        path = f"spec.{field}"
        replica_specs = _required_mapping(spec.get(field), path, errors)
        if replica_specs is None:
            return []
        if not replica_specs:
            errors.append(_error(path, "missing-field", f"{path} names no replica type"))
        sources: list[_PodSetSource] = []
        # Sorted so that the same manifest always gives the same pod-set order.
        for replica_type in sorted(replica_specs, key=str):
            replica_path = f"{path}.{replica_type}"
            replica = _required_mapping(replica_specs[replica_type], replica_path, errors)
            if replica is None:
                continue
            count = _count(replica.get("replicas"), f"{replica_path}.replicas", errors)
            template = replica.get("template")
            sources.append(
                _PodSetSource(
                    str(replica_type), count, template, f"{replica_path}.template", replica_path
                )
            )
        return sources

    return pod_sets


def _ray_pod_sets(spec: Raw, errors: Errors) -> list[_PodSetSource]:
    path = "spec.rayClusterSpec"
    if spec.get("rayClusterSpec") is None:
        message = f"{path} is required: Usher admits only RayJobs that create their own cluster"
        errors.append(_error(path, "missing-field", message))
        return []
    cluster = _required_mapping(spec.get("rayClusterSpec"), path, errors)
    if cluster is None:
        return []
    return [
        *_ray_head(cluster, f"{path}.headGroupSpec", errors),
        *_ray_workers(cluster, f"{path}.workerGroupSpecs", errors),
    ]


def _ray_head(cluster: Raw, path: str, errors: Errors) -> list[_PodSetSource]:
    head = _required_mapping(cluster.get("headGroupSpec"), path, errors)
    if head is None:
        return []
    return [_PodSetSource(HEAD_POD_SET, 1, head.get("template"), f"{path}.template", path)]


def _ray_workers(cluster: Raw, path: str, errors: Errors) -> list[_PodSetSource]:
    sources: list[_PodSetSource] = []
    for index, raw_group in enumerate(
        _optional_list(cluster.get("workerGroupSpecs"), path, errors)
    ):
        group_path = f"{path}[{index}]"
        group = _required_mapping(raw_group, group_path, errors)
        if group is None:
            continue
        name = _required_string(group.get("groupName"), f"{group_path}.groupName", errors)
        replicas = _count(group.get("replicas"), f"{group_path}.replicas", errors)
        # Multi-host groups run numOfHosts pods per replica.
        hosts = _count(group.get("numOfHosts"), f"{group_path}.numOfHosts", errors)
        template, template_path = group.get("template"), f"{group_path}.template"
        name_path = f"{group_path}.groupName"
        sources.append(_PodSetSource(name, replicas * hosts, template, template_path, name_path))
    return sources


def _jobset_pod_sets(spec: Raw, errors: Errors) -> list[_PodSetSource]:
    path = "spec.replicatedJobs"
    if spec.get("replicatedJobs") is None:
        errors.append(_error(path, "missing-field", f"{path} is required"))
    sources: list[_PodSetSource] = []
    for index, raw_job in enumerate(_optional_list(spec.get("replicatedJobs"), path, errors)):
        source = _replicated_job(raw_job, f"{path}[{index}]", errors)
        if source is not None:
            sources.append(source)
    return sources


def _replicated_job(raw: object, path: str, errors: Errors) -> _PodSetSource | None:
    """One replicated Job of a JobSet: ``replicas`` copies of a Job template."""
    job = _required_mapping(raw, path, errors)
    if job is None:
        return None
    name = _required_string(job.get("name"), f"{path}.name", errors)
    replicas = _count(job.get("replicas"), f"{path}.replicas", errors)
    job_template = _required_mapping(job.get("template"), f"{path}.template", errors)
    if job_template is None:
        return None
    spec_path = f"{path}.template.spec"
    job_spec = _required_mapping(job_template.get("spec"), spec_path, errors)
    if job_spec is None:
        return None
    count = replicas * _job_pod_count(job_spec, spec_path, errors)
    template = job_spec.get("template")
    return _PodSetSource(name, count, template, f"{spec_path}.template", f"{path}.name")


# --- per-pod requests -------------------------------------------------------------------------


def _pod_spec(template: object, path: str, errors: Errors) -> Raw | None:
    """The ``spec`` of a pod template, or ``None`` (reported) when it is missing or malformed."""
    if template is None:
        errors.append(_error(path, "missing-field", f"{path} (the pod template) is required"))
        return None
    if not isinstance(template, Mapping):
        errors.append(
            _error(path, "invalid-type", f"{path} must be a mapping, got {_kind(template)}")
        )
        return None
    return _required_mapping(template.get("spec"), f"{path}.spec", errors)


def _pod_requests(pod_spec: Raw, path: str, errors: Errors) -> Resources:
    """What one pod needs: containers (and sidecars) summed, max with init steps, plus overhead."""
    containers = _containers(
        pod_spec.get("containers"), f"{path}.containers", errors, required=True
    )
    running: Resources = {}
    for index, container in enumerate(containers):
        running = _add(
            running, _container_requests(container, f"{path}.containers[{index}]", errors)
        )
    init_path = f"{path}.initContainers"
    peak_init: Resources = {}
    sidecars: Resources = {}
    for index, container in enumerate(
        _containers(pod_spec.get("initContainers"), init_path, errors)
    ):
        requests = _container_requests(container, f"{init_path}[{index}]", errors)
        if container.get("restartPolicy") == "Always":
            # A sidecar keeps running next to the app containers and later init containers.
            sidecars = _add(sidecars, requests)
        else:
            peak_init = _max(peak_init, _add(requests, sidecars))
    overhead, overhead_errors = collect_resources(pod_spec.get("overhead"), f"{path}.overhead")
    errors.extend(overhead_errors)
    total = _add(_max(_add(running, sidecars), peak_init), overhead)
    return {resource: amount for resource, amount in sorted(total.items()) if amount > 0}


def _containers(raw: object, path: str, errors: Errors, *, required: bool = False) -> list[Raw]:
    items = _optional_list(raw, path, errors)
    if required and (raw is None or raw == []):
        errors.append(_error(path, "missing-field", f"{path} needs at least one container"))
    containers: list[Raw] = []
    for index, item in enumerate(items):
        container = _required_mapping(item, f"{path}[{index}]", errors)
        # A malformed entry still holds its index so later paths stay right.
        containers.append(container if container is not None else {})
    return containers


def _container_requests(container: Raw, path: str, errors: Errors) -> Resources:
    """Requests, with the limit standing in for any resource that has no request."""
    resources = _optional_mapping(container.get("resources"), f"{path}.resources", errors)
    requests, request_errors = collect_resources(
        resources.get("requests"), f"{path}.resources.requests"
    )
    limits, limit_errors = collect_resources(resources.get("limits"), f"{path}.resources.limits")
    errors.extend(request_errors + limit_errors)
    return {**limits, **requests}


def _add(left: Resources, right: Resources) -> Resources:
    return {r: left.get(r, 0) + right.get(r, 0) for r in {*left, *right}}


def _max(left: Resources, right: Resources) -> Resources:
    return {r: max(left.get(r, 0), right.get(r, 0)) for r in {*left, *right}}


# --- field readers: each reports what is wrong and returns a harmless stand-in ----------------


def _count(raw: object, path: str, errors: Errors) -> int:
    """A replica/parallelism count: a non-negative integer, 1 when absent."""
    if raw is None:
        return 1
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        errors.append(_error(path, "invalid-count", f"must be a non-negative integer, got {raw!r}"))
        return 0
    return raw


def _required_mapping(raw: object, path: str, errors: Errors) -> Raw | None:
    """The mapping at ``path``, or ``None`` when it is missing or not a mapping (reported)."""
    if raw is None:
        errors.append(_error(path, "missing-field", f"{path} is required"))
        return None
    if not isinstance(raw, Mapping):
        errors.append(_error(path, "invalid-type", f"{path} must be a mapping, got {_kind(raw)}"))
        return None
    return raw


def _optional_mapping(raw: object, path: str, errors: Errors) -> Raw:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        errors.append(_error(path, "invalid-type", f"{path} must be a mapping, got {_kind(raw)}"))
        return {}
    return raw


def _optional_list(raw: object, path: str, errors: Errors) -> list[object]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        errors.append(_error(path, "invalid-type", f"{path} must be a list, got {_kind(raw)}"))
        return []
    return raw


def _required_string(raw: object, path: str, errors: Errors) -> str:
    if raw is None or raw == "":
        errors.append(_error(path, "missing-field", f"{path} is required"))
        return ""
    return _optional_string(raw, path, errors) or ""


def _optional_string(raw: object, path: str, errors: Errors) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        errors.append(_error(path, "invalid-type", f"{path} must be a string, got {raw!r}"))
        return None
    return raw


def _dig(mapping: Raw, path: tuple[str, ...], errors: Errors) -> object:
    """The value at ``spec.<path>``; ``None`` if a step is absent, reported if it is no mapping."""
    current: object = mapping
    for depth, key in enumerate(path):
        if current is None:
            return None
        if not isinstance(current, Mapping):
            step = ".".join(("spec", *path[:depth]))
            error = _error(step, "invalid-type", f"{step} must be a mapping, got {_kind(current)}")
            # Suspend and priority class both live under runPolicy: report a bad one once.
            if error not in errors:
                errors.append(error)
            return None
        current = current.get(key)
    return current


def _error(path: str, code: str, message: str) -> FieldError:
    return FieldError(path=path, code=code, message=message)


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


_JOB = _KindRule(_job_pod_sets, ("suspend",))
_KUBEFLOW_SUSPEND = ("runPolicy", "suspend")
_KUBEFLOW_PRIORITY_CLASS = ("runPolicy", "schedulingPolicy", "priorityClass")
_RAY = _KindRule(_ray_pod_sets, ("suspend",))
_MPI = _KindRule(_replica_pod_sets("mpiReplicaSpecs"), _KUBEFLOW_SUSPEND, _KUBEFLOW_PRIORITY_CLASS)

_KIND_RULES: dict[str, _KindRule] = {
    "batch/v1/Job": _JOB,
    "kubeflow.org/v1/TFJob": _KindRule(
        _replica_pod_sets("tfReplicaSpecs"), _KUBEFLOW_SUSPEND, _KUBEFLOW_PRIORITY_CLASS
    ),
    "kubeflow.org/v1/PyTorchJob": _KindRule(
        _replica_pod_sets("pytorchReplicaSpecs"), _KUBEFLOW_SUSPEND, _KUBEFLOW_PRIORITY_CLASS
    ),
    "kubeflow.org/v1/MPIJob": _MPI,
    "kubeflow.org/v2beta1/MPIJob": _MPI,
    "ray.io/v1/RayJob": _RAY,
    "ray.io/v1alpha1/RayJob": _RAY,
    "jobset.x-k8s.io/v1alpha2/JobSet": _KindRule(_jobset_pod_sets, ("suspend",)),
}

SUPPORTED_KINDS: tuple[str, ...] = tuple(_KIND_RULES)
"""Every ``apiVersion/kind`` Usher admits, e.g. ``batch/v1/Job``."""
