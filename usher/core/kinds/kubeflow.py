"""Kubeflow TFJob, PyTorchJob and MPIJob (and the kinds Usher rejects: XGBoost, Paddle, MX).

What it does: a Kubeflow job maps replica type -> {replicas, template} under
``spec.<x>ReplicaSpecs``; each replica type is a pod set of ``replicas`` pods, in sorted order.
``spec.runPolicy.suspend`` holds it; ``runPolicy.schedulingPolicy.priorityClass`` wins over the
pod templates' class (as in Kueue). The zone goes into every replica type's template (a merge
patch reaches into the map without replacing it). It has finished when condition
``Succeeded`` or ``Failed`` is True, and is active while a replica status counts active pods.
Its pods are counted per replica type in ``status.replicaStatuses`` and found by the operator's
``training.kubeflow.org/job-name`` label. The fake kubelet writes the Created/Running/
Suspended/Succeeded conditions of the training and MPI operators. XGBoostJob, PaddleJob and
MXJob are served by the same operator but not admitted: the watcher observes them only to
reject each one, so nobody's job waits silently.
What it must never do: do I/O, read a clock, mutate a manifest it was given, or give a rejected
kind anything to admit it with.
"""

from __future__ import annotations

from collections.abc import Callable

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
    replicas_of,
    selector,
    set_condition,
    spec_dict,
    status_copy,
    status_of,
)
from usher.core.kinds.fields import Errors, Raw, count, error, required_mapping

GROUP = "kubeflow.org"
_SUSPEND = ("runPolicy", "suspend")
_PRIORITY_CLASS = ("runPolicy", "schedulingPolicy", "priorityClass")


def _replica_pod_sets(field: str) -> Callable[[Raw, Errors], list[PodSetSource]]:
    """``spec.<field>`` maps replica type -> {replicas, template}."""

    def pod_sets(spec: Raw, errors: Errors) -> list[PodSetSource]:
        path = f"spec.{field}"
        replica_specs = required_mapping(spec.get(field), path, errors)
        if replica_specs is None:
            return []
        if not replica_specs:
            errors.append(error(path, "missing-field", f"{path} names no replica type"))
        sources: list[PodSetSource] = []
        # Sorted so that the same manifest always gives the same pod-set order.
        for replica_type in sorted(replica_specs, key=str):
            replica_path = f"{path}.{replica_type}"
            replica = required_mapping(replica_specs[replica_type], replica_path, errors)
            if replica is None:
                continue
            pods = count(replica.get("replicas"), f"{replica_path}.replicas", errors)
            template = replica.get("template")
            sources.append(
                PodSetSource(
                    str(replica_type), pods, template, f"{replica_path}.template", replica_path
                )
            )
        return sources

    return pod_sets


def _replica_templates(field: str) -> Callable[[Spec], list[object]]:
    def templates(spec: Spec) -> list[object]:
        replicas = mapping(spec.get(field))
        return [mapping(replicas[name]).get("template") for name in sorted(replicas)]

    return templates


def _replica_selector_patch(field: str) -> Callable[[Spec, str], Spec]:
    def patch(spec: Spec, zone: str) -> Spec:
        # Replica specs are a map: a merge patch reaches into each without replacing it.
        replicas = mapping(spec.get(field))
        return {field: {name: {"template": selector(zone)} for name in sorted(replicas)}}

    return patch


def _outcome(obj: Obj) -> Outcome | None:
    outcome = outcome_from_conditions(obj, "Succeeded", "Failed")
    if outcome is not None and outcome.finished_ms is None:
        return Outcome(outcome.succeeded, parse_time_ms(status_of(obj).get("completionTime")))
    return outcome


def _active(obj: Obj) -> bool:
    statuses = mapping(status_of(obj).get("replicaStatuses"))
    return any(count_of(mapping(s).get("active")) > 0 for s in statuses.values())


JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
"""The labels the training (and MPI) operator puts on each pod: its job, its replica type."""


class KubeflowPodReader:
    """A Kubeflow job's pods: counted per replica type in ``status.replicaStatuses`` (the
    operator counts a Running pod as ``active``: there is no readiness count), labelled with
    the job's name and their replica type (lower case)."""

    def __init__(self, replica_specs: str) -> None:
        self.replica_specs = replica_specs

    def counts(self, obj: Obj) -> PodCounts:
        statuses = [mapping(s) for s in mapping(status_of(obj).get("replicaStatuses")).values()]
        return PodCounts(
            ready=sum(count_of(s.get("active")) for s in statuses),
            succeeded=sum(count_of(s.get("succeeded")) for s in statuses),
            failed=sum(count_of(s.get("failed")) for s in statuses),
        )

    def selector(self, obj: Obj) -> str | None:
        name = mapping(obj.get("metadata")).get("name")
        return f"{JOB_NAME_LABEL}={name}" if isinstance(name, str) and name else None

    def pod_set(self, obj: Obj, pod: Obj) -> str:
        label = mapping(mapping(pod.get("metadata")).get("labels")).get(REPLICA_TYPE_LABEL)
        written = str(label or "")
        for replica_type in mapping(spec_dict(obj).get(self.replica_specs)):
            if str(replica_type).lower() == written.lower():
                return str(replica_type)  # the pod set keeps the name the job wrote
        return written

    def most_successes(self, obj: Obj) -> int | None:
        return None  # suspended, the operator deletes every pod: the count would not stay


