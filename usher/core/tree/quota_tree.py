"""The ElasticQuotaTree: parsing a manifest into a validated ``QuotaNode`` tree, and walking it.

What it does: turns an ``ElasticQuotaTree`` manifest (a dict loaded from YAML) into a typed tree
with canonical integer quantities, checks every rule of T1 (docs/admission-rules.md) and reports ALL
violations at once (each ``FieldError`` names the node and the resource), and offers the walks
the engine needs (node paths, leaves, queue names).

Choices T1 writes down beyond kube-queue's own rules:
- ``min`` may be omitted (empty: a guarantee of nothing); ``max`` may be omitted on a non-root
  node (no limit there), but the root needs both. Every key of ``min`` must still be in ``max``.
- A node name may not contain ``/`` (it separates quota paths); two leaves may not map to the
  same queue name (one queue per leaf).
- Keys of a node other than the known ones are ignored, as the API server would prune them.

What it must never do: accept a tree that breaks a rule, stop at the first error, or do I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from schemas import FieldError, QueueName, QuotaNode, QuotaPath, Resources
from usher.core.model.errors import TreeInvalid, ValueRefused
from usher.core.model.quantity import MAX_CANONICAL, collect_resources, format_quantity
from usher.core.tree.budget_spec import overrun_errors, parse_budgets
from usher.core.tree.zone_burst import attribute_errors as zone_list_errors
from usher.core.tree.zone_quota import (
    children_zone_min_errors,
    parse_zone_max,
    parse_zone_min,
    zone_min_errors,
)
from usher.core.values import names, registry
from usher.core.values.shown import shown

API_VERSION = "scheduling.sigs.k8s.io/v1beta1"
KIND = "ElasticQuotaTree"

WITHIN_QUOTA_ATTRIBUTE: Final = registry.WITHIN_QUOTA.key
MIN_RUNTIME_ATTRIBUTE: Final = registry.MIN_RUNTIME.key
WITHIN_QUOTA_VALUES: Final = registry.WITHIN_QUOTA_VALUES
READY_TIMEOUT_ATTRIBUTE: Final = registry.READY_TIMEOUT.key
"""Seconds an admitted workload of the node's leaves may take to become ready; 0 = off (R10)."""
REQUEUE_BACKOFF_ATTRIBUTE: Final = registry.REQUEUE_BACKOFF.key
"""Wait after a workload's first readiness requeue; doubled after each further one (R10)."""
REQUEUE_BACKOFF_MAX_ATTRIBUTE: Final = registry.REQUEUE_BACKOFF_MAX.key
"""The cap of that wait (R10)."""
REQUEUE_MAX_ATTEMPTS_ATTRIBUTE: Final = registry.REQUEUE_MAX_ATTEMPTS.key
"""Admissions a workload may time out in before it ends ``Inadmissible`` (R10); at least 1."""
RETRY_LIMIT_ATTRIBUTE: Final = registry.RETRY_LIMIT.key
"""Attempts a failed job may have after its first (R12); 0, the default, is off. The same
key as a job annotation opts one job in (bounded by the tree's limit when the tree sets one)."""
OOM_MEMORY_FACTOR_ATTRIBUTE: Final = registry.OOM_MEMORY_FACTOR.key
"""What an OOMKilled container's memory is multiplied by for the next attempt (R13), >= 1."""
HOLD_ATTRIBUTE: Final = registry.HOLD.key
"""``hold`` or ``drain``: the node and everything below it admit nothing new (R14); a drain
also preempts the running work below it once its grace has passed (R15)."""
HOLD_VALUES: Final = registry.HOLD_VALUES
DRAIN_GRACE_ATTRIBUTE: Final = registry.DRAIN_GRACE.key
"""A drain's grace (R15), inherited down the tree; also the default of ``usher drain``."""
HOLD_REASON_ATTRIBUTE: Final = registry.HOLD_REASON.key
"""Free text saying why the tree holds the node (shown in the pending reasons)."""
STARVATION_ATTRIBUTE: Final = registry.STARVATION.key
"""Seconds a workload may wait at the head of its queue while others are admitted past it
before capacity on its path is reserved for it (N1), inherited; 0, the default, is off."""
BACKFILL_ATTRIBUTE: Final = registry.BACKFILL.key
"""``"true"`` on a node (inherited unless a node below says ``"false"``): a workload of its
leaves that declares a maximum runtime may be admitted beside a reservation it ends before (N2)."""
ALLOW_ZERO_REQUESTS_ATTRIBUTE: Final = registry.ALLOW_ZERO_REQUESTS.key
"""``"true"`` on a node (inherited by every node below unless one says ``"false"``): jobs of
its leaves may have containers that request nothing."""

