"""KubeRay's RayJob: its pod sets, zone patch, finished/active checks and fake kubelet.

What it does: a RayJob is one ``head`` pod set plus one per worker group of
``replicas x numOfHosts`` pods (multi-host groups run numOfHosts pods per replica); a RayJob
without ``rayClusterSpec`` (one that borrows an existing cluster) is rejected. ``spec.suspend``
holds it. The zone goes into the head template and every worker group's template (worker groups
are a list, which a merge patch replaces whole, so every group is sent back). It has finished
when ``jobStatus`` is ``SUCCEEDED``/``FAILED``/``STOPPED`` or ``jobDeploymentStatus`` is
``Complete``/``Failed``; it is active while ``jobDeploymentStatus`` says its cluster runs.
What it must never do: do I/O, read a clock, or mutate a manifest it was given.
"""

from __future__ import annotations

from usher.core.kinds.family import (
    KindFamily,
    Obj,
    Outcome,
    Phase,
    PodSetSource,
    Spec,
    as_list,
    mapping,
    parse_time_ms,
    selector,
    spec_dict,
    status_copy,
    status_of,
    with_selector,
)
from usher.core.kinds.fields import (
    Errors,
    Raw,
    count,
    error,
    optional_list,
    required_mapping,
    required_string,
)

HEAD_POD_SET = "head"
_INACTIVE = frozenset({"", "New", "Suspended", "Complete", "Failed"})
_JOB_DONE = {"SUCCEEDED": True, "FAILED": False, "STOPPED": False}


def _pod_sets(spec: Raw, errors: Errors) -> list[PodSetSource]:
    path = "spec.rayClusterSpec"
    if spec.get("rayClusterSpec") is None:
        message = f"{path} is required: Usher admits only RayJobs that create their own cluster"
        errors.append(error(path, "missing-field", message))
        return []
    cluster = required_mapping(spec.get("rayClusterSpec"), path, errors)
    if cluster is None:
        return []
    return [
        *_head(cluster, f"{path}.headGroupSpec", errors),
        *_workers(cluster, f"{path}.workerGroupSpecs", errors),
    ]


def _head(cluster: Raw, path: str, errors: Errors) -> list[PodSetSource]:
    head = required_mapping(cluster.get("headGroupSpec"), path, errors)
    if head is None:
        return []
    return [PodSetSource(HEAD_POD_SET, 1, head.get("template"), f"{path}.template", path)]


def _workers(cluster: Raw, path: str, errors: Errors) -> list[PodSetSource]:
    sources: list[PodSetSource] = []
    for index, raw_group in enumerate(optional_list(cluster.get("workerGroupSpecs"), path, errors)):
        group_path = f"{path}[{index}]"
        group = required_mapping(raw_group, group_path, errors)
        if group is None:
            continue
        name = required_string(group.get("groupName"), f"{group_path}.groupName", errors)
        replicas = count(group.get("replicas"), f"{group_path}.replicas", errors)
        # Multi-host groups run numOfHosts pods per replica.
        hosts = count(group.get("numOfHosts"), f"{group_path}.numOfHosts", errors)
        template, template_path = group.get("template"), f"{group_path}.template"
        name_path = f"{group_path}.groupName"
        sources.append(PodSetSource(name, replicas * hosts, template, template_path, name_path))
    return sources


def _cluster(spec: Spec) -> Spec:
    return mapping(spec.get("rayClusterSpec"))


def _templates(spec: Spec) -> list[object]:
    cluster = _cluster(spec)
    head = mapping(cluster.get("headGroupSpec")).get("template")
    workers = [mapping(g).get("template") for g in as_list(cluster.get("workerGroupSpecs"))]
    return [head, *workers]


def _selector_patch(spec: Spec, zone: str) -> Spec:
    # Worker groups are a list: a merge patch replaces it whole, so send every group back.
    workers = as_list(_cluster(spec).get("workerGroupSpecs"))
    groups = [with_selector(g, ("template",), zone) for g in workers]
    cluster: Spec = {"headGroupSpec": {"template": selector(zone)}}
    if groups:
        cluster["workerGroupSpecs"] = groups
    return {"rayClusterSpec": cluster}


def _outcome(obj: Obj) -> Outcome | None:
    status = status_of(obj)
    deployment = status.get("jobDeploymentStatus")
    job_status = status.get("jobStatus")
    at = parse_time_ms(status.get("endTime"))
    if isinstance(job_status, str) and job_status in _JOB_DONE:
        return Outcome(_JOB_DONE[job_status], at)
    if deployment in ("Complete", "Failed"):
        return Outcome(deployment == "Complete", at)
    return None


def _active(obj: Obj) -> bool:
    deployment = status_of(obj).get("jobDeploymentStatus")
    return isinstance(deployment, str) and deployment not in _INACTIVE


class RayJobDriver:
    """ray.io/v1 RayJob: ``spec.suspend``, ``jobDeploymentStatus`` and ``jobStatus`` (KubeRay)."""

    def wants_suspended(self, obj: Obj) -> bool:
        return spec_dict(obj).get("suspend") is True

    def phase(self, obj: Obj) -> Phase:
        deployment = (obj.get("status") or {}).get("jobDeploymentStatus")
        if deployment in ("Complete", "Failed"):
            return "finished"
        if deployment == "Suspended":
            return "suspended"
        return "running" if deployment == "Running" else "new"

    def run(self, obj: Obj, now: str) -> Obj:
        status = status_copy(obj)
        status.update(jobDeploymentStatus="Running", jobStatus="RUNNING", startTime=now)
        status.pop("endTime", None)
        return status

    def suspend(self, obj: Obj, now: str) -> Obj:
        status = status_copy(obj)
        status["jobDeploymentStatus"] = "Suspended"
        status.pop("jobStatus", None)
        return status

    def finish(self, obj: Obj, now: str, failed: bool) -> Obj:
        status = status_copy(obj)
        status["jobDeploymentStatus"] = "Failed" if failed else "Complete"
        status["jobStatus"] = "FAILED" if failed else "SUCCEEDED"
        status["endTime"] = now
        return status


FAMILIES: tuple[KindFamily, ...] = (
    KindFamily(
        group="ray.io",
        plural="rayjobs",
        kind="RayJob",
        versions=("v1", "v1alpha1"),
        emulated_versions=("v1",),
        suspend_path=("suspend",),
        pod_sets=_pod_sets,
        templates=_templates,
        selector_patch=_selector_patch,
        outcome=_outcome,
        active=_active,
        kubelet=RayJobDriver(),
    ),
)
