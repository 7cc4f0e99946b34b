"""The generation spec of ``usher sim --generate``: parsed YAML checked into typed settings.

What it does: ``load_spec`` turns a parsed spec (departments, their arrival rates and bursts,
size, runtime and priority distributions, the cluster, a horizon) into a ``GenSpec``, or
raises ``ScenarioError`` naming every bad field (a negative rate, an unknown distribution, a
quantity that does not parse, a tree the departments cannot make...); ``Distribution`` says
what each distribution takes; ``tree_manifest`` is the tree the departments make (or the
given one) and ``cluster_total`` the cluster's capacity as quantities.
What it must never do: open files (the CLI loads the spec and a ``tree:`` file), draw random
numbers (``usher.simgen.generate`` does) or decide anything about admission.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from schemas import FieldError, QuotaNode
from usher.core.model.errors import InputError, ScenarioError, TreeInvalid
from usher.core.model.quantity import format_quantity, parse_resources
from usher.core.tree.quota_tree import parse_tree

SPEC_KEYS = (
    "name",
    "seed",
    "horizon",
    "config",
    "cluster",
    "tree",
    "priorityClasses",
    "departments",
)
CLUSTER_KEYS = ("nodes", "allocatable")
DEPARTMENT_KEYS = (
    "name",
    "namespace",
    "min",
    "max",
    "arrivals",
    "pods",
    "cpu",
    "memory",
    "gpu",
    "runtime",
    "priority",
)
ARRIVAL_KEYS = ("rate", "bursts")
BURST_KEYS = ("every", "jobs")
GPU = "nvidia.com/gpu"
ROOT = "root"
CHILD = re.compile(r"^spec\.root\.children\[(\d+)\]\.?(?:\([^)]*\)\.?)?")
"""A generated tree's error about a department's node, renamed to the spec's path."""


class Shape(StrEnum):
    """The distributions a size or runtime may follow."""

    FIXED = "fixed"
    UNIFORM = "uniform"
    EXPONENTIAL = "exponential"
    LOGNORMAL = "lognormal"
    CHOICE = "choice"


PARAMETERS: dict[Shape, tuple[str, ...]] = {
    Shape.FIXED: ("value",),
    Shape.UNIFORM: ("min", "max"),
    Shape.EXPONENTIAL: ("mean",),
    Shape.LOGNORMAL: ("mean", "sigma"),
    Shape.CHOICE: ("values", "weights"),
}
"""What each distribution takes (``weights`` of a choice is optional: equal by default)."""


@dataclass(frozen=True)
class Distribution:
    """A validated distribution; every number >= 0 (``lognormal``'s ``mean`` is the mean)."""

    shape: Shape
    value: float = 0.0
    low: float = 0.0
    high: float = 0.0
    mean: float = 0.0
    sigma: float = 0.0
    values: tuple[float, ...] = ()
    weights: tuple[float, ...] = ()


@dataclass(frozen=True)
class Bursts:
    """``jobs`` arrive at once every ``every_s`` seconds (the first at ``every_s``)."""

    every_s: float
    jobs: int


@dataclass(frozen=True)
class Department:
    """One department: its quota (or its node of a given tree) and its workload."""

    name: str
    namespace: str
    path: str
    """Its quota node's path (``root/<name>`` when the spec makes the tree)."""
    minimum: Mapping[str, object]
    maximum: Mapping[str, object] | None
    rate: float
    """Poisson arrivals per second."""
    bursts: Bursts | None
    pods: Distribution
    cpu: Distribution
    """Cores per pod."""
    memory: Distribution
    """GiB per pod."""
    gpu: Distribution
    """GPUs per pod (whole)."""
    runtime: Distribution
    """Seconds a run takes once admitted."""
    priority: dict[str, float] = field(default_factory=dict)
    """Priority class -> weight; empty: no class (priority 0)."""


@dataclass(frozen=True)
class GenSpec:
    """A validated spec."""

    name: str
    seed: int
    horizon_s: float
    config: Mapping[str, object]
    nodes: int
    allocatable: Mapping[str, object]
    tree: QuotaNode | None
    """A given tree (``tree:``); None: the spec makes one from its departments."""
    tree_manifest: Mapping[str, object] | None
    priority_classes: dict[str, int]
    departments: list[Department]


DEFAULTS: dict[str, object] = {
    "pods": {"dist": "fixed", "value": 1},
    "cpu": {"dist": "fixed", "value": 1},
    "memory": {"dist": "fixed", "value": 1},
    "gpu": {"dist": "fixed", "value": 0},
    "runtime": {"dist": "exponential", "mean": 600},
}
"""What a department that leaves a distribution out gets: 1-pod, 1-core, 1 GiB jobs of
about ten minutes."""


