"""Retries of failed jobs and OOM scale-up (docs/admission-rules.md R12, R13).

What it does: ``retry_policy`` reads a node's retry limit and OOM memory factor from its
attributes, inheriting what it does not set; ``failure_of`` records a failed attempt of a job
with retries as it finishes (everything the decision needs, so that a deletion meanwhile
changes nothing); ``retried`` decides what follows it -- the next attempt's name, its cause
(``OOMKilled`` or ``Failed``) and the containers whose memory grows, or no attempt with the
reason (limit or cap reached); ``grown_memory`` is that arithmetic. ``container_memory`` and
``retry_manifest`` read and write a job manifest's containers: the watcher and the simulator
create the next attempt with them, the one way.
What it must never do: read a clock, do I/O, mutate a manifest it was given, or word a reason
(``reasons`` does).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import msgspec

from schemas import (
    ContainerTermination,
    MemoryResize,
    QueueName,
    QuotaPath,
    Retried,
    RetryAsk,
    RetryCause,
    WorkloadKey,
    Zone,
    cluster_of,
    object_name,
    workload_key,
)
from usher.core.kinds import KindFamily, family_of_kind_id
from usher.core.kinds.fields import Errors
from usher.core.model import reasons
from usher.core.model.errors import InputError
from usher.core.model.quantity import parse_quantity
from usher.core.values.registry import OOM_MEMORY_FACTOR, RETRY_LIMIT

MEMORY = "memory"
OOM_KILLED = "OOMKilled"
MEMORY_STEP = 2**20
"""A grown memory amount is rounded up to whole Mi: quantities people read."""
DEFAULT_MEMORY_FACTOR = "1.5"
RETRY_OF_ANNOTATION = "usher.io/retry-of"
"""On an attempt Usher created: the job's first attempt (``namespace/name``). Only a
``Retried`` naming the job links it (R12); the annotation is for people and tools."""
ATTEMPT_ANNOTATION = "usher.io/attempt"
"""On an attempt Usher created: its number (2 = the first retry)."""
GENERATED_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")
"""Metadata the API server fills in: a new object must not carry the failed one's."""
JOB_CONTROLLER_LABELS = (
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
)
"""Labels the batch Job controller writes into a Job's pod template and selector: a copy must
let it write its own (a generated selector of another Job is refused)."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A node's retry policy (R12, R13): off (``limit == 0``) unless a node sets it."""

    limit: int = 0
    """Attempts after the first a failed job may have; 0 = none (jobs may still opt in)."""
    memory_factor: str = DEFAULT_MEMORY_FACTOR
    """An exact decimal >= 1, as written."""


def retry_policy(attributes: Mapping[str, str], inherited: RetryPolicy) -> RetryPolicy:
    """A node's retry policy: its own attributes where set and valid, else inherited (T1
    refuses invalid values; this only skips them, like ``readiness_policy``)."""
    changes: dict[str, Any] = {}
    limit = RETRY_LIMIT.read(attributes)
    if limit is not None:
        changes["limit"] = limit
    if OOM_MEMORY_FACTOR.read(attributes) is not None:
        changes["memory_factor"] = attributes[OOM_MEMORY_FACTOR.key]  # exact, as written
    return replace(inherited, **changes) if changes else inherited


def effective_limit(tree_limit: int, ask: RetryAsk | None) -> int:
    """The job's retry limit (R12): its annotation, bounded by the tree's when the tree sets
    one (> 0); else the tree's."""
    if ask is None or ask.limit is None:
        return tree_limit
    return min(ask.limit, tree_limit) if tree_limit > 0 else ask.limit


class RetryLink(msgspec.Struct, frozen=True, array_like=True):
    """An attempt a ``Retried`` named: its job's first attempt and its creation (its place)."""

    first: WorkloadKey
    first_created_ms: int
    attempt: int
    """This attempt's number (2 = the first retry)."""


