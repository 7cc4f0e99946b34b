"""What the watcher knows about each job kind's shape in the API: pure functions on manifests.

What it does: names the resources the watcher lists and watches (every job kind of the
registry ``usher.core.kinds``, ElasticQuotaTree, PriorityClass, Node, Queue) and, from each
family's knowledge there (where its suspend flag and pod templates are, whether it has
finished and how, whether it still has active pods, the zone patch), builds the merge patch
that admits a workload to a zone or suspends it again. Job kinds Usher does not admit but a
cluster may well serve (Kubeflow's XGBoostJob, PaddleJob, MXJob) are observed only to reject
each one on the log (``unsupported-kind``), so that nobody's job waits silently.
What it must never do: do I/O, read a clock, mutate a manifest it was given, keep kind
knowledge of its own (it belongs to the family modules), or give an unsupported kind anything
to admit it with (no templates, no patch, never finished).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Final

from schemas import TopologyPin
from usher.adapters.kube import JsonObj, Resource, merge_diff
from usher.core.intake.workload import ZONE_LABEL
from usher.core.kinds import FAMILIES, REJECTED, KindFamily, Outcome, parse_time_ms
from usher.core.kinds.topology import pinned
from usher.core.tree.burst_tolerations import Toleration, retolerated

__all__ = ["Outcome", "parse_time_ms"]

ADDED_TOLERATIONS_ANNOTATION: Final = "usher.io/added-tolerations"
"""On a workload Usher pinned to a burst zone (Z3): the tolerations it added to each pod
template (a JSON list, one list per template in the family's order), so that a later pin
into another zone takes exactly those away and leaves the template as the user wrote it."""

Spec = dict[str, Any]


@dataclass(frozen=True)
class JobFamily(KindFamily):
    """A registered job kind, as the watcher reaches it in the API."""

    def resource(self, version: str) -> Resource:
        return Resource(self.group, version, self.plural, self.kind)

    @property
    def candidates(self) -> list[Resource]:
        return [self.resource(version) for version in self.versions]

    @classmethod
    def of(cls, family: KindFamily) -> JobFamily:
        return cls(**{f.name: getattr(family, f.name) for f in fields(KindFamily)})


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _spec(obj: JsonObj) -> Spec:
    return _mapping(obj.get("spec"))


JOB_FAMILIES: tuple[JobFamily, ...] = tuple(JobFamily.of(family) for family in FAMILIES)
"""Every job kind Usher admits."""

UNSUPPORTED_FAMILIES: tuple[JobFamily, ...] = tuple(JobFamily.of(family) for family in REJECTED)
"""Job kinds Usher does not admit: each object is published as a ``WorkloadRejected``."""

OBSERVED_FAMILIES: tuple[JobFamily, ...] = JOB_FAMILIES + UNSUPPORTED_FAMILIES
"""Every job kind the watcher lists and watches (those a cluster does not serve are skipped)."""

OWNER_KINDS: frozenset[str] = frozenset(family.kind for family in JOB_FAMILIES)
"""A job controlled by one of these (a JobSet's Jobs, a RayJob's submitter Job) is part of its
owner's workload, not a workload of its own."""

NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PRIORITY_CLASSES = Resource(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
)
QUOTA_TREES = Resource("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees", "ElasticQuotaTree")
QUEUES = Resource("scheduling.x-k8s.io", "v1alpha1", "queues", "Queue")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
LIMIT_RANGES = Resource("", "v1", "limitranges", "LimitRange")
EVENTS = Resource("", "v1", "events", "Event")
PODS = Resource("", "v1", "pods", "Pod")


def container_defaults(limit_range: JsonObj) -> dict[str, str]:
    """What a LimitRange gives a container that declares nothing: for each resource its
    ``defaultRequest``, else its ``default`` (limit), as the API server's LimitRanger does."""
    defaults: dict[str, str] = {}
    for item in _list(_spec(limit_range).get("limits")):
        item = _mapping(item)
        if item.get("type") != "Container":
            continue
        for field in ("defaultRequest", "default"):
            for resource, quantity in _mapping(item.get(field)).items():
                if isinstance(quantity, str | int) and resource not in defaults:
                    defaults[str(resource)] = str(quantity)
    return defaults


def family_of_kind(kind: str) -> JobFamily | None:
    """The family of a ``group/version/Kind`` id as written in ``WorkloadObserved.kind``."""
    group, _, rest = kind.partition("/")
    _, _, name = rest.partition("/")
    for family in OBSERVED_FAMILIES:
        if (family.group, family.kind) == (group, name):
            return family
    return None


def kind_id(resource: Resource) -> str:
    """``group/version/Kind``, the id the core uses (``batch/v1/Job``)."""
    return f"{resource.api_version}/{resource.kind}"


def controlled_by_workload(obj: JsonObj) -> bool:
    """Whether a workload kind controls this object (then it is not a workload itself)."""
    meta = _mapping(obj.get("metadata"))
    for owner in _list(meta.get("ownerReferences")):
        owner = _mapping(owner)
        if owner.get("controller") is True and owner.get("kind") in OWNER_KINDS:
            return True
    return False


def suspend_flag(family: JobFamily, obj: JsonObj) -> bool:
    """The kind's suspend field is true."""
    node: object = _spec(obj)
    for key in family.suspend_path:
        node = _mapping(node).get(key)
    return node is True


def _nested(path: tuple[str, ...], value: object) -> Spec:
    out: Spec = {path[-1]: value}
    for key in reversed(path[:-1]):
        out = {key: out}
    return out


def _deep_merge(left: Spec, right: Spec) -> Spec:
    merged = dict(left)
    for key, value in right.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[key] = _deep_merge(current, value)
        else:
            merged[key] = value
    return merged


def pinned_to(family: JobFamily, obj: JsonObj, zone: str) -> bool:
    """Every pod template already selects nodes of ``zone``."""
    for template in family.templates(_spec(obj)):
        pod_spec = _mapping(_mapping(template).get("spec"))
        if _mapping(pod_spec.get("nodeSelector")).get(ZONE_LABEL) != zone:
            return False
    return True


def admit_patch(
    family: JobFamily,
    obj: JsonObj,
    zone: str,
    pod_counts: dict[str, int] | None = None,
    tolerations: Sequence[Toleration] = (),
    pin: TopologyPin | None = None,
) -> JsonObj | None:
    """The merge patch that lets the workload start in ``zone``, scaled down to a partial
    admission's ``pod_counts`` (R11), its pod templates tolerating ``tolerations`` (a burst
    zone's taints, Z3) and no longer those Usher added for an earlier zone, and selecting the
    nodes of ``pin``'s topology domain (TP1); None when it already may (or when Usher does not
    admit the kind at all)."""
    if not family.supported:
        return None
    spec = pinned(family.selector_patch(_spec(obj), zone), pin)
    toleration_spec, annotations = _toleration_patch(family, obj, spec, tolerations)
    if not suspend_flag(family, obj) and pinned_to(family, obj, zone) and annotations is None:
        return None
    spec = _deep_merge(_nested(family.suspend_path, False), spec)
    spec = _deep_merge(spec, toleration_spec)
    scalable, count_patch = family.scalable_pod_set, family.count_patch
    if pod_counts and scalable in pod_counts and count_patch is not None:
        spec = _deep_merge(spec, count_patch(pod_counts[scalable]))
    patch = _guarded(obj, spec)
    if annotations is not None:
        patch.setdefault("metadata", {})["annotations"] = annotations
    return patch


def _toleration_patch(
    family: JobFamily, obj: JsonObj, selector_spec: Spec, tolerations: Sequence[Toleration]
) -> tuple[Spec, JsonObj | None]:
    """The ``spec`` part of a merge patch that gives every pod template (after the selector
    patch) the tolerations it should have, and the annotations part recording what Usher
    added; ``({}, None)`` when every template already is as it should be."""
    recorded = _annotations(obj).get(ADDED_TOLERATIONS_ANNOTATION)
    added_before = _added_tolerations(recorded)
    if not tolerations and not any(added_before):
        return {}, None  # the common case: no burst zone now, none before
    before = _deep_merge(_spec(obj), selector_spec)
    after = copy.deepcopy(before)
    added: list[list[Toleration]] = []
    for index, template in enumerate(family.templates(after)):
        pod_spec = _mapping(template).get("spec")
        if not isinstance(pod_spec, dict):
            added.append([])
            continue
        previous = added_before[index] if index < len(added_before) else []
        wanted, mine = retolerated(_list(pod_spec.get("tolerations")), previous, tolerations)
        if wanted:
            pod_spec["tolerations"] = wanted
        else:
            pod_spec.pop("tolerations", None)
        added.append(mine)
    diff: Spec = merge_diff(before, after) or {}
    record = json.dumps(added, separators=(",", ":")) if any(added) else None
    if not diff and record == recorded:
        return {}, None
    return diff, {ADDED_TOLERATIONS_ANNOTATION: record}


def _annotations(obj: JsonObj) -> dict[str, Any]:
    return _mapping(_mapping(obj.get("metadata")).get("annotations"))


def _added_tolerations(recorded: object) -> list[list[object]]:
    """What the workload's annotation says Usher added to each pod template (none: [])."""
    try:
        added = json.loads(recorded) if isinstance(recorded, str) else []
    except ValueError:
        return []  # not Usher's writing: it added nothing it can tell
    return [_list(item) for item in _list(added)]


def suspend_patch(family: JobFamily, obj: JsonObj) -> JsonObj | None:
    """The merge patch that suspends the workload again; None when it already is (or when
    Usher does not admit the kind: it never unsuspended it)."""
    if not family.supported or suspend_flag(family, obj):
        return None
    return _guarded(obj, _nested(family.suspend_path, True))


def _guarded(obj: JsonObj, spec: Spec) -> JsonObj:
    # The resourceVersion makes the patch a compare-and-swap: lists sent back whole (Ray
    # worker groups, JobSet replicated jobs) must not overwrite a concurrent edit.
    version = _mapping(obj.get("metadata")).get("resourceVersion")
    patch: JsonObj = {"spec": spec}
    if isinstance(version, str) and version:
        patch["metadata"] = {"resourceVersion": version}
    return patch