class _Errors:
    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def add(self, path: str, code: str, message: str) -> None:
        self.items.append(FieldError(path=path, code=code, message=message))

    def absorb(self, failure: InputError, prefix: str = "") -> None:
        for error in failure.errors:
            path = f"{prefix}.{error.path}" if prefix and error.path else prefix or error.path
            self.items.append(FieldError(path=path, code=error.code, message=error.message))


def load_spec(data: object, source: str, tree_manifest: object | None = None) -> GenSpec:
    """Validate a parsed spec (and the manifest its ``tree:`` names, loaded by the caller);
    raise ``ScenarioError`` naming every bad field."""
    errors = _Errors()
    if not isinstance(data, Mapping):
        errors.add("", "not-a-mapping", f"{source}: a generation spec must be a mapping")
        raise ScenarioError(errors.items)
    _unknown(data, "", SPEC_KEYS, errors)
    name = data.get("name", source)
    if not isinstance(name, str) or not name:
        errors.add("name", "invalid-name", "name must be a non-empty string")
        name = source
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        errors.add("seed", "invalid-seed", "seed must be a whole number")
        seed = 0
    horizon = _number(data.get("horizon"), "horizon", errors, positive=True)
    config = data.get("config", {})
    if not isinstance(config, Mapping):
        errors.add("config", "not-a-mapping", "config is a scenario's config mapping")
        config = {}
    nodes, allocatable = _cluster(data.get("cluster"), errors)
    tree = _tree(tree_manifest, errors) if "tree" in data else None
    classes = _priority_classes(data.get("priorityClasses"), errors)
    departments = _departments(data.get("departments"), tree, classes, errors)
    if errors.items:
        raise ScenarioError(errors.items)
    spec = GenSpec(
        name=name,
        seed=seed,
        horizon_s=horizon or 0.0,
        config=config,
        nodes=nodes,
        allocatable=allocatable,
        tree=tree,
        tree_manifest=tree_manifest if isinstance(tree_manifest, Mapping) else None,
        priority_classes=classes,
        departments=departments,
    )
    if tree is None:
        _check_made_tree(spec)
    return spec


def _check_made_tree(spec: GenSpec) -> None:
    """The tree the departments make must be valid (a rejected one would leave every job
    unmapped); its errors are named by the department's path in the spec."""
    try:
        parse_tree(tree_manifest(spec))
    except TreeInvalid as failure:
        raise ScenarioError(
            [
                FieldError(
                    path=CHILD.sub(lambda m: f"departments[{m.group(1)}].", e.path).rstrip(".")
                    if CHILD.match(e.path)
                    else f"departments ({e.path})",
                    code=e.code,
                    message=e.message,
                )
                for e in failure.errors
            ]
        ) from None


def _unknown(
    raw: Mapping[object, object], path: str, known: tuple[str, ...], errors: _Errors
) -> None:
    for key in sorted(str(k) for k in raw):
        if key not in known:
            where = f"{path}.{key}" if path else key
            errors.add(where, "unknown-key", f"unknown key {key!r}; expected one of {known}")


def _number(raw: object, path: str, errors: _Errors, *, positive: bool = False) -> float | None:
    """A YAML number >= 0 (> 0 when ``positive``); None (reported) otherwise."""
    if raw is None:
        errors.add(path, "missing", f"{path} is required")
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        errors.add(path, "invalid-number", f"expected a number, got {raw!r}")
        return None
    if raw < 0 or (positive and raw == 0) or raw != raw or raw in (float("inf"), float("-inf")):
        bound = "> 0" if positive else ">= 0"
        errors.add(path, "out-of-range", f"must be a finite number {bound}, got {raw!r}")
        return None
    return float(raw)


def _cluster(raw: object, errors: _Errors) -> tuple[int, Mapping[str, object]]:
    if not isinstance(raw, Mapping):
        errors.add("cluster", "not-a-mapping", "cluster is {nodes, allocatable}")
        return 0, {}
    _unknown(raw, "cluster", CLUSTER_KEYS, errors)
    nodes = raw.get("nodes", 1)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        errors.add("cluster.nodes", "out-of-range", "nodes must be a whole number >= 1")
        nodes = 0
    allocatable = raw.get("allocatable")
    try:
        parsed = parse_resources(allocatable, "cluster.allocatable")
    except InputError as failure:
        errors.absorb(failure)
        return nodes, {}
    if not parsed:
        errors.add("cluster.allocatable", "missing", "allocatable names each node's resources")
    return nodes, allocatable if isinstance(allocatable, Mapping) else {}


def _tree(manifest: object, errors: _Errors) -> QuotaNode | None:
    try:
        return parse_tree(manifest)
    except TreeInvalid as failure:
        errors.absorb(failure, "tree")
        return None