ROOT_FIELD_PATH = "spec.root"
MAX_ATTRIBUTE_KEY: Final = 317
"""Kubernetes' longest annotation key: a 253-character prefix, ``/`` and a 63-character name."""

_NODE_NAME: Final = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
"""A node name: its queue's name is made of it, lower-cased, ``_`` read as ``-``."""


def parse_tree(manifest: object) -> QuotaNode:
    """Parse and validate an ElasticQuotaTree manifest; return its root.

    Raises ``TreeInvalid`` carrying every structural and semantic error found.
    """
    errors: list[FieldError] = []
    root_raw = _root_mapping(manifest, errors)
    if root_raw is None:
        raise TreeInvalid(errors)
    labelled = _parse_node(root_raw, ROOT_FIELD_PATH, None, errors)
    _require_root_limits(root_raw, errors)
    # A field that failed to parse is already reported; rules about it would only echo that.
    checks = _Checks(suppressed=frozenset(error.path for error in errors))
    _check_tree(labelled, checks)
    errors.extend(checks.errors)
    if errors:
        raise TreeInvalid(errors)
    return labelled.node


def validate_tree(root: QuotaNode) -> list[FieldError]:
    """Every violation of the T1 rules in an already typed tree (empty = valid).

    Used for trees that arrive over the wire; paths are labelled like the manifest's
    (``spec.root.children[0](Department-a).min.cpu``).
    """
    checks = _Checks(suppressed=frozenset())
    _check_tree(_label(root, ROOT_FIELD_PATH, None), checks)
    return checks.errors


def iter_nodes(root: QuotaNode) -> Iterator[tuple[QuotaPath, QuotaNode, QuotaPath | None]]:
    """Every node in pre-order as ``(path, node, parent path)``; the root's parent is ``None``.

    Paths are ``/``-joined node names starting at the root name, e.g. ``root/Department-a``.
    """
    stack: list[tuple[QuotaNode, QuotaPath | None]] = [(root, None)]
    while stack:
        node, parent = stack.pop()
        path = _child_path(parent, node.name)
        yield path, node, parent
        # Reversed so that children come out in their written order.
        stack.extend((child, path) for child in reversed(node.children))


def path_nodes(leaf: QuotaPath) -> list[QuotaPath]:
    """Every node path root..``leaf`` of a ``/``-joined path (names never contain ``/``)."""
    parts = leaf.split("/")
    return [QuotaPath("/".join(parts[: i + 1])) for i in range(len(parts))]


def mapped_branch(
    root: QuotaNode, namespace: str, quota_name: str | None = None
) -> list[QuotaNode] | None:
    """The nodes from the root down to the leaf that takes a job of ``namespace`` (or, when the
    job names one, the leaf called ``quota_name``); None when no leaf takes it."""
    chains: dict[QuotaPath, list[QuotaNode]] = {}
    for path, node, parent in iter_nodes(root):
        chain = [*chains[parent], node] if parent is not None else [node]
        chains[path] = chain
        if node.children:
            continue
        if (quota_name is not None and node.name == quota_name) or (
            quota_name is None and namespace in node.namespaces
        ):
            return chain
    return None


def inherited_attribute(branch: list[QuotaNode], key: str) -> str | None:
    """The value of attribute ``key`` set nearest to the leaf of ``branch`` (root first)."""
    for node in reversed(branch):
        if key in node.attributes:
            return node.attributes[key]
    return None


def leaf_paths(root: QuotaNode) -> dict[QuotaPath, QuotaNode]:
    """Leaves (nodes without children) by path, in tree order."""
    return {path: node for path, node, _ in iter_nodes(root) if not node.children}


