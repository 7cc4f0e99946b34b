"""The JobSet (jobset.x-k8s.io): its pod sets, zone patch, finished/active checks and kubelet.

What it does: each replicated Job of a JobSet is a pod set of ``replicas x`` the pod count of
its Job template (``min(parallelism, completions)``). ``spec.suspend`` holds it. The zone goes
into every replicated Job's pod template (``replicatedJobs`` is a list, which a merge patch
replaces whole, so every entry is sent back). It has finished when ``terminalState`` is set or
condition ``Completed``/``Failed`` is True; it is active while a replicated Job row counts
active or ready pods.
What it must never do: do I/O, read a clock, or mutate a manifest it was given.
"""

from __future__ import annotations

from usher.core.kinds.batch import job_pod_count
from usher.core.kinds.family import (
    KindFamily,
    Obj,
    Outcome,
    Phase,
    PodSetSource,
    Spec,
    as_list,
    condition_true,
    count_of,
    mapping,
    outcome_from_conditions,
    replicas_of,
    set_condition,
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

_TEMPLATE = ("template", "spec", "template")


def _pod_sets(spec: Raw, errors: Errors) -> list[PodSetSource]:
    path = "spec.replicatedJobs"
    if spec.get("replicatedJobs") is None:
        errors.append(error(path, "missing-field", f"{path} is required"))
    sources: list[PodSetSource] = []
    for index, raw_job in enumerate(optional_list(spec.get("replicatedJobs"), path, errors)):
        source = _replicated_job(raw_job, f"{path}[{index}]", errors)
        if source is not None:
            sources.append(source)
    return sources


def _replicated_job(raw: object, path: str, errors: Errors) -> PodSetSource | None:
    """One replicated Job of a JobSet: ``replicas`` copies of a Job template."""
    job = required_mapping(raw, path, errors)
    if job is None:
        return None
    name = required_string(job.get("name"), f"{path}.name", errors)
    replicas = count(job.get("replicas"), f"{path}.replicas", errors)
    job_template = required_mapping(job.get("template"), f"{path}.template", errors)
    if job_template is None:
        return None
    spec_path = f"{path}.template.spec"
    job_spec = required_mapping(job_template.get("spec"), spec_path, errors)
    if job_spec is None:
        return None
    pods = replicas * job_pod_count(job_spec, spec_path, errors)
    template = job_spec.get("template")
    return PodSetSource(name, pods, template, f"{spec_path}.template", f"{path}.name")


def _templates(spec: Spec) -> list[object]:
    templates: list[object] = []
    for replicated in as_list(spec.get("replicatedJobs")):
        job_spec = mapping(mapping(mapping(replicated).get("template")).get("spec"))
        templates.append(job_spec.get("template"))
    return templates


def _selector_patch(spec: Spec, zone: str) -> Spec:
    # replicatedJobs is a list: a merge patch replaces it whole, so send every entry back.
    jobs = [with_selector(j, _TEMPLATE, zone) for j in as_list(spec.get("replicatedJobs"))]
    return {"replicatedJobs": jobs}


def _outcome(obj: Obj) -> Outcome | None:
    terminal = status_of(obj).get("terminalState")
    outcome = outcome_from_conditions(obj, "Completed", "Failed")
    if outcome is not None:
        return outcome
    if isinstance(terminal, str) and terminal:
        return Outcome(terminal == "Completed", None)
    return None


def _active(obj: Obj) -> bool:
    rows = as_list(status_of(obj).get("replicatedJobsStatus"))
    return any(
        count_of(mapping(r).get("active")) > 0 or count_of(mapping(r).get("ready")) > 0
        for r in rows
    )


class JobSetDriver:
    """jobset.x-k8s.io/v1alpha2 JobSet: ``spec.suspend``, Suspended/Completed/Failed."""

    def wants_suspended(self, obj: Obj) -> bool:
        return spec_dict(obj).get("suspend") is True

    def phase(self, obj: Obj) -> Phase:
        status = obj.get("status") or {}
        if status.get("terminalState") or condition_true(status, "Completed"):
            return "finished"
        if condition_true(status, "Failed"):
            return "finished"
        if condition_true(status, "Suspended"):
            return "suspended"
        return "running" if status.get("replicatedJobsStatus") else "new"

    def _replicated(self, obj: Obj, field: str) -> list[Obj]:
        rows: list[Obj] = []
        for rjob in spec_dict(obj).get("replicatedJobs") or []:
            if isinstance(rjob, dict):
                counts = dict.fromkeys(("ready", "succeeded", "failed", "active", "suspended"), 0)
                counts[field] = replicas_of(rjob)
                rows.append({"name": rjob.get("name", ""), **counts})
        return rows

    def run(self, obj: Obj, now: str) -> Obj:
        status = status_copy(obj)
        set_condition(
            status, "Suspended", False, "ResumeJobs", "jobset is resumed", now, only_if_present=True
        )
        status["replicatedJobsStatus"] = self._replicated(obj, "active")
        return status

    def suspend(self, obj: Obj, now: str) -> Obj:
        status = status_copy(obj)
        set_condition(status, "Suspended", True, "SuspendJobs", "jobset is suspended", now)
        status["replicatedJobsStatus"] = self._replicated(obj, "suspended")
        return status

    def finish(self, obj: Obj, now: str, failed: bool) -> Obj:
        status = status_copy(obj)
        if failed:
            set_condition(status, "Failed", True, "FailedJobs", "jobset failed", now)
            status["terminalState"] = "Failed"
        else:
            message = "jobset completed successfully"
            set_condition(status, "Completed", True, "AllJobsCompleted", message, now)
            status["terminalState"] = "Completed"
        status["replicatedJobsStatus"] = self._replicated(obj, "failed" if failed else "succeeded")
        return status


FAMILIES: tuple[KindFamily, ...] = (
    KindFamily(
        group="jobset.x-k8s.io",
        plural="jobsets",
        kind="JobSet",
        versions=("v1alpha2",),
        emulated_versions=("v1alpha2",),
        suspend_path=("suspend",),
        pod_sets=_pod_sets,
        templates=_templates,
        selector_patch=_selector_patch,
        outcome=_outcome,
        active=_active,
        kubelet=JobSetDriver(),
    ),
)
