"""What the watcher knows about each job kind's shape in the API: pure functions on manifests.

What it does: names the resources the watcher lists and watches (every supported job kind,
ElasticQuotaTree, PriorityClass, Node, Queue), and for each job kind says where its suspend flag
and pod templates are, whether it has finished (and how), whether it still has active pods
(as its controller reports them in ``status``), and which merge patch admits it to a zone or
suspends it again. It also names job kinds Usher does not admit but a cluster may well serve
(Kubeflow's XGBoostJob, PaddleJob, MXJob): the watcher observes them only to reject each one
on the log (``unsupported-kind``), so that nobody's job waits silently.

Finished, per kind (as the controllers, and the emulator's fake kubelet, write it):
- batch Job: condition ``Complete`` or ``Failed`` True;
- Kubeflow TFJob/PyTorchJob/MPIJob: condition ``Succeeded`` or ``Failed`` True;
- RayJob: ``jobDeploymentStatus`` ``Complete``/``Failed``, or ``jobStatus`` ``SUCCEEDED``/
  ``FAILED``/``STOPPED``;
- JobSet: ``terminalState`` set, or condition ``Completed``/``Failed`` True.
What it must never do: do I/O, read a clock, mutate a manifest it was given, or give an
unsupported kind anything to admit it with (no templates, no patch, never finished).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from schemas import Millis
from usher.adapters.kube import JsonObj, Resource
from usher.core.workload import ZONE_LABEL

Spec = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a finished workload ended."""

    succeeded: bool
    finished_ms: Millis | None


@dataclass(frozen=True)
class JobFamily:
    """One job kind in the API: its group/plural, served versions and where things live."""

    group: str
    plural: str
    kind: str
    versions: tuple[str, ...]
    """Versions to try, preferred first; every version shows the same objects (one storage)."""
    suspend_path: tuple[str, ...]
    """Under ``spec``."""
    templates: Callable[[Spec], list[object]]
    """The pod templates of a spec (each should be a mapping with a ``spec``)."""
    selector_patch: Callable[[Spec, str], Spec]
    """The ``spec`` part of a merge patch that pins every pod template to a zone."""
    outcome: Callable[[JsonObj], Outcome | None]
    active: Callable[[JsonObj], bool]
    supported: bool = True
    """False for a kind Usher does not admit: observed only to be rejected, never patched."""

    def resource(self, version: str) -> Resource:
        return Resource(self.group, version, self.plural, self.kind)

    @property
    def candidates(self) -> list[Resource]:
        return [self.resource(version) for version in self.versions]

    @property
    def storage(self) -> tuple[str, str]:
        return (self.group, self.plural)


# --------------------------------------------------------------------------- small readers


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _spec(obj: JsonObj) -> Spec:
    return _mapping(obj.get("spec"))


