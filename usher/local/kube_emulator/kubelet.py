"""A fake kubelet + workload controllers for the emulator: runs jobs on timers.

What it does: follows the store's change feed and, like each kind's controller would (the Job
controller, the Kubeflow training/MPI operators, KubeRay, JobSet, the Spark operator, Argo's
workflow controller), writes the status of every job kind of the registry through the status
subresource (so watchers see MODIFIED events); each family module's ``KubeletDriver`` says what
that status is: running when not suspended, suspended (with the controllers' condition) when
suspended, succeeded (or failed) after the ``usher.io/sim-duration`` seconds of annotation
divided by ``speed`` (no annotation: runs forever). ``usher.io/sim-result: Failed`` makes it
fail instead.
A batch Job's pods are kept as a cluster shows them (``pods``): created running when it runs,
left Succeeded/Failed when it ends, deleted when it is suspended or deleted. A batch Job with
``emulator.usher.io/*`` annotations (``playbook``) is played pod by pod instead (``played``):
its pods get ready, succeed or fail each on its own time, and its status is counted from them.
It reads the stored objects themselves (``shared``, never copied: it only reads them) and is
not woken by the echo of its own status write when that write settled the job (the echo's
reconcile would find nothing to do).
What it must never do: touch spec or metadata; create objects other than a Job's pods; write a
status that does not change (no event storms); block the event loop or run outside it;
mutate an object it read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from usher.core.kinds import FAMILIES
from usher.core.kinds.family import KubeletDriver
from usher.core.values import registry
from usher.local.kube_emulator.errors import ApiError
from usher.local.kube_emulator.played import PlayedJobs
from usher.local.kube_emulator.pods import JobPods
from usher.local.kube_emulator.resources import RESOURCES, ResourceType, find_resource
from usher.local.kube_emulator.store import Store, StoreEvent
from usher.local.kube_emulator.wire import JsonObj, rfc3339

SIM_DURATION = registry.SIM_DURATION.key
SIM_RESULT = "usher.io/sim-result"
ObjKey = tuple[tuple[str, str], str, str]  # (storage key, namespace, name)
JOBS = ("batch", "jobs")


DRIVERS: dict[tuple[str, str], KubeletDriver] = {
    family.storage: family.kubelet for family in FAMILIES if family.kubelet is not None
}
"""What the fake kubelet does per stored job kind: each family module of the registry says."""


def sim_duration(obj: JsonObj) -> float | None:
    """Seconds the workload runs (annotation ``usher.io/sim-duration``, read by the registry's
    parser: finite, at most 30 days); None: forever (no value, or one the watcher rejects)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    seconds = registry.SIM_DURATION.read(annotations) if isinstance(annotations, dict) else None
    return float(seconds) if seconds is not None else None


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
        self._writing: tuple[ObjKey, str] | None = None
        """The job whose status the kubelet is writing, and the phase that write settles."""
        self.pods = JobPods(store)
        self.played = PlayedJobs(store, self.pods, speed=speed)

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
            key = (event.storage_key, meta.get("namespace", ""), meta["name"])
            if self._writing is not None and self._writing == (key, self._phase(event)):
                return  # our own write, and it settled the job: nothing more to do
            self._schedule(key)

    @staticmethod
    def _phase(event: StoreEvent) -> str:
        return "" if event.type == "DELETED" else DRIVERS[event.storage_key].phase(event.object)

    def _schedule(self, key: ObjKey) -> None:
        """Reconcile soon, outside the write that told us (the store is not re-entrant)."""
        if key not in self._pending:
            self._pending[key] = asyncio.get_running_loop().call_soon(self._reconcile, key)

    def _load(self, key: ObjKey) -> tuple[ResourceType, JsonObj] | None:
        storage_key, namespace, name = key
        rt = storage_resource(storage_key)
        obj = self.store.find(rt, namespace or None, name, shared=True)
        if obj is None:
            return None
        return resource_of(obj, storage_key) or rt, obj

    def _reconcile(self, key: ObjKey) -> None:
        self._pending.pop(key, None)
        loaded = self._load(key)
        if key[0] == JOBS and loaded is not None and self._play(key, loaded[1]):
            return
        self._drive(key, loaded)
        if key[0] == JOBS:
            self.pods.sync(key[1], key[2])

    def _drive(self, key: ObjKey, loaded: tuple[ResourceType, JsonObj] | None) -> None:
        if loaded is None:
            self._cancel_timer(key)
            return
        rt, obj = loaded
        driver = DRIVERS[key[0]]
        phase = driver.phase(obj)
        if phase == "finished":
            self._cancel_timer(key)
        elif driver.wants_suspended(obj):
            self._cancel_timer(key)
            if phase != "suspended":
                now = rfc3339(self.store.now())
                self._write_status(key, rt, obj, driver.suspend(obj, now), "suspended")
        else:
            if phase != "running":
                now = rfc3339(self.store.now())
                self._write_status(key, rt, obj, driver.run(obj, now), "running")
            self._start_timer(key, obj)

    def _play(self, key: ObjKey, job: JsonObj) -> bool:
        """Play a batch Job with a playbook (False: it has none)."""
        if not self.played.plays(job):
            return False
        self._cancel_timer(key)
        wake = self.played.play(job)
        if wake is not None:
            loop = asyncio.get_running_loop()
            self._timers[key] = loop.call_later(wake, self._wake, key)
        return True

    def _wake(self, key: ObjKey) -> None:
        self._timers.pop(key, None)
        self._reconcile(key)

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
        self._write_status(key, rt, obj, driver.finish(obj, now, sim_fails(obj)), "finished")
        if key[0] == JOBS:
            self.pods.sync(key[1], key[2])

    def _write_status(
        self, key: ObjKey, rt: ResourceType, obj: JsonObj, status: JsonObj, settles: str
    ) -> None:
        """Write ``status``; its echo wakes nobody when it leaves the job in the phase
        ``settles`` (the caller carries on from there: timers, pods)."""
        meta = obj["metadata"]
        body = {**obj, "status": status}
        self._writing = (key, settles)
        try:
            self.store.update(
                rt, meta.get("namespace"), meta["name"], body, subresource="status", shared=True
            )
        except ApiError:  # changed or deleted meanwhile: the change feed brings us back
            return
        finally:
            self._writing = None