def _priority_classes(raw: object, errors: _Errors) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        errors.add("priorityClasses", "not-a-mapping", "priorityClasses is {name: value}")
        return {}
    classes: dict[str, int] = {}
    for name, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int):
            errors.add(f"priorityClasses.{name}", "invalid-value", "a priority is a whole number")
        else:
            classes[str(name)] = value
    return classes


def _departments(
    raw: object, tree: QuotaNode | None, classes: dict[str, int], errors: _Errors
) -> list[Department]:
    if not isinstance(raw, list) or not raw:
        errors.add("departments", "not-a-list", "departments is a non-empty list")
        return []
    out: list[Department] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        path = f"departments[{index}]"
        department = _department(item, path, tree, classes, errors)
        if department is None:
            continue
        if department.name in seen:
            errors.add(f"{path}.name", "duplicate", f"department {department.name!r} twice")
        seen.add(department.name)
        out.append(department)
    return out


def _department(
    raw: object, path: str, tree: QuotaNode | None, classes: dict[str, int], errors: _Errors
) -> Department | None:
    if not isinstance(raw, Mapping):
        errors.add(path, "not-a-mapping", f"a department takes {DEPARTMENT_KEYS}")
        return None
    _unknown(raw, path, DEPARTMENT_KEYS, errors)
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        errors.add(f"{path}.name", "missing-name", "a department needs a name")
        return None
    placed = _placement(raw, path, name, tree, errors)
    if placed is None:
        return None
    node_path, namespace = placed
    rate, bursts = _arrivals(raw.get("arrivals"), f"{path}.arrivals", errors)
    sizes = {
        key: _distribution(raw.get(key, DEFAULTS[key]), f"{path}.{key}", errors)
        for key in ("pods", "cpu", "memory", "gpu", "runtime")
    }
    priority = _priority(raw.get("priority"), f"{path}.priority", classes, errors)
    if rate is None or any(d is None for d in sizes.values()) or priority is None:
        return None
    return Department(
        name=name,
        namespace=namespace,
        path=node_path,
        minimum=_quantities(raw.get("min"), f"{path}.min", errors),
        maximum=_quantities(raw["max"], f"{path}.max", errors) if "max" in raw else None,
        rate=rate,
        bursts=bursts,
        pods=_checked(sizes["pods"]),
        cpu=_checked(sizes["cpu"]),
        memory=_checked(sizes["memory"]),
        gpu=_checked(sizes["gpu"]),
        runtime=_checked(sizes["runtime"]),
        priority=priority,
    )


def _checked(distribution: Distribution | None) -> Distribution:
    assert distribution is not None
    return distribution


def _placement(
    raw: Mapping[object, object], path: str, name: str, tree: QuotaNode | None, errors: _Errors
) -> tuple[str, str] | None:
    """The department's quota node path and the namespace its jobs are created in."""
    namespace = raw.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not namespace):
        errors.add(f"{path}.namespace", "invalid-namespace", "namespace must be a string")
        return None
    if tree is None:
        return f"root/{name}", namespace or name.lower()
    for key in ("min", "max"):
        if key in raw:
            errors.add(f"{path}.{key}", "unexpected", f"{key} comes from the tree: file")
    node = next((c for c in tree.children if c.name == name), None)
    if node is None:
        names = [c.name for c in tree.children]
        errors.add(
            f"{path}.name", "unknown-node", f"the tree's root has no child {name!r}: {names}"
        )
        return None
    taken = _namespaces(node)
    if namespace is None and not taken:
        errors.add(f"{path}.namespace", "missing", f"node {name!r} takes no namespace")
        return None
    if namespace is not None and namespace not in taken:
        errors.add(f"{path}.namespace", "unmapped", f"node {name!r} takes {taken}")
        return None
    return f"{tree.name}/{name}", namespace or taken[0]


def _namespaces(node: QuotaNode) -> list[str]:
    """Every namespace a node's subtree takes, depth first."""
    return [*node.namespaces, *(ns for child in node.children for ns in _namespaces(child))]


def _quantities(raw: object, path: str, errors: _Errors) -> Mapping[str, object]:
    try:
        parse_resources(raw, path)
    except InputError as failure:
        errors.absorb(failure)
        return {}
    return raw if isinstance(raw, Mapping) else {}


def _arrivals(raw: object, path: str, errors: _Errors) -> tuple[float | None, Bursts | None]:
    if not isinstance(raw, Mapping):
        errors.add(path, "not-a-mapping", "arrivals is {rate, bursts}")
        return None, None
    _unknown(raw, path, ARRIVAL_KEYS, errors)
    rate = _number(raw.get("rate", 0), f"{path}.rate", errors)
    bursts = raw.get("bursts")
    if bursts is None:
        return rate, None
    if not isinstance(bursts, Mapping):
        errors.add(f"{path}.bursts", "not-a-mapping", "bursts is {every, jobs}")
        return rate, None
    _unknown(bursts, f"{path}.bursts", BURST_KEYS, errors)
    every = _number(bursts.get("every"), f"{path}.bursts.every", errors, positive=True)
    jobs = bursts.get("jobs")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        errors.add(f"{path}.bursts.jobs", "out-of-range", "jobs must be a whole number >= 1")
        return rate, None
    return rate, Bursts(every_s=every, jobs=jobs) if every is not None else None