def queue_name(leaf_path: QuotaPath, first_namespace: str | None) -> QueueName:
    """The queue of a leaf: ``root-<path>-<first namespace>``, lower-cased, ``/``/``_`` -> ``-``.

    The path already starts with the root's name, so ``root/Department-a`` with ``user-a`` gives
    ``root-department-a-user-a``. A leaf without namespaces is named from its path alone.
    """
    parts = [leaf_path, first_namespace] if first_namespace else [leaf_path]
    joined = "-".join(parts)
    return QueueName(joined.replace("/", "-").replace("_", "-").lower())


def leaf_queue_name(leaf_path: QuotaPath, leaf: QuotaNode) -> QueueName:
    """The queue name of ``leaf`` at ``leaf_path`` (first namespace, if any)."""
    return queue_name(leaf_path, leaf.namespaces[0] if leaf.namespaces else None)


# --- structure: manifest -> typed nodes ------------------------------------------------------


@dataclass(frozen=True)
class _Labelled:
    """A typed node with where it was written (field path) and its quota path, for messages."""

    node: QuotaNode
    field_path: str
    quota_path: QuotaPath
    children: list[_Labelled] = field(default_factory=list)


def _root_mapping(manifest: object, errors: list[FieldError]) -> Mapping[str, object] | None:
    """``spec.root`` of the manifest, after checking apiVersion and kind."""
    if not isinstance(manifest, Mapping):
        errors.append(
            _error("", "not-a-mapping", f"expected a manifest mapping, got {_kind(manifest)}")
        )
        return None
    if manifest.get("apiVersion") != API_VERSION:
        message = f"apiVersion must be {API_VERSION}, got {shown(manifest.get('apiVersion'))}"
        errors.append(_error("apiVersion", "invalid-api-version", message))
    if manifest.get("kind") != KIND:
        errors.append(
            _error(
                "kind", "invalid-kind", f"kind must be {KIND}, got {shown(manifest.get('kind'))}"
            )
        )
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        errors.append(_missing_or_wrong("spec", spec, "a mapping"))
        return None
    root = spec.get("root")
    if not isinstance(root, Mapping):
        errors.append(_missing_or_wrong(ROOT_FIELD_PATH, root, "a mapping"))
        return None
    return root


def _parse_node(
    raw: Mapping[str, object],
    field_path: str,
    parent: QuotaPath | None,
    errors: list[FieldError],
) -> _Labelled:
    name = _parse_name(raw.get("name"), f"{field_path}.name", errors)
    quota_path = _child_path(parent, name)
    min_, min_errors = collect_resources(raw.get("min"), f"{field_path}.min")
    max_, max_errors = collect_resources(raw.get("max"), f"{field_path}.max")
    errors.extend(min_errors + max_errors)
    namespaces = _parse_namespaces(raw.get("namespaces"), f"{field_path}.namespaces", errors)
    attributes = _parse_attributes(raw.get("attributes"), f"{field_path}.attributes", errors)
    children = [
        _parse_node(
            child, _child_field_path(field_path, index, child.get("name")), quota_path, errors
        )
        for index, child in _child_mappings(raw.get("children"), field_path, errors)
    ]
    node = QuotaNode(
        name=name,
        min=min_,
        max=max_,
        namespaces=namespaces,
        attributes=attributes,
        children=[child.node for child in children],
    )
    return _Labelled(node=node, field_path=field_path, quota_path=quota_path, children=children)


def _require_root_limits(root: Mapping[str, object], errors: list[FieldError]) -> None:
    """The root is the organisation's whole capacity, so it must state it (min == max)."""
    for key in ("max", "min"):
        if root.get(key) is None:
            message = f"the root must set {key} (root min == max is the cluster's capacity)"
            errors.append(_error(f"{ROOT_FIELD_PATH}.{key}", "missing-field", message))


def _parse_name(raw: object, path: str, errors: list[FieldError]) -> str:
    if raw is None:
        errors.append(_error(path, "missing-field", "every node needs a name"))
        return ""
    if not isinstance(raw, str):
        errors.append(_error(path, "invalid-type", f"name must be a string, got {_kind(raw)}"))
        return ""
    # Emptiness and "/" are semantic rules, checked by _check_names for typed trees too.
    return raw


def _parse_namespaces(raw: object, path: str, errors: list[FieldError]) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        errors.append(_error(path, "invalid-type", f"namespaces must be a list, got {_kind(raw)}"))
        return []
    namespaces: list[str] = []
    for index, namespace in enumerate(raw):
        if isinstance(namespace, str) and namespace:
            namespaces.append(namespace)
        else:
            message = f"a namespace must be a non-empty string, got {shown(namespace)}"
            errors.append(_error(f"{path}[{index}]", "invalid-type", message))
    return namespaces


