"""A fake kubelet + workload controllers for the emulator: runs jobs on timers.

What it does: follows the store's change feed and, like the Job controller, the Kubeflow
training/MPI operators, KubeRay and JobSet would, writes the status of a batch Job, TFJob,
PyTorchJob, MPIJob, RayJob or JobSet through the status subresource (so watchers see MODIFIED
events): running when not suspended, suspended (with the controllers' condition) when suspended,
succeeded (or failed) after the ``usher.io/sim-duration`` seconds of annotation divided by
``speed`` (no annotation: runs forever). ``usher.io/sim-result: Failed`` makes it fail instead.
A batch Job's pods are kept as a cluster shows them (``pods``): created running when it runs,
left Succeeded/Failed when it ends, deleted when it is suspended or deleted.
What it must never do: touch spec or metadata; create objects other than a Job's pods; write a
status that does not change (no event storms); block the event loop or run outside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal, Protocol

from usher.adapters.kube_emulator.pods import JobPods
from usher.adapters.kube_emulator.store import (
    RESOURCES,
    ApiError,
    JsonObj,
    ResourceType,
    Store,
    StoreEvent,
    clone,
    find_resource,
    rfc3339,
)

SIM_DURATION = "usher.io/sim-duration"
SIM_RESULT = "usher.io/sim-result"
Phase = Literal["new", "running", "suspended", "finished"]
ObjKey = tuple[tuple[str, str], str, str]  # (storage key, namespace, name)
JOBS = ("batch", "jobs")


# --------------------------------------------------------------------------- conditions


def condition_true(status: JsonObj, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or []
    )


def set_condition(
    status: JsonObj,
    kind: str,
    value: bool,
    reason: str,
    message: str,
    now: str,
    *,
    only_if_present: bool = False,
) -> bool:
    """Set condition ``kind``; returns whether it transitioned (a new lastTransitionTime)."""
    conditions: list[JsonObj] = status.setdefault("conditions", [])
    wanted = "True" if value else "False"
    for i, cond in enumerate(conditions):
        if cond.get("type") == kind:
            if cond.get("status") == wanted:
                return False
            conditions[i] = {**cond, "status": wanted, "reason": reason, "message": message}
            conditions[i]["lastTransitionTime"] = now
            if "lastProbeTime" in cond or "lastUpdateTime" not in cond:
                conditions[i]["lastProbeTime"] = now
            return True
    if only_if_present:
        if not conditions:
            del status["conditions"]
        return False
    conditions.append(
        {
            "type": kind,
            "status": wanted,
            "lastProbeTime": now,
            "lastTransitionTime": now,
            "reason": reason,
            "message": message,
        }
    )
    return True


def _status(obj: JsonObj) -> JsonObj:
    return clone(obj.get("status") or {})


def _spec(obj: JsonObj) -> JsonObj:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _replicas(spec: Any) -> int:
    value = spec.get("replicas", 1) if isinstance(spec, dict) else 1
    return value if isinstance(value, int) else 1


# --------------------------------------------------------------------------- drivers


class Driver(Protocol):
    """How one workload kind shows suspension, running and completion."""

    def wants_suspended(self, obj: JsonObj) -> bool: ...
    def phase(self, obj: JsonObj) -> Phase: ...
    def run(self, obj: JsonObj, now: str) -> JsonObj: ...
    def suspend(self, obj: JsonObj, now: str) -> JsonObj: ...
    def finish(self, obj: JsonObj, now: str, failed: bool) -> JsonObj: ...


class JobDriver:
    """batch/v1 Job, as the Job controller of Kubernetes 1.32 writes its status."""

    def wants_suspended(self, obj: JsonObj) -> bool:
        return _spec(obj).get("suspend") is True

    def phase(self, obj: JsonObj) -> Phase:
        status = obj.get("status") or {}
        if condition_true(status, "Complete") or condition_true(status, "Failed"):
            return "finished"
        if condition_true(status, "Suspended"):
            return "suspended"
        return "running" if status.get("startTime") else "new"

    def _parallelism(self, obj: JsonObj) -> int:
        value = _spec(obj).get("parallelism", 1)
        return value if isinstance(value, int) else 1

    def run(self, obj: JsonObj, now: str) -> JsonObj:
        status = _status(obj)
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

    def suspend(self, obj: JsonObj, now: str) -> JsonObj:
        status = _status(obj)
        status.pop("active", None)  # int32 omitempty: a real server never shows "active": 0
        status["ready"] = 0
        set_condition(status, "Suspended", True, "JobSuspended", "Job suspended", now)
        return status

    def finish(self, obj: JsonObj, now: str, failed: bool) -> JsonObj:
        status = _status(obj)
        status.pop("active", None)
        status["ready"] = 0
        spec = _spec(obj)
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


class KubeflowDriver:
    """TFJob / PyTorchJob / MPIJob: ``spec.runPolicy.suspend``, Created/Running/Succeeded."""

    def __init__(self, kind: str, replica_specs: str) -> None:
        self.kind = kind
        self.replica_specs = replica_specs

    def wants_suspended(self, obj: JsonObj) -> bool:
        policy = _spec(obj).get("runPolicy") or {}
        return isinstance(policy, dict) and policy.get("suspend") is True

    def phase(self, obj: JsonObj) -> Phase:
        status = obj.get("status") or {}
        if condition_true(status, "Succeeded") or condition_true(status, "Failed"):
            return "finished"
        if condition_true(status, "Suspended"):
            return "suspended"
        return "running" if condition_true(status, "Running") else "new"

    def _replica_statuses(self, obj: JsonObj, field: str | None) -> JsonObj:
        specs = _spec(obj).get(self.replica_specs) or {}
        if not isinstance(specs, dict):
            return {}
        return {rtype: ({field: _replicas(s)} if field else {}) for rtype, s in specs.items()}

    def _name(self, obj: JsonObj) -> str:
        meta = obj["metadata"]
        return f"{meta.get('namespace', '')}/{meta['name']}"

    def run(self, obj: JsonObj, now: str) -> JsonObj:
        status = _status(obj)
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

    def suspend(self, obj: JsonObj, now: str) -> JsonObj:
        status = _status(obj)
        k, name = self.kind, self._name(obj)
        set_condition(status, "Created", True, f"{k}Created", f"{k} {name} is created.", now)
        set_condition(
            status, "Running", False, f"{k}Suspended", f"{k} {name} is suspended.", now,
            only_if_present=True,
        )  # fmt: skip
        set_condition(status, "Suspended", True, f"{k}Suspended", f"{k} {name} is suspended.", now)
        status["replicaStatuses"] = self._replica_statuses(obj, None)
        return status

    def finish(self, obj: JsonObj, now: str, failed: bool) -> JsonObj:
        status = _status(obj)
        k, name = self.kind, self._name(obj)
        outcome = "Failed" if failed else "Succeeded"
        text = f"{k} {name} {'has failed' if failed else 'successfully completed'}."
        set_condition(status, "Running", False, f"{k}{outcome}", text, now)
        set_condition(status, outcome, True, f"{k}{outcome}", text, now)
        status["replicaStatuses"] = self._replica_statuses(obj, "failed" if failed else "succeeded")
        status["completionTime"] = now
        return status


class RayJobDriver:
    """ray.io/v1 RayJob: ``spec.suspend``, ``jobDeploymentStatus`` and ``jobStatus`` (KubeRay)."""

    def wants_suspended(self, obj: JsonObj) -> bool:
        return _spec(obj).get("suspend") is True

    def phase(self, obj: JsonObj) -> Phase:
        deployment = (obj.get("status") or {}).get("jobDeploymentStatus")
        if deployment in ("Complete", "Failed"):
            return "finished"
        if deployment == "Suspended":
            return "suspended"
        return "running" if deployment == "Running" else "new"

    def run(self, obj: JsonObj, now: str) -> JsonObj:
        status = _status(obj)
        status.update(jobDeploymentStatus="Running", jobStatus="RUNNING", startTime=now)
        status.pop("endTime", None)
        return status

    def suspend(self, obj: JsonObj, now: str) -> JsonObj:
        status = _status(obj)
        status["jobDeploymentStatus"] = "Suspended"
        status.pop("jobStatus", None)
        return status

    def finish(self, obj: JsonObj, now: str, failed: bool) -> JsonObj:
        status = _status(obj)
        status["jobDeploymentStatus"] = "Failed" if failed else "Complete"
        status["jobStatus"] = "FAILED" if failed else "SUCCEEDED"
        status["endTime"] = now
        return status


class JobSetDriver:
    """jobset.x-k8s.io/v1alpha2 JobSet: ``spec.suspend``, Suspended/Completed/Failed."""

    def wants_suspended(self, obj: JsonObj) -> bool:
        return _spec(obj).get("suspend") is True

    def phase(self, obj: JsonObj) -> Phase:
        status = obj.get("status") or {}
        if status.get("terminalState") or condition_true(status, "Completed"):
            return "finished"
        if condition_true(status, "Failed"):
            return "finished"
        if condition_true(status, "Suspended"):
            return "suspended"
        return "running" if status.get("replicatedJobsStatus") else "new"

    def _replicated(self, obj: JsonObj, field: str) -> list[JsonObj]:
        rows: list[JsonObj] = []
        for rjob in _spec(obj).get("replicatedJobs") or []:
            if isinstance(rjob, dict):
                counts = dict.fromkeys(("ready", "succeeded", "failed", "active", "suspended"), 0)
                counts[field] = _replicas(rjob)
                rows.append({"name": rjob.get("name", ""), **counts})
        return rows

    def run(self, obj: JsonObj, now: str) -> JsonObj:
        status = _status(obj)
        set_condition(
            status, "Suspended", False, "ResumeJobs", "jobset is resumed", now, only_if_present=True
        )
        status["replicatedJobsStatus"] = self._replicated(obj, "active")
        return status

    def suspend(self, obj: JsonObj, now: str) -> JsonObj:
        status = _status(obj)
        set_condition(status, "Suspended", True, "SuspendJobs", "jobset is suspended", now)
        status["replicatedJobsStatus"] = self._replicated(obj, "suspended")
        return status

    def finish(self, obj: JsonObj, now: str, failed: bool) -> JsonObj:
        status = _status(obj)
        if failed:
            set_condition(status, "Failed", True, "FailedJobs", "jobset failed", now)
            status["terminalState"] = "Failed"
        else:
            message = "jobset completed successfully"
            set_condition(status, "Completed", True, "AllJobsCompleted", message, now)
            status["terminalState"] = "Completed"
        status["replicatedJobsStatus"] = self._replicated(obj, "failed" if failed else "succeeded")
        return status


DRIVERS: dict[tuple[str, str], Driver] = {
    ("batch", "jobs"): JobDriver(),
    ("kubeflow.org", "tfjobs"): KubeflowDriver("TFJob", "tfReplicaSpecs"),
    ("kubeflow.org", "pytorchjobs"): KubeflowDriver("PyTorchJob", "pytorchReplicaSpecs"),
    ("kubeflow.org", "mpijobs"): KubeflowDriver("MPIJob", "mpiReplicaSpecs"),
    ("ray.io", "rayjobs"): RayJobDriver(),
    ("jobset.x-k8s.io", "jobsets"): JobSetDriver(),
}


def sim_duration(obj: JsonObj) -> float | None:
    """Seconds the workload runs (annotation ``usher.io/sim-duration``); None: forever."""
    raw = (obj.get("metadata", {}).get("annotations") or {}).get(SIM_DURATION)
    try:
        value = float(raw) if raw is not None else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None


def sim_fails(obj: JsonObj) -> bool:
    return (obj.get("metadata", {}).get("annotations") or {}).get(SIM_RESULT) == "Failed"


def resource_of(obj: JsonObj, storage_key: tuple[str, str]) -> ResourceType | None:
    """The served resource of the object's own apiVersion (status is written at that version)."""
    api_version = str(obj.get("apiVersion", ""))
    version = api_version.rsplit("/", 1)[-1]
    return find_resource(storage_key[0], version, storage_key[1])


