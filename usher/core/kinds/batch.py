"""The batch/v1 Job: its pod set, zone patch, finished/active checks and fake kubelet.

What it does: a Job is one pod set ``main`` of ``min(parallelism, completions)`` pods (the
pods Kubernetes runs at once), which may start with fewer (R11: ``spec.parallelism`` is
patched down); ``spec.suspend`` holds it; the zone goes into
``spec.template.spec.nodeSelector``; it has finished when condition ``Complete`` or ``Failed``
is True; it is active while ``status.active`` counts pods. The fake kubelet writes the status
the Job controller of Kubernetes 1.32 writes.
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
    condition_true,
    count_of,
    outcome_from_conditions,
    parse_time_ms,
    selector,
    set_condition,
    spec_dict,
    status_copy,
    status_of,
)
from usher.core.kinds.fields import Errors, Raw, count

MAIN_POD_SET = "main"


def job_pod_count(job_spec: Raw, path: str, errors: Errors) -> int:
    """Pods a Job runs at once: ``parallelism`` (default 1), capped by ``completions``."""
    parallelism = count(job_spec.get("parallelism"), f"{path}.parallelism", errors)
    if job_spec.get("completions") is None:
        return parallelism
    # Kubernetes never starts more pods than remaining completions.
    return min(parallelism, count(job_spec.get("completions"), f"{path}.completions", errors))


def _pod_sets(spec: Raw, errors: Errors) -> list[PodSetSource]:
    pods = job_pod_count(spec, "spec", errors)
    return [PodSetSource(MAIN_POD_SET, pods, spec.get("template"), "spec.template", "spec")]


def _templates(spec: Spec) -> list[object]:
    return [spec.get("template")]


def _selector_patch(spec: Spec, zone: str) -> Spec:
    return {"template": selector(zone)}


def _outcome(obj: Obj) -> Outcome | None:
    outcome = outcome_from_conditions(obj, "Complete", "Failed")
    if outcome is not None and outcome.finished_ms is None:
        completed = parse_time_ms(status_of(obj).get("completionTime"))
        return Outcome(outcome.succeeded, completed)
    return outcome


def _active(obj: Obj) -> bool:
    return count_of(status_of(obj).get("active")) > 0


class JobDriver:
    """batch/v1 Job, as the Job controller of Kubernetes 1.32 writes its status."""

    def wants_suspended(self, obj: Obj) -> bool:
        return spec_dict(obj).get("suspend") is True

    def phase(self, obj: Obj) -> Phase:
        status = obj.get("status") or {}
        if condition_true(status, "Complete") or condition_true(status, "Failed"):
            return "finished"
        if condition_true(status, "Suspended"):
            return "suspended"
        return "running" if status.get("startTime") else "new"

    def _parallelism(self, obj: Obj) -> int:
        value = spec_dict(obj).get("parallelism", 1)
        return value if isinstance(value, int) else 1

    def run(self, obj: Obj, now: str) -> Obj:
        status = status_copy(obj)
        resumed = set_condition(
            status, "Suspended", False, "JobResumed", "Job resumed", now, only_if_present=True
        )
        if resumed or not status.get("startTime"):
            status["startTime"] = now
        active = self._parallelism(obj)
        status["active"] = active
        status["ready"] = active
        status.setdefault("uncountedTerminatedPods", {})
        return status

    def suspend(self, obj: Obj, now: str) -> Obj:
        status = status_copy(obj)
        status.pop("active", None)  # int32 omitempty: a real server never shows "active": 0
        status["ready"] = 0
        set_condition(status, "Suspended", True, "JobSuspended", "Job suspended", now)
        return status

    def finish(self, obj: Obj, now: str, failed: bool) -> Obj:
        status = status_copy(obj)
        status.pop("active", None)
        status["ready"] = 0
        spec = spec_dict(obj)
        if failed:
            status["failed"] = self._parallelism(obj)
            for kind in ("FailureTarget", "Failed"):
                set_condition(
                    status,
                    kind,
                    True,
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                    now,
                )
            return status
        completions = spec.get("completions")
        status["succeeded"] = (
            completions if isinstance(completions, int) else self._parallelism(obj)
        )
        status["completionTime"] = now
        for kind in ("SuccessCriteriaMet", "Complete"):
            set_condition(
                status,
                kind,
                True,
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                now,
            )
        return status


JOB = KindFamily(
    group="batch",
    plural="jobs",
    kind="Job",
    versions=("v1",),
    emulated_versions=("v1",),
    suspend_path=("suspend",),
    pod_sets=_pod_sets,
    templates=_templates,
    selector_patch=_selector_patch,
    outcome=_outcome,
    active=_active,
    kubelet=JobDriver(),
    builtin=True,
    scalable_pod_set=MAIN_POD_SET,
    count_patch=lambda pods: {"parallelism": pods},
)

FAMILIES: tuple[KindFamily, ...] = (JOB,)