def _status(obj: JsonObj) -> dict[str, Any]:
    return _mapping(obj.get("status"))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def parse_time_ms(value: object) -> Millis | None:
    """RFC 3339 timestamp (``2024-04-08T02:04:17Z``) to epoch milliseconds; None if absent/bad."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return Millis(int(moment.timestamp() * 1000))


def _true_condition(obj: JsonObj, kind: str) -> dict[str, Any] | None:
    for condition in _list(_status(obj).get("conditions")):
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition if condition.get("status") == "True" else None
    return None


def _outcome_from_conditions(obj: JsonObj, success: str, failure: str) -> Outcome | None:
    for kind, succeeded in ((success, True), (failure, False)):
        condition = _true_condition(obj, kind)
        if condition is not None:
            return Outcome(succeeded, parse_time_ms(condition.get("lastTransitionTime")))
    return None


def _with_selector(item: object, path: tuple[str, ...], zone: str) -> object:
    """A copy of ``item`` whose pod template at ``path`` selects nodes of ``zone``."""
    if not isinstance(item, dict):
        return item
    copied = copy.deepcopy(item)
    node: dict[str, Any] = copied
    for key in (*path, "spec"):
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    selector = node.get("nodeSelector")
    node["nodeSelector"] = {**(selector if isinstance(selector, dict) else {}), ZONE_LABEL: zone}
    return copied


def _selector(zone: str) -> Spec:
    return {"spec": {"nodeSelector": {ZONE_LABEL: zone}}}


# --------------------------------------------------------------------------- batch/v1 Job


def _job_templates(spec: Spec) -> list[object]:
    return [spec.get("template")]


def _job_selector_patch(spec: Spec, zone: str) -> Spec:
    return {"template": _selector(zone)}


def _job_outcome(obj: JsonObj) -> Outcome | None:
    outcome = _outcome_from_conditions(obj, "Complete", "Failed")
    if outcome is not None and outcome.finished_ms is None:
        completed = parse_time_ms(_status(obj).get("completionTime"))
        return Outcome(outcome.succeeded, completed)
    return outcome


def _job_active(obj: JsonObj) -> bool:
    return _count(_status(obj).get("active")) > 0


# --------------------------------------------------------------------------- Kubeflow


def _replica_templates(field: str) -> Callable[[Spec], list[object]]:
    def templates(spec: Spec) -> list[object]:
        replicas = _mapping(spec.get(field))
        return [_mapping(replicas[name]).get("template") for name in sorted(replicas)]

    return templates


def _replica_selector_patch(field: str) -> Callable[[Spec, str], Spec]:
    def patch(spec: Spec, zone: str) -> Spec:
        # Replica specs are a map: a merge patch reaches into each without replacing it.
        replicas = _mapping(spec.get(field))
        return {field: {name: {"template": _selector(zone)} for name in sorted(replicas)}}

    return patch


def _kubeflow_outcome(obj: JsonObj) -> Outcome | None:
    outcome = _outcome_from_conditions(obj, "Succeeded", "Failed")
    if outcome is not None and outcome.finished_ms is None:
        return Outcome(outcome.succeeded, parse_time_ms(_status(obj).get("completionTime")))
    return outcome


def _kubeflow_active(obj: JsonObj) -> bool:
    statuses = _mapping(_status(obj).get("replicaStatuses"))
    return any(_count(_mapping(s).get("active")) > 0 for s in statuses.values())


# --------------------------------------------------------------------------- RayJob

_RAY_INACTIVE = frozenset({"", "New", "Suspended", "Complete", "Failed"})
_RAY_JOB_DONE = {"SUCCEEDED": True, "FAILED": False, "STOPPED": False}


def _ray_cluster(spec: Spec) -> Spec:
    return _mapping(spec.get("rayClusterSpec"))


def _ray_templates(spec: Spec) -> list[object]:
    cluster = _ray_cluster(spec)
    head = _mapping(cluster.get("headGroupSpec")).get("template")
    workers = [_mapping(g).get("template") for g in _list(cluster.get("workerGroupSpecs"))]
    return [head, *workers]


def _ray_selector_patch(spec: Spec, zone: str) -> Spec:
    # Worker groups are a list: a merge patch replaces it whole, so send every group back.
    workers = _list(_ray_cluster(spec).get("workerGroupSpecs"))
    groups = [_with_selector(g, ("template",), zone) for g in workers]
    cluster: Spec = {"headGroupSpec": {"template": _selector(zone)}}
    if groups:
        cluster["workerGroupSpecs"] = groups
    return {"rayClusterSpec": cluster}


def _ray_outcome(obj: JsonObj) -> Outcome | None:
    status = _status(obj)
    deployment = status.get("jobDeploymentStatus")
    job_status = status.get("jobStatus")
    at = parse_time_ms(status.get("endTime"))
    if isinstance(job_status, str) and job_status in _RAY_JOB_DONE:
        return Outcome(_RAY_JOB_DONE[job_status], at)
    if deployment in ("Complete", "Failed"):
        return Outcome(deployment == "Complete", at)
    return None


def _ray_active(obj: JsonObj) -> bool:
    deployment = _status(obj).get("jobDeploymentStatus")
    return isinstance(deployment, str) and deployment not in _RAY_INACTIVE


# --------------------------------------------------------------------------- JobSet

_JOBSET_TEMPLATE = ("template", "spec", "template")


def _jobset_templates(spec: Spec) -> list[object]:
    templates: list[object] = []
    for replicated in _list(spec.get("replicatedJobs")):
        job_spec = _mapping(_mapping(_mapping(replicated).get("template")).get("spec"))
        templates.append(job_spec.get("template"))
    return templates


def _jobset_selector_patch(spec: Spec, zone: str) -> Spec:
    # replicatedJobs is a list: a merge patch replaces it whole, so send every entry back.
    jobs = [_with_selector(j, _JOBSET_TEMPLATE, zone) for j in _list(spec.get("replicatedJobs"))]
    return {"replicatedJobs": jobs}


def _jobset_outcome(obj: JsonObj) -> Outcome | None:
    terminal = _status(obj).get("terminalState")
    outcome = _outcome_from_conditions(obj, "Completed", "Failed")
    if outcome is not None:
        return outcome
    if isinstance(terminal, str) and terminal:
        return Outcome(terminal == "Completed", None)
    return None


def _jobset_active(obj: JsonObj) -> bool:
    rows = _list(_status(obj).get("replicatedJobsStatus"))
    return any(
        _count(_mapping(r).get("active")) > 0 or _count(_mapping(r).get("ready")) > 0 for r in rows
    )


# --------------------------------------------------------------------------- the catalogue

_SUSPEND = ("suspend",)
_RUN_POLICY_SUSPEND = ("runPolicy", "suspend")


def _kubeflow(plural: str, kind: str, field: str, versions: tuple[str, ...]) -> JobFamily:
    return JobFamily(
        group="kubeflow.org",
        plural=plural,
        kind=kind,
        versions=versions,
        suspend_path=_RUN_POLICY_SUSPEND,
        templates=_replica_templates(field),
        selector_patch=_replica_selector_patch(field),
        outcome=_kubeflow_outcome,
        active=_kubeflow_active,
    )


JOB_FAMILIES: tuple[JobFamily, ...] = (
    JobFamily(
        "batch", "jobs", "Job", ("v1",), _SUSPEND,
        _job_templates, _job_selector_patch, _job_outcome, _job_active,
    ),
    _kubeflow("tfjobs", "TFJob", "tfReplicaSpecs", ("v1",)),
    _kubeflow("pytorchjobs", "PyTorchJob", "pytorchReplicaSpecs", ("v1",)),
    # The MPI operator v2 serves v2beta1; the training operator's older MPIJob is v1.
    _kubeflow("mpijobs", "MPIJob", "mpiReplicaSpecs", ("v2beta1", "v1")),
    JobFamily(
        "ray.io", "rayjobs", "RayJob", ("v1", "v1alpha1"), _SUSPEND,
        _ray_templates, _ray_selector_patch, _ray_outcome, _ray_active,
    ),
    JobFamily(
        "jobset.x-k8s.io", "jobsets", "JobSet", ("v1alpha2",), _SUSPEND,
        _jobset_templates, _jobset_selector_patch, _jobset_outcome, _jobset_active,
    ),
)  # fmt: skip


# --------------------------------------------------------------------------- kinds Usher rejects


def _none(obj: JsonObj) -> None:
    return None


def _inactive(obj: JsonObj) -> bool:
    return False


def _no_templates(spec: Spec) -> list[object]:
    return []


def _no_selector_patch(spec: Spec, zone: str) -> Spec:
    return {}


def _unsupported(group: str, plural: str, kind: str, versions: tuple[str, ...]) -> JobFamily:
    return JobFamily(
        group=group,
        plural=plural,
        kind=kind,
        versions=versions,
        suspend_path=_RUN_POLICY_SUSPEND,
        templates=_no_templates,
        selector_patch=_no_selector_patch,
        outcome=_none,
        active=_inactive,
        supported=False,
    )


UNSUPPORTED_FAMILIES: tuple[JobFamily, ...] = (
    # Kubeflow's training operator serves these next to TFJob/PyTorchJob/MPIJob.
    _unsupported("kubeflow.org", "xgboostjobs", "XGBoostJob", ("v1",)),
    _unsupported("kubeflow.org", "paddlejobs", "PaddleJob", ("v1",)),
    _unsupported("kubeflow.org", "mxjobs", "MXJob", ("v1",)),
)
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


def admit_patch(family: JobFamily, obj: JsonObj, zone: str) -> JsonObj | None:
    """The merge patch that lets the workload start in ``zone``; None when it already may (or
    when Usher does not admit the kind at all)."""
    if not family.supported:
        return None
    if not suspend_flag(family, obj) and pinned_to(family, obj, zone):
        return None
    spec = _deep_merge(_nested(family.suspend_path, False), family.selector_patch(_spec(obj), zone))
    return _guarded(obj, spec)


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
