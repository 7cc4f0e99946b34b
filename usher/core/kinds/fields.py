"""Field readers shared by every job kind's module: counts, mappings, strings, pod requests.

What it does: reads one field of a manifest at a time, reporting what is wrong with its field
path into an error list and returning a harmless stand-in, so that every problem of a manifest
is found in one pass; and computes what one pod requests (containers summed, sidecars, init
containers, overhead), as Kubernetes' scheduler counts it.
What it must never do: raise on a malformed manifest, guess a quantity, mutate what it reads,
or do I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypeVar

from schemas import FieldError, Resources
from usher.core.model.errors import ValueRefused
from usher.core.model.quantity import collect_resources
from usher.core.values.registry import Setting

T = TypeVar("T")

Errors = list[FieldError]
Raw = Mapping[str, object]


# --- per-pod requests -------------------------------------------------------------------------


def pod_spec(template: object, path: str, errors: Errors) -> Raw | None:
    """The ``spec`` of a pod template, or ``None`` (reported) when it is missing or malformed."""
    if template is None:
        errors.append(error(path, "missing-field", f"{path} (the pod template) is required"))
        return None
    if not isinstance(template, Mapping):
        errors.append(
            error(path, "invalid-type", f"{path} must be a mapping, got {type_name(template)}")
        )
        return None
    return required_mapping(template.get("spec"), f"{path}.spec", errors)


def pod_requests(pod_spec: Raw, path: str, errors: Errors) -> Resources:
    """What one pod needs: containers (and sidecars) summed, max with init steps, plus overhead."""
    apps = container_list(pod_spec.get("containers"), f"{path}.containers", errors, required=True)
    running: Resources = {}
    for index, container in enumerate(apps):
        running = add_resources(
            running, container_requests(container, f"{path}.containers[{index}]", errors)
        )
    init_path = f"{path}.initContainers"
    peak_init: Resources = {}
    sidecars: Resources = {}
    for index, container in enumerate(
        container_list(pod_spec.get("initContainers"), init_path, errors)
    ):
        requests = container_requests(container, f"{init_path}[{index}]", errors)
        if container.get("restartPolicy") == "Always":
            # A sidecar keeps running next to the app containers and later init containers.
            sidecars = add_resources(sidecars, requests)
        else:
            peak_init = max_resources(peak_init, add_resources(requests, sidecars))
    overhead, overhead_errors = collect_resources(pod_spec.get("overhead"), f"{path}.overhead")
    errors.extend(overhead_errors)
    total = add_resources(max_resources(add_resources(running, sidecars), peak_init), overhead)
    return {resource: amount for resource, amount in sorted(total.items()) if amount > 0}


def container_list(raw: object, path: str, errors: Errors, *, required: bool = False) -> list[Raw]:
    items = optional_list(raw, path, errors)
    if required and (raw is None or raw == []):
        errors.append(error(path, "missing-field", f"{path} needs at least one container"))
    containers: list[Raw] = []
    for index, item in enumerate(items):
        container = required_mapping(item, f"{path}[{index}]", errors)
        # A malformed entry still holds its index so later paths stay right.
        containers.append(container if container is not None else {})
    return containers


def container_requests(container: Raw, path: str, errors: Errors) -> Resources:
    """Requests, with the limit standing in for any resource that has no request."""
    resources = optional_mapping(container.get("resources"), f"{path}.resources", errors)
    requests, request_errors = collect_resources(
        resources.get("requests"), f"{path}.resources.requests"
    )
    limits, limit_errors = collect_resources(resources.get("limits"), f"{path}.resources.limits")
    errors.extend(request_errors + limit_errors)
    return {**limits, **requests}


def add_resources(left: Resources, right: Resources) -> Resources:
    return {r: left.get(r, 0) + right.get(r, 0) for r in {*left, *right}}


def max_resources(left: Resources, right: Resources) -> Resources:
    return {r: max(left.get(r, 0), right.get(r, 0)) for r in {*left, *right}}


# --- field readers: each reports what is wrong and returns a harmless stand-in ----------------


def count(raw: object, path: str, errors: Errors) -> int:
    """A replica/parallelism count: a non-negative integer, 1 when absent."""
    if raw is None:
        return 1
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        errors.append(error(path, "invalid-count", f"must be a non-negative integer, got {raw!r}"))
        return 0
    return raw


def required_mapping(raw: object, path: str, errors: Errors) -> Raw | None:
    """The mapping at ``path``, or ``None`` when it is missing or not a mapping (reported)."""
    if raw is None:
        errors.append(error(path, "missing-field", f"{path} is required"))
        return None
    if not isinstance(raw, Mapping):
        errors.append(
            error(path, "invalid-type", f"{path} must be a mapping, got {type_name(raw)}")
        )
        return None
    return raw


def optional_mapping(raw: object, path: str, errors: Errors) -> Raw:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        errors.append(
            error(path, "invalid-type", f"{path} must be a mapping, got {type_name(raw)}")
        )
        return {}
    return raw


def optional_list(raw: object, path: str, errors: Errors) -> list[object]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        errors.append(error(path, "invalid-type", f"{path} must be a list, got {type_name(raw)}"))
        return []
    return raw


def required_string(raw: object, path: str, errors: Errors) -> str:
    if raw is None or raw == "":
        errors.append(error(path, "missing-field", f"{path} is required"))
        return ""
    return optional_string(raw, path, errors) or ""


def optional_string(raw: object, path: str, errors: Errors) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        errors.append(error(path, "invalid-type", f"{path} must be a string, got {raw!r}"))
        return None
    return raw


def dig(mapping: Raw, path: tuple[str, ...], errors: Errors) -> object:
    """The value at ``spec.<path>``; ``None`` if a step is absent, reported if it is no mapping."""
    current: object = mapping
    for depth, key in enumerate(path):
        if current is None:
            return None
        if not isinstance(current, Mapping):
            step = ".".join(("spec", *path[:depth]))
            message = f"{step} must be a mapping, got {type_name(current)}"
            problem = error(step, "invalid-type", message)
            # Suspend and priority class both live under runPolicy: report a bad one once.
            if problem not in errors:
                errors.append(problem)
            return None
        current = current.get(key)
    return current


def annotations_of(manifest: Raw) -> Raw:
    """A manifest's ``metadata.annotations``; empty when it has none or they are not a
    mapping (reading ``metadata`` itself reports that)."""
    metadata = manifest.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


ANNOTATIONS_PREFIX: Final = "metadata.annotations"


def annotation(setting: Setting[T], manifest: Raw, errors: Errors) -> T | None:
    """The job's value of the ``usher.io/`` annotation ``setting`` (the registry's parser);
    None when absent, or when refused -- reported as ``invalid-annotation`` naming it."""
    annotations = annotations_of(manifest)
    if setting.key not in annotations:
        return None
    try:
        return setting.check(annotations[setting.key], ANNOTATIONS_PREFIX)
    except ValueRefused as refused:
        errors.append(error(refused.path, "invalid-annotation", refused.message))
        return None


def error(path: str, code: str, message: str) -> FieldError:
    return FieldError(path=path, code=code, message=message)


def type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__