def _parse_attributes(raw: object, path: str, errors: list[FieldError]) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        errors.append(
            _error(path, "invalid-type", f"attributes must be a mapping, got {_kind(raw)}")
        )
        return {}
    attributes: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or len(key) > MAX_ATTRIBUTE_KEY:
            message = f"an attribute key must be a string of at most {MAX_ATTRIBUTE_KEY} characters"
            errors.append(_error(f"{path}.{shown(key)}", "invalid-key", message))
        elif isinstance(value, str):
            attributes[key] = value
        else:
            # Kubernetes attributes are map[string]string: `"60"`, not `60`.
            message = f"attribute values must be strings (quote them), got {shown(value)}"
            errors.append(_error(f"{path}.{key}", "invalid-type", message))
    return attributes


def _child_mappings(
    raw: object, field_path: str, errors: list[FieldError]
) -> Iterator[tuple[int, Mapping[str, object]]]:
    """The children that are mappings, with their written index; the others are reported."""
    if raw is None:
        return
    if not isinstance(raw, list):
        path = f"{field_path}.children"
        errors.append(_error(path, "invalid-type", f"children must be a list, got {_kind(raw)}"))
        return
    for index, child in enumerate(raw):
        if isinstance(child, Mapping):
            yield index, child
        else:
            path = f"{field_path}.children[{index}]"
            errors.append(
                _error(path, "not-a-mapping", f"a child must be a mapping, got {_kind(child)}")
            )


# --- rules on typed nodes -------------------------------------------------------------------


@dataclass
class _Checks:
    """Collects rule violations, dropping those about a field that already failed to parse."""

    suppressed: frozenset[str]
    errors: list[FieldError] = field(default_factory=list)

    def report(self, path: str, code: str, message: str, *, about: tuple[str, ...] = ()) -> None:
        if any(self._already_reported(subject) for subject in (path, *about)):
            return
        self.errors.append(_error(path, code, message))

    def _already_reported(self, path: str) -> bool:
        """True when ``path`` or a field containing it (``spec.root.min``) failed to parse."""
        parts = path.split(".")
        return any(".".join(parts[:end]) in self.suppressed for end in range(1, len(parts) + 1))


def _label(node: QuotaNode, field_path: str, parent: QuotaPath | None) -> _Labelled:
    quota_path = _child_path(parent, node.name)
    children = [
        _label(child, _child_field_path(field_path, index, child.name), quota_path)
        for index, child in enumerate(node.children)
    ]
    return _Labelled(node=node, field_path=field_path, quota_path=quota_path, children=children)


def _walk(labelled: _Labelled) -> Iterator[_Labelled]:
    yield labelled
    for child in labelled.children:
        yield from _walk(child)


def _check_tree(root: _Labelled, checks: _Checks) -> None:
    nodes = list(_walk(root))
    _check_names(nodes, checks)
    _check_namespaces(nodes, checks)
    _check_queue_names(nodes, checks)
    for labelled in nodes:
        _check_attributes(labelled, checks)
        _check_amounts(labelled, checks)
        _check_min_within_max(labelled, checks)
        _check_children_min(labelled, checks)
        _check_zone_min(labelled, checks)
    _check_root_min_is_max(root, checks)


def _check_names(nodes: list[_Labelled], checks: _Checks) -> None:
    """Names are non-empty, free of ``/`` and unique across the whole tree."""
    first_use: dict[str, str] = {}
    for labelled in nodes:
        name, path = labelled.node.name, f"{labelled.field_path}.name"
        if not name:
            checks.report(path, "invalid-name", "a node name must not be empty")
            continue
        if "/" in name:
            checks.report(path, "invalid-name", f"node name {shown(name)} must not contain '/'")
        elif not _is_node_name(name):
            message = (
                f"node name {shown(name)} must be at most {names.MAX_LABEL} letters, digits, "
                "'-', '_' and '.', starting and ending with a letter or digit (it names a queue)"
            )
            checks.report(path, "invalid-name", message)
        if name in first_use:
            message = f"node name {shown(name)} is already used at {first_use[name]}"
            checks.report(path, "duplicate-name", message)
        else:
            first_use[name] = labelled.field_path