def _distribution(raw: object, path: str, errors: _Errors) -> Distribution | None:
    """``{dist: <shape>, ...its parameters}``; a bare number means ``fixed``."""
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        raw = {"dist": "fixed", "value": raw}
    if not isinstance(raw, Mapping):
        errors.add(path, "not-a-mapping", "a distribution is {dist, ...} or a number")
        return None
    shapes = tuple(s.value for s in Shape)
    shape_name = raw.get("dist")
    if shape_name not in shapes:
        errors.add(f"{path}.dist", "unknown-distribution", f"dist must be one of {shapes}")
        return None
    shape = Shape(str(shape_name))
    _unknown(raw, path, ("dist", *PARAMETERS[shape]), errors)
    if shape is Shape.CHOICE:
        return _choice(raw, path, errors)
    numbers = {
        key: _number(raw.get(key), f"{path}.{key}", errors, positive=key in ("mean",))
        for key in PARAMETERS[shape]
    }
    if any(v is None for v in numbers.values()):
        return None
    got = {k: float(v or 0) for k, v in numbers.items()}
    if shape is Shape.UNIFORM and got["min"] > got["max"]:
        errors.add(f"{path}.min", "out-of-range", "min must not exceed max")
        return None
    return Distribution(
        shape=shape,
        value=got.get("value", 0.0),
        low=got.get("min", 0.0),
        high=got.get("max", 0.0),
        mean=got.get("mean", 0.0),
        sigma=got.get("sigma", 0.0),
    )


def _choice(raw: Mapping[object, object], path: str, errors: _Errors) -> Distribution | None:
    values = raw.get("values")
    if not isinstance(values, list) or not values:
        errors.add(f"{path}.values", "not-a-list", "values is a non-empty list of numbers")
        return None
    picked = [_number(v, f"{path}.values[{i}]", errors) for i, v in enumerate(values)]
    weights_raw = raw.get("weights", [1] * len(values))
    if not isinstance(weights_raw, list) or len(weights_raw) != len(values):
        errors.add(f"{path}.weights", "invalid-weights", "one weight per value")
        return None
    weights = [_number(w, f"{path}.weights[{i}]", errors) for i, w in enumerate(weights_raw)]
    if any(v is None for v in picked) or any(w is None for w in weights):
        return None
    if not sum(w or 0.0 for w in weights) > 0:
        errors.add(f"{path}.weights", "invalid-weights", "some weight must be > 0")
        return None
    return Distribution(
        shape=Shape.CHOICE,
        values=tuple(v or 0.0 for v in picked),
        weights=tuple(w or 0.0 for w in weights),
    )


def _priority(
    raw: object, path: str, classes: dict[str, int], errors: _Errors
) -> dict[str, float] | None:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        errors.add(path, "not-a-mapping", "priority is {class: weight}")
        return None
    weights: dict[str, float] = {}
    for name, weight in raw.items():
        if str(name) not in classes:
            errors.add(f"{path}.{name}", "unknown-class", f"not in priorityClasses: {name!r}")
            continue
        number = _number(weight, f"{path}.{name}", errors)
        if number is not None:
            weights[str(name)] = number
    if weights and not sum(weights.values()) > 0:
        errors.add(path, "invalid-weights", "some weight must be > 0")
        return None
    return weights


def cluster_total(spec: GenSpec) -> dict[str, str]:
    """Every node's allocatable summed, as quantities."""
    each = parse_resources(spec.allocatable, "cluster.allocatable")
    return {r: format_quantity(r, amount * spec.nodes) for r, amount in sorted(each.items())}


def tree_manifest(spec: GenSpec) -> dict[str, object]:
    """The given tree, or one the departments make: each a child of a root that guarantees the
    whole cluster, with its ``min`` and its ``max`` (default: the whole cluster)."""
    if spec.tree_manifest is not None:
        return dict(spec.tree_manifest)
    total = cluster_total(spec)
    children = [
        {
            "name": d.name,
            "min": dict(d.minimum),
            "max": dict(d.maximum) if d.maximum is not None else dict(total),
            "namespaces": [d.namespace],
        }
        for d in spec.departments
    ]
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "elasticquotatree", "namespace": "kube-system"},
        "spec": {"root": {"name": ROOT, "min": total, "max": total, "children": children}},
    }


__all__ = [
    "DEFAULTS",
    "Bursts",
    "Department",
    "Distribution",
    "GenSpec",
    "Shape",
    "cluster_total",
    "load_spec",
    "tree_manifest",
]