class Failure(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """A failed attempt of a job with retries, awaiting its ``Retried`` (R12)."""

    zone: Zone
    queue: QueueName
    quota: QuotaPath
    first: WorkloadKey
    attempt: int
    limit: int
    memory_factor: str
    memory_cap: int | None
    terminations: list[ContainerTermination]
    first_created_ms: int = 0
    """The first attempt's creation: the place the next attempt keeps."""


def failure_of(
    link: RetryLink | None,
    key: WorkloadKey,
    created_ms: int,
    where: tuple[Zone, QueueName, QuotaPath],
    policy: RetryPolicy,
    ask: RetryAsk | None,
    terminations: list[ContainerTermination],
) -> Failure | None:
    """The failed attempt ``key`` (created at ``created_ms``, or linked to its first attempt
    by ``link``) as its ``Retried`` will need it; None when its job has no retries (limit 0:
    nothing is said, as before R12)."""
    limit = effective_limit(policy.limit, ask)
    if limit <= 0:
        return None
    zone, queue, quota = where
    return Failure(
        zone=zone,
        queue=queue,
        quota=quota,
        first=link.first if link is not None else key,
        attempt=link.attempt if link is not None else 1,
        limit=limit,
        memory_factor=ask.memory_factor
        if ask is not None and ask.memory_factor is not None
        else policy.memory_factor,
        memory_cap=ask.memory_cap if ask is not None else None,
        terminations=list(terminations),
        first_created_ms=link.first_created_ms if link is not None else created_ms,
    )


def next_attempt_key(first: WorkloadKey, attempt: int) -> WorkloadKey:
    """The job the ``attempt``-th failure is retried as: ``<first name>-retry-<attempt>``, in
    its first attempt's cluster (M1)."""
    namespace, name = object_name(first)
    return workload_key(namespace, f"{name}-retry-{attempt}", cluster_of(first))


def grown_memory(amount: int, factor: Fraction, cap: int | None) -> int:
    """``amount`` x ``factor`` rounded up to whole Mi, at most ``cap`` (and never less)."""
    grown = math.ceil(amount * factor / MEMORY_STEP) * MEMORY_STEP
    if cap is not None:
        grown = min(grown, cap)
    return max(grown, amount)


def _oom_containers(terminations: list[ContainerTermination]) -> list[ContainerTermination]:
    """The OOMKilled containers, once each, in the order reported."""
    seen: dict[tuple[str, str], ContainerTermination] = {}
    for item in terminations:
        if item.reason == OOM_KILLED:
            seen.setdefault((item.pod_set, item.container), item)
    return list(seen.values())


def _resize(item: ContainerTermination, factor: Fraction, cap: int | None) -> MemoryResize:
    request, limit = item.memory_request, item.memory_limit
    return MemoryResize(
        pod_set=item.pod_set,
        container=item.container,
        request=request,
        new_request=None if request is None else grown_memory(request, factor, cap),
        limit=limit,
        new_limit=None if limit is None else grown_memory(limit, factor, cap),
    )


def _at_cap(item: ContainerTermination, cap: int | None) -> bool:
    """Whether an OOMKilled container already had the most memory its cap allows (R13)."""
    size = item.memory_request if item.memory_request is not None else item.memory_limit
    return cap is not None and size is not None and size >= cap


def retried(workload: WorkloadKey, failure: Failure) -> Retried:
    """What follows the failed attempt ``workload`` (R12, R13), worded with the numbers."""
    oom = _oom_containers(failure.terminations)
    cause: RetryCause = "OOMKilled" if oom else "Failed"
    factor = Fraction(failure.memory_factor)
    resized = [_resize(item, factor, failure.memory_cap) for item in oom]
    capped = [item for item in oom if _at_cap(item, failure.memory_cap)]
    job: WorkloadKey | None = None
    if failure.attempt > failure.limit:
        reason = reasons.retry_limit_reached(failure.attempt, failure.limit, failure.terminations)
        resized = []
    elif capped:
        assert failure.memory_cap is not None
        reason = reasons.memory_cap_reached(capped[0], failure.memory_cap, failure.attempt)
        resized = []
    else:
        job = next_attempt_key(failure.first, failure.attempt)
        reason = reasons.retrying(
            cause, failure.attempt, failure.limit, failure.terminations, resized, factor
        )
    return Retried(
        workload=workload,
        queue=failure.queue,
        quota=failure.quota,
        zone=failure.zone,
        first=failure.first,
        attempt=failure.attempt,
        limit=failure.limit,
        job=job,
        cause=cause,
        resized=resized,
        reason=reason,
    )


# ---------------------------------------------------------------------------- manifests


def _family(manifest: Mapping[str, Any], rule: KindFamily | None) -> KindFamily | None:
    """``rule`` when the caller knows it (objects listed by the API carry no kind), else the
    manifest's own ``apiVersion``/``kind``."""
    if rule is not None:
        return rule
    return family_of_kind_id(f"{manifest.get('apiVersion')}/{manifest.get('kind')}")


def _containers(
    manifest: object, rule: KindFamily | None = None
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(pod set, container name, container)`` of every container (init ones too) of every
    pod template of a supported manifest; what is malformed is skipped."""
    if not isinstance(manifest, Mapping):
        return
    rule = _family(manifest, rule)
    spec = manifest.get("spec")
    if rule is None or not isinstance(spec, Mapping):
        return
    scratch: Errors = []
    for source in rule.pod_sets(dict(spec), scratch):
        template = source.template
        pod_spec = template.get("spec") if isinstance(template, Mapping) else None
        if not isinstance(pod_spec, Mapping):
            continue
        for field in ("initContainers", "containers"):
            listed = pod_spec.get(field)
            for container in listed if isinstance(listed, list) else []:
                if isinstance(container, dict) and isinstance(container.get("name"), str):
                    yield source.name, container["name"], container


def _memory(container: Mapping[str, Any], field: str) -> int | None:
    resources = container.get("resources")
    declared = resources.get(field) if isinstance(resources, Mapping) else None
    raw = declared.get(MEMORY) if isinstance(declared, Mapping) else None
    if raw is None:
        return None
    try:
        return parse_quantity(raw, MEMORY, f"resources.{field}.{MEMORY}")
    except InputError:
        return None


def container_memory(
    manifest: object, rule: KindFamily | None = None
) -> dict[tuple[str, str], tuple[int | None, int | None]]:
    """``(pod set, container)`` -> its memory request and limit in bytes (None where unset)."""
    return {
        (pod_set, name): (_memory(container, "requests"), _memory(container, "limits"))
        for pod_set, name, container in _containers(manifest, rule)
    }


def retry_manifest(
    manifest: Mapping[str, Any], decision: Retried, rule: KindFamily | None = None
) -> dict[str, Any]:
    """The next attempt's manifest (R12): a copy of the failed one's, named ``decision.job``,
    suspended, linked to its first attempt by annotations, with the memory of each container
    ``decision.resized`` names set to its new request and limit (R13)."""
    assert decision.job is not None
    copied: dict[str, Any] = copy.deepcopy(dict(manifest))
    copied.pop("status", None)
    metadata = dict(copied.get("metadata") or {})
    for generated in GENERATED_METADATA:
        metadata.pop(generated, None)
    metadata["name"] = object_name(decision.job)[1]
    annotations = dict(metadata.get("annotations") or {})
    annotations[RETRY_OF_ANNOTATION] = decision.first
    annotations[ATTEMPT_ANNOTATION] = str(decision.attempt + 1)
    metadata["annotations"] = annotations
    copied["metadata"] = metadata
    spec = copied.get("spec")
    rule = _family(copied, rule)
    if isinstance(spec, dict):
        _unbind_generated_selector(spec)
        if rule is not None:
            _set_path(spec, rule.suspend_path, True)
    sizes = {(r.pod_set, r.container): r for r in decision.resized}
    for pod_set, name, container in _containers(copied, rule):
        resize = sizes.get((pod_set, name))
        if resize is not None:
            _set_memory(container, "requests", resize.new_request)
            _set_memory(container, "limits", resize.new_limit)
    return copied


def _unbind_generated_selector(spec: dict[str, Any]) -> None:
    """Drop a selector the batch Job controller generated for the failed Job (and its labels
    on the pod template): the new Job gets its own. A manual selector stays."""
    if spec.get("manualSelector") is True or "selector" not in spec:
        return
    spec.pop("selector", None)
    template = spec.get("template")
    metadata = template.get("metadata") if isinstance(template, dict) else None
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if isinstance(labels, dict):
        for label in JOB_CONTROLLER_LABELS:
            labels.pop(label, None)


def _set_path(spec: dict[str, Any], path: tuple[str, ...], value: object) -> None:
    node = spec
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value


def _set_memory(container: dict[str, Any], field: str, amount: int | None) -> None:
    if amount is None:
        return
    resources = dict(container.get("resources") or {})
    declared = dict(resources.get(field) or {})
    declared[MEMORY] = _mi(amount)
    resources[field] = declared
    container["resources"] = resources


def _mi(amount: int) -> str:
    """Bytes as Kubernetes writes them: whole Mi when exact (grown amounts are), else bytes."""
    return f"{amount // MEMORY_STEP}Mi" if amount % MEMORY_STEP == 0 else str(amount)


__all__ = [
    "ATTEMPT_ANNOTATION",
    "RETRY_OF_ANNOTATION",
    "Failure",
    "RetryLink",
    "RetryPolicy",
    "container_memory",
    "effective_limit",
    "failure_of",
    "grown_memory",
    "next_attempt_key",
    "retried",
    "retry_manifest",
    "retry_policy",
]