def _is_node_name(name: str) -> bool:
    return len(name) <= names.MAX_LABEL and _NODE_NAME.fullmatch(name) is not None


def _check_namespaces(nodes: list[_Labelled], checks: _Checks) -> None:
    """Namespaces sit on leaves only, and each belongs to at most one leaf."""
    owner: dict[str, QuotaPath] = {}
    for labelled in nodes:
        node, path = labelled.node, f"{labelled.field_path}.namespaces"
        if node.namespaces and node.children:
            message = f"namespaces are only allowed on leaves; {labelled.quota_path} has children"
            checks.report(path, "namespaces-on-inner-node", message)
            continue
        for index, namespace in enumerate(node.namespaces):
            if not names.is_dns_label(namespace):
                message = (
                    f"namespace {shown(namespace)} is not a namespace name ({names.LABEL_RULE})"
                )
                checks.report(f"{path}[{index}]", "invalid-namespace", message)
            elif namespace in owner:
                message = f"namespace {shown(namespace)} already belongs to {owner[namespace]}"
                checks.report(f"{path}[{index}]", "duplicate-namespace", message)
            else:
                owner[namespace] = labelled.quota_path


def _check_queue_names(nodes: list[_Labelled], checks: _Checks) -> None:
    """Two leaves whose names differ only by case or ``_`` would share one queue."""
    leaves: dict[QueueName, QuotaPath] = {}
    for labelled in nodes:
        if labelled.node.children:
            continue
        name = leaf_queue_name(labelled.quota_path, labelled.node)
        if not all(_is_node_name(part) for part in labelled.quota_path.split("/")):
            continue  # its node names are refused by _check_names
        try:
            names.dns_subdomain(name, f"{labelled.field_path}.name", what="a queue name")
        except ValueRefused as refused:
            message = f"the queue of {labelled.quota_path}: {refused.message}"
            checks.report(refused.path, "invalid-queue-name", message)
        if name in leaves:
            message = f"queue name {name} of {labelled.quota_path} is also {leaves[name]}'s"
            checks.report(f"{labelled.field_path}.name", "duplicate-queue-name", message)
        else:
            leaves[name] = labelled.quota_path


def _check_attributes(labelled: _Labelled, checks: _Checks) -> None:
    """Every ``usher.io/`` value through its parser (the registry), then the rules of the
    values written in a language of their own (B1, B2, Z1, Z3, Z4, checked by their modules);
    a value its parser refused is not blamed again by its rule."""
    attributes, path = labelled.node.attributes, f"{labelled.field_path}.attributes"
    refused = registry.attribute_errors(attributes, path)
    for error in refused:
        checks.report(error.path, "invalid-attribute", error.message)
    if refused:
        # A rule module reads a refused value as absent or malformed: only the parser speaks.
        attributes = {k: v for k, v in attributes.items() if f"{path}.{k}" not in _paths(refused)}
    root = labelled.field_path == ROOT_FIELD_PATH
    rules = (
        parse_budgets(attributes, labelled.quota_path, path)[1]  # B1
        + overrun_errors(attributes, path)  # B2
        + parse_zone_max(attributes, path)[1]  # Z1
        + parse_zone_min(attributes, path)[1]  # Z4
        + zone_list_errors(attributes, path, root=root)  # Z3
    )
    for error in rules:
        checks.report(error.path, error.code, error.message)


def _paths(errors: list[FieldError]) -> frozenset[str]:
    return frozenset(error.path for error in errors)


def _check_amounts(labelled: _Labelled, checks: _Checks) -> None:
    """Amounts of a typed tree (one off the wire) are what the quantity parser can give:
    0 to ``MAX_CANONICAL`` canonical units."""
    for key, resources in (("min", labelled.node.min), ("max", labelled.node.max)):
        for resource, amount in resources.items():
            if not 0 <= amount <= MAX_CANONICAL:
                path = f"{labelled.field_path}.{key}.{resource}"
                message = f"{key} {resource} {shown(amount)} is not 0 to {MAX_CANONICAL}"
                checks.report(path, "invalid-quantity", message)