class KubeflowDriver:
    """TFJob / PyTorchJob / MPIJob: ``spec.runPolicy.suspend``, Created/Running/Succeeded."""

    def __init__(self, kind: str, replica_specs: str) -> None:
        self.kind = kind
        self.replica_specs = replica_specs

    def wants_suspended(self, obj: Obj) -> bool:
        policy = spec_dict(obj).get("runPolicy") or {}
        return isinstance(policy, dict) and policy.get("suspend") is True

    def phase(self, obj: Obj) -> Phase:
        status = obj.get("status") or {}
        if condition_true(status, "Succeeded") or condition_true(status, "Failed"):
            return "finished"
        if condition_true(status, "Suspended"):
            return "suspended"
        return "running" if condition_true(status, "Running") else "new"

    def _replica_statuses(self, obj: Obj, field: str | None) -> Obj:
        specs = spec_dict(obj).get(self.replica_specs) or {}
        if not isinstance(specs, dict):
            return {}
        return {rtype: ({field: replicas_of(s)} if field else {}) for rtype, s in specs.items()}

    def _name(self, obj: Obj) -> str:
        meta = obj["metadata"]
        return f"{meta.get('namespace', '')}/{meta['name']}"

    def run(self, obj: Obj, now: str) -> Obj:
        status = status_copy(obj)
        k, name = self.kind, self._name(obj)
        set_condition(status, "Created", True, f"{k}Created", f"{k} {name} is created.", now)
        resumed = set_condition(
            status,
            "Suspended",
            False,
            f"{k}Resumed",
            f"{k} {name} is resumed.",
            now,
            only_if_present=True,
        )
        set_condition(status, "Running", True, f"{k}Running", f"{k} {name} is running.", now)
        if resumed or not status.get("startTime"):
            status["startTime"] = now
        status["replicaStatuses"] = self._replica_statuses(obj, "active")
        return status

    def suspend(self, obj: Obj, now: str) -> Obj:
        status = status_copy(obj)
        k, name = self.kind, self._name(obj)
        set_condition(status, "Created", True, f"{k}Created", f"{k} {name} is created.", now)
        set_condition(
            status, "Running", False, f"{k}Suspended", f"{k} {name} is suspended.", now,
            only_if_present=True,
        )  # fmt: skip
        set_condition(status, "Suspended", True, f"{k}Suspended", f"{k} {name} is suspended.", now)
        status["replicaStatuses"] = self._replica_statuses(obj, None)
        return status

    def finish(self, obj: Obj, now: str, failed: bool) -> Obj:
        status = status_copy(obj)
        k, name = self.kind, self._name(obj)
        outcome = "Failed" if failed else "Succeeded"
        text = f"{k} {name} {'has failed' if failed else 'successfully completed'}."
        set_condition(status, "Running", False, f"{k}{outcome}", text, now)
        set_condition(status, outcome, True, f"{k}{outcome}", text, now)
        status["replicaStatuses"] = self._replica_statuses(obj, "failed" if failed else "succeeded")
        status["completionTime"] = now
        return status


def _family(
    plural: str, kind: str, field: str, versions: tuple[str, ...], emulated: tuple[str, ...]
) -> KindFamily:
    return KindFamily(
        group=GROUP,
        plural=plural,
        kind=kind,
        versions=versions,
        emulated_versions=emulated,
        suspend_path=_SUSPEND,
        pod_sets=_replica_pod_sets(field),
        templates=_replica_templates(field),
        selector_patch=_replica_selector_patch(field),
        outcome=_outcome,
        active=_active,
        kubelet=KubeflowDriver(kind, field),
        pods=KubeflowPodReader(field),
        priority_class_path=_PRIORITY_CLASS,
    )


FAMILIES: tuple[KindFamily, ...] = (
    _family("tfjobs", "TFJob", "tfReplicaSpecs", ("v1",), ("v1",)),
    _family("pytorchjobs", "PyTorchJob", "pytorchReplicaSpecs", ("v1",), ("v1",)),
    # The MPI operator v2 serves v2beta1; the training operator's older MPIJob is v1.
    _family("mpijobs", "MPIJob", "mpiReplicaSpecs", ("v2beta1", "v1"), ("v1", "v2beta1")),
)


# --------------------------------------------------------------------------- kinds Usher rejects


def _none(obj: Obj) -> None:
    return None


def _inactive(obj: Obj) -> bool:
    return False


def _no_pod_sets(spec: Raw, errors: Errors) -> list[PodSetSource]:
    return []


def _no_templates(spec: Spec) -> list[object]:
    return []


def _no_selector_patch(spec: Spec, zone: str) -> Spec:
    return {}


def _rejected(plural: str, kind: str) -> KindFamily:
    return KindFamily(
        group=GROUP,
        plural=plural,
        kind=kind,
        versions=("v1",),
        emulated_versions=("v1",),
        suspend_path=_SUSPEND,
        pod_sets=_no_pod_sets,
        templates=_no_templates,
        selector_patch=_no_selector_patch,
        outcome=_none,
        active=_inactive,
        kubelet=None,
        supported=False,
    )


REJECTED: tuple[KindFamily, ...] = (
    # Kubeflow's training operator serves these next to TFJob/PyTorchJob/MPIJob.
    _rejected("xgboostjobs", "XGBoostJob"),
    _rejected("paddlejobs", "PaddleJob"),
    _rejected("mxjobs", "MXJob"),
)
