"""The batch/v1 Job: its pod set, zone patch, finished/active checks and fake kubelet.

What it does: a Job is one pod set ``main`` of ``min(parallelism, completions)`` pods (the
pods Kubernetes runs at once), which may start with fewer (R11: ``spec.parallelism`` is
patched down); ``spec.suspend`` holds it; the zone goes into
``spec.template.spec.nodeSelector``; it has finished when condition ``Complete`` or ``Failed``
is True (or once ``usher.io/min-success`` of its pods succeeded: ``success``; ended by
``spec.successPolicy`` it says how many succeeded); it is active while ``status.active`` counts
pods. Its pods are counted from its status (``ready``, ``succeeded``, ``failed``) and found by
the Job controller's ``batch.kubernetes.io/controller-uid`` label. The fake kubelet writes the
status the Job controller of Kubernetes 1.32 writes.
What it must never do: do I/O, read a clock, or mutate a manifest it was given.
"""

from __future__ import annotations

from usher.core.kinds import success
from usher.core.kinds.family import (
    KindFamily,
    Obj,
    Outcome,
    Phase,
    PodCounts,
    PodSetSource,
    Spec,
    condition_true,
    count_of,
    mapping,
    outcome_from_conditions,
    parse_time_ms,
    selector,
    set_condition,
    spec_dict,
    status_copy,
    status_of,
    true_condition,
)
from usher.core.kinds.fields import Errors, Raw, count

MAIN_POD_SET = "main"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
"""The label the Job controller puts on each of its pods: the Job's uid."""
SUCCESS_POLICY = "SuccessPolicy"
"""The reason of ``Complete`` when ``spec.successPolicy`` ended the Job."""


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
    succeeded = count_of(status_of(obj).get("succeeded"))
    by_minimum = success.reached(obj, succeeded)
    if by_minimum is not None:
        return by_minimum  # its other pods are stopped: Complete or not, it succeeded by this
    outcome = outcome_from_conditions(obj, "Complete", "Failed")
    if outcome is not None and outcome.finished_ms is None:
        completed = parse_time_ms(status_of(obj).get("completionTime"))
        outcome = Outcome(outcome.succeeded, completed)
    complete = true_condition(obj, "Complete")
    if outcome is not None and complete is not None and complete.get("reason") == SUCCESS_POLICY:
        # Kubernetes' successPolicy: the Job controller ended it once enough indexes succeeded.
        outcome = Outcome(True, outcome.finished_ms, min_success=succeeded)
    return outcome


def _active(obj: Obj) -> bool:
    return count_of(status_of(obj).get("active")) > 0


class JobPodReader:
    """A Job's pods: counted by the Job controller in its status, labelled with its uid."""

    def counts(self, obj: Obj) -> PodCounts:
        status = status_of(obj)
        return PodCounts(
            ready=count_of(status.get("ready")),
            succeeded=count_of(status.get("succeeded")),
            failed=count_of(status.get("failed")),
        )

    def selector(self, obj: Obj) -> str | None:
        uid = mapping(obj.get("metadata")).get("uid")
        return f"{CONTROLLER_UID_LABEL}={uid}" if isinstance(uid, str) and uid else None

    def pod_set(self, obj: Obj, pod: Obj) -> str:
        return MAIN_POD_SET

    def most_successes(self, obj: Obj) -> int | None:
        # A suspended Job keeps status.succeeded: stopping the rest does not undo the count.
        spec = spec_dict(obj)
        completions = spec.get("completions")
        if isinstance(completions, int) and not isinstance(completions, bool):
            return completions
        parallelism = spec.get("parallelism", 1)  # a work queue: any of its pods may succeed
        return parallelism if isinstance(parallelism, int) else 1


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
    deadline_path=("activeDeadlineSeconds",),
    pod_sets=_pod_sets,
    templates=_templates,
    selector_patch=_selector_patch,
    outcome=_outcome,
    active=_active,
    kubelet=JobDriver(),
    pods=JobPodReader(),
    builtin=True,
    scalable_pod_set=MAIN_POD_SET,
    count_patch=lambda pods: {"parallelism": pods},
)

FAMILIES: tuple[KindFamily, ...] = (JOB,)