def _check_min_within_max(labelled: _Labelled, checks: _Checks) -> None:
    """Every resource of ``min`` is named by ``max`` and is not above it."""
    node, path = labelled.node, labelled.field_path
    for resource, minimum in node.min.items():
        min_path, max_path = f"{path}.min.{resource}", f"{path}.max.{resource}"
        if resource not in node.max:
            message = f"min names {resource} but max does not"
            checks.report(min_path, "min-key-not-in-max", message, about=(max_path,))
        elif minimum > node.max[resource]:
            message = (
                f"min {format_quantity(resource, minimum)} > "
                f"max {format_quantity(resource, node.max[resource])}"
            )
            checks.report(min_path, "min-exceeds-max", message, about=(max_path,))


def _check_children_min(labelled: _Labelled, checks: _Checks) -> None:
    """The guarantees of the children fit inside their parent's guarantee, per resource."""
    if not labelled.children:
        return
    for resource in _resources_named(child.node.min for child in labelled.children):
        total = sum(child.node.min.get(resource, 0) for child in labelled.children)
        own = labelled.node.min.get(resource, 0)
        if total <= own:
            continue
        min_path = f"{labelled.field_path}.min.{resource}"
        child_paths = tuple(f"{child.field_path}.min.{resource}" for child in labelled.children)
        message = (
            f"sum of children min {resource} {format_quantity(resource, total)} > "
            f"parent {labelled.quota_path} min {format_quantity(resource, own)}"
        )
        checks.report(min_path, "children-min-exceed-parent-min", message, about=child_paths)


def _check_zone_min(labelled: _Labelled, checks: _Checks) -> None:
    """Z4, as ``min`` is checked: a zone guarantee within the node's ``min`` and its cap in
    that zone, and the children's within the parent's where the parent guarantees the zone.
    A value that cannot be read is refused once, by ``_check_attributes``."""
    node, path = labelled.node, labelled.field_path
    attributes = f"{path}.attributes"
    for error in zone_min_errors(node.min, node.attributes, attributes):
        # A min that failed to parse reads as empty: do not blame the zone guarantee for it.
        checks.report(error.path, error.code, error.message, about=(f"{path}.min",))
    children = [child.node.attributes for child in labelled.children]
    quota_path = labelled.quota_path
    for error in children_zone_min_errors(node.attributes, children, attributes, quota_path):
        checks.report(error.path, error.code, error.message)


def _check_root_min_is_max(root: _Labelled, checks: _Checks) -> None:
    """The root's min equals its max: it states the whole organisation's capacity."""
    minimum, maximum, path = root.node.min, root.node.max, root.field_path
    for resource, limit in maximum.items():
        min_path, max_path = f"{path}.min.{resource}", f"{path}.max.{resource}"
        if resource not in minimum:
            shown = format_quantity(resource, limit)
            message = f"root min {resource} is missing; it must equal max {shown}"
            checks.report(min_path, "root-min-not-max", message, about=(max_path,))
        elif minimum[resource] != limit:
            message = (
                f"root min {resource} {format_quantity(resource, minimum[resource])} must equal "
                f"max {format_quantity(resource, limit)}"
            )
            checks.report(min_path, "root-min-not-max", message, about=(max_path,))


# --- small helpers ----------------------------------------------------------------------------


def _resources_named(resource_lists: Iterable[Resources]) -> list[str]:
    """Resource names in first-seen order, so errors come out in a stable order."""
    seen: dict[str, None] = {}
    for resources in resource_lists:
        seen.update(dict.fromkeys(resources))
    return list(seen)


def _child_path(parent: QuotaPath | None, name: str) -> QuotaPath:
    return QuotaPath(name if parent is None else f"{parent}/{name}")


def _child_field_path(parent_field_path: str, index: int, name: object) -> str:
    """``spec.root.children[0](Department-a)``: the index locates it, the name helps a reader."""
    label = f"({name})" if isinstance(name, str) and 0 < len(name) <= names.MAX_LABEL else ""
    return f"{parent_field_path}.children[{index}]{label}"


def _missing_or_wrong(path: str, value: object, expected: str) -> FieldError:
    if value is None:
        return _error(path, "missing-field", f"{path} is required")
    return _error(path, "invalid-type", f"{path} must be {expected}, got {_kind(value)}")


def _error(path: str, code: str, message: str) -> FieldError:
    return FieldError(path=path, code=code, message=message)


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__