def storage_resource(storage_key: tuple[str, str]) -> ResourceType:
    """The first served version of a stored group/plural."""
    return next(rt for rt in RESOURCES if rt.storage_key == storage_key)


# --------------------------------------------------------------------------- the kubelet


class FakeKubelet:
    """Drives workload status from the store's change feed, in the running asyncio loop."""

    def __init__(self, store: Store, *, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.store = store
        self.speed = speed
        self._timers: dict[ObjKey, asyncio.TimerHandle] = {}
        self._pending: dict[ObjKey, asyncio.Handle] = {}
        self._unsubscribe: Callable[[], None] | None = None
        self.pods = JobPods(store)

    def start(self) -> None:
        """Subscribe, then reconcile every workload already stored."""
        if self._unsubscribe is not None:
            return
        self._unsubscribe = self.store.subscribe(self._on_event)
        self.pods.adopt()
        for namespace, name in self.pods.jobs():  # pods of jobs deleted meanwhile go too
            self._schedule((JOBS, namespace, name))
        for storage_key in DRIVERS:
            for obj in self.store.objects(storage_resource(storage_key)):
                meta = obj["metadata"]
                self._schedule((storage_key, meta.get("namespace", ""), meta["name"]))

    def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for handle in [*self._timers.values(), *self._pending.values()]:
            handle.cancel()
        self._timers.clear()
        self._pending.clear()

    def _on_event(self, event: StoreEvent) -> None:
        if event.storage_key in DRIVERS:
            meta = event.object["metadata"]
            self._schedule((event.storage_key, meta.get("namespace", ""), meta["name"]))

    def _schedule(self, key: ObjKey) -> None:
        """Reconcile soon, outside the write that told us (the store is not re-entrant)."""
        if key not in self._pending:
            self._pending[key] = asyncio.get_running_loop().call_soon(self._reconcile, key)

    def _load(self, key: ObjKey) -> tuple[ResourceType, JsonObj] | None:
        storage_key, namespace, name = key
        rt = storage_resource(storage_key)
        obj = self.store.find(rt, namespace or None, name)
        if obj is None:
            return None
        return resource_of(obj, storage_key) or rt, obj

    def _reconcile(self, key: ObjKey) -> None:
        self._pending.pop(key, None)
        self._drive(key)
        if key[0] == JOBS:
            self.pods.sync(key[1], key[2])

    def _drive(self, key: ObjKey) -> None:
        loaded = self._load(key)
        if loaded is None:
            self._cancel_timer(key)
            return
        rt, obj = loaded
        driver = DRIVERS[key[0]]
        phase = driver.phase(obj)
        now = rfc3339(self.store.now())
        if phase == "finished":
            self._cancel_timer(key)
        elif driver.wants_suspended(obj):
            self._cancel_timer(key)
            if phase != "suspended":
                self._write_status(rt, obj, driver.suspend(obj, now))
        else:
            if phase != "running":
                self._write_status(rt, obj, driver.run(obj, now))
            self._start_timer(key, obj)

    def _start_timer(self, key: ObjKey, obj: JsonObj) -> None:
        duration = sim_duration(obj)
        if duration is None or key in self._timers:
            return
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(duration / self.speed, self._finish, key)

    def _cancel_timer(self, key: ObjKey) -> None:
        handle = self._timers.pop(key, None)
        if handle is not None:
            handle.cancel()

    def _finish(self, key: ObjKey) -> None:
        self._timers.pop(key, None)
        loaded = self._load(key)
        if loaded is None:
            return
        rt, obj = loaded
        driver = DRIVERS[key[0]]
        if driver.phase(obj) != "running" or driver.wants_suspended(obj):
            return
        now = rfc3339(self.store.now())
        self._write_status(rt, obj, driver.finish(obj, now, sim_fails(obj)))
        if key[0] == JOBS:
            self.pods.sync(key[1], key[2])

    def _write_status(self, rt: ResourceType, obj: JsonObj, status: JsonObj) -> None:
        meta = obj["metadata"]
        body = {**obj, "status": status}
        try:
            self.store.update(rt, meta.get("namespace"), meta["name"], body, subresource="status")
        except ApiError:  # changed or deleted meanwhile: the change feed brings us back
            return
