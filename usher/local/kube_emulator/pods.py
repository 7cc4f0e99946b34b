"""The pods of a batch Job, as the Job controller, the scheduler and a kubelet leave them.

What it does: given a Job (as the fake kubelet last wrote its status), keeps its pods in the
store the way a cluster shows them: ``status.active`` pods named ``<job>-<suffix>`` with the
Job controller's labels and owner reference, bound to a Node whose labels match the pod
template's ``nodeSelector`` and whose ``NoSchedule``/``NoExecute`` taints it tolerates (Pending
and Unschedulable, saying why as the scheduler does, when none does), Running with ready
container statuses; when the Job completes or fails they stay, Succeeded (``Completed``) or
Failed (``Error``); when it is suspended, or deleted (the garbage collector), they are deleted.
What it must never do: touch the Job or any object that is not one of its pods; write a pod
that does not change; decide anything Usher decides (pods are only what a user sees).
"""

from __future__ import annotations

import hashlib
from typing import Any

from usher.core.tree.burst_tolerations import tolerates
from usher.local.kube_emulator.errors import ApiError
from usher.local.kube_emulator.playbook import COMPLETED, PodFate, Stage
from usher.local.kube_emulator.resources import RESOURCES
from usher.local.kube_emulator.store import Store
from usher.local.kube_emulator.wire import JsonObj, rfc3339

PODS = next(rt for rt in RESOURCES if rt.plural == "pods")
NODES = next(rt for rt in RESOURCES if rt.plural == "nodes")
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
FILTERING_EFFECTS = ("NoSchedule", "NoExecute")
"""Taint effects that keep a pod off a node (``PreferNoSchedule`` does not)."""
NOT_SELECTED = "node(s) didn't match Pod's node affinity/selector"


def _condition(kind: str, true: bool, now: str, reason: str = "") -> JsonObj:
    cond: JsonObj = {"type": kind, "status": "True" if true else "False",
                     "lastProbeTime": None, "lastTransitionTime": now}  # fmt: skip
    if reason:
        cond["reason"] = reason
    return cond


def job_phase(job: JsonObj) -> str:
    """``running``, ``succeeded``, ``failed`` or ``stopped`` (suspended or never started)."""
    status = job.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conditions.get("Complete") == "True":
        return "succeeded"
    if conditions.get("Failed") == "True":
        return "failed"
    if conditions.get("Suspended") == "True" or not status.get("active"):
        return "stopped"
    return "running"


def owner_uid(pod: JsonObj) -> str:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Job" and ref.get("controller"):
            return str(ref.get("uid", ""))
    return ""


def node_for(store: Store, job: JsonObj, index: int) -> str:
    """A node the template's ``nodeSelector`` allows and whose ``NoSchedule``/``NoExecute``
    taints it tolerates (spread by index), or "" when none."""
    template = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    fits = [
        n["metadata"]["name"]
        for n in store.objects(NODES)
        if _selected(template, n) and _untolerated_taint(template, n) is None
    ]
    return fits[index % len(fits)] if fits else ""


def _selected(pod_spec: JsonObj, node: JsonObj) -> bool:
    labels = node["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in (pod_spec.get("nodeSelector") or {}).items())


def _untolerated_taint(pod_spec: JsonObj, node: JsonObj) -> JsonObj | None:
    """The first taint of ``node`` that keeps the pod off it, as the scheduler's taint filter
    (``PreferNoSchedule`` only scores, it never filters); None: none does."""
    tolerations = pod_spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in FILTERING_EFFECTS and not tolerates(tolerations, taint):
            return dict(taint)
    return None


def unschedulable_message(store: Store, pod_spec: JsonObj) -> str:
    """Why no node takes the pod, in the scheduler's words (``0/2 nodes are available: 1
    node(s) had untolerated taint {virtual-kubelet.io/provider: eci}, ...``)."""
    nodes = store.objects(NODES)
    selected = [n for n in nodes if _selected(pod_spec, n)]
    tainted = [t for t in (_untolerated_taint(pod_spec, n) for n in selected) if t is not None]
    if not tainted:
        return f"0/{len(nodes)} nodes are available: {NOT_SELECTED}."
    reasons = [
        f"{len([t for t in tainted if t == taint])} node(s) had untolerated taint "
        f"{{{taint.get('key')}: {taint.get('value') or ''}}}"
        for taint in _distinct(tainted)
    ]
    if len(selected) < len(nodes):
        reasons.append(f"{len(nodes) - len(selected)} {NOT_SELECTED}")
    return f"0/{len(nodes)} nodes are available: {', '.join(reasons)}."


def _distinct(items: list[JsonObj]) -> list[JsonObj]:
    return [item for i, item in enumerate(items) if item not in items[:i]]


def pod_manifest(job: JsonObj, node: str, index: int | None = None) -> JsonObj:
    """A new pod of ``job`` (status is written afterwards, as the kubelet does); ``index``:
    its completion index in an Indexed Job (label, annotation and name, as the controller)."""
    meta = job["metadata"]
    template = (job.get("spec") or {}).get("template") or {}
    labels = {
        **((template.get("metadata") or {}).get("labels") or {}),
        CONTROLLER_UID_LABEL: meta["uid"],
        JOB_NAME_LABEL: meta["name"],
        "controller-uid": meta["uid"],
        "job-name": meta["name"],
    }
    annotations = dict((template.get("metadata") or {}).get("annotations") or {})
    prefix = f"{meta['name']}-"
    if index is not None:
        labels[COMPLETION_INDEX] = annotations[COMPLETION_INDEX] = str(index)
        prefix = f"{meta['name']}-{index}-"
    spec = dict(template.get("spec") or {})
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": prefix,
            "namespace": meta["namespace"],
            "labels": labels,
            **({"annotations": annotations} if annotations else {}),
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def _container_id(pod: JsonObj, name: str) -> str:
    digest = hashlib.sha256(f"{pod['metadata']['uid']}/{name}".encode()).hexdigest()
    return f"containerd://{digest}"


def pod_status(pod: JsonObj, phase: str, now: str, store: Store) -> JsonObj:
    """The status a kubelet reports for ``pod`` in the job's ``phase``."""
    status: JsonObj = dict(pod.get("status") or {})
    containers = (pod.get("spec") or {}).get("containers") or []
    if not pod["spec"].get("nodeName"):
        return {"phase": "Pending", "conditions": [
            {**_condition("PodScheduled", False, now, "Unschedulable"),
             "message": unschedulable_message(store, pod["spec"])}]}  # fmt: skip
    started = status.get("startTime") or now
    running = phase == "running"
    status.update(
        phase={"running": "Running", "succeeded": "Succeeded"}.get(phase, "Failed"),
        hostIP=status.get("hostIP", "10.0.0.1"),
        podIP=status.get("podIP") or _pod_ip(pod),
        startTime=started,
        qosClass="Burstable",
        conditions=[
            _condition("PodReadyToStartContainers", running, started),
            _condition("Initialized", True, started, "" if running else "PodCompleted"),
            _condition("Ready", running, now, "" if running else "PodCompleted"),
            _condition("ContainersReady", running, now, "" if running else "PodCompleted"),
            _condition("PodScheduled", True, started),
        ],
        containerStatuses=[_container_status(pod, c, phase, started, now) for c in containers],
    )
    return status


def _pod_ip(pod: JsonObj) -> str:
    number = int(hashlib.sha256(pod["metadata"]["uid"].encode()).hexdigest()[:4], 16)
    return f"10.244.{number // 256}.{number % 256}"


def _container_status(pod: JsonObj, container: Any, phase: str, started: str, now: str) -> JsonObj:
    name = str(container.get("name", "")) if isinstance(container, dict) else ""
    image = str(container.get("image", "")) if isinstance(container, dict) else ""
    if phase == "running":
        state: JsonObj = {"running": {"startedAt": started}}
    else:
        code, reason = (0, "Completed") if phase == "succeeded" else (1, "Error")
        ended = {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": now}
        state = {"terminated": {**ended, "containerID": _container_id(pod, name)}}
    return {
        "name": name,
        "image": image,
        "imageID": "",
        "containerID": _container_id(pod, name),
        "ready": phase == "running",
        "started": phase == "running",
        "restartCount": 0,
        "state": state,
    }


def played_status(pod: JsonObj, stage: Stage, fate: PodFate, now: str, store: Store) -> JsonObj:
    """The status a kubelet reports for a pod of a Job with a playbook, at ``stage``: Running
    (ready or not), or Succeeded/Failed with each container's own termination."""
    if not pod["spec"].get("nodeName"):
        return pod_status(pod, "running", now, store)  # unschedulable: Pending, says why
    status: JsonObj = dict(pod.get("status") or {})
    started = status.get("startTime") or now
    ready = stage == Stage.READY
    done = stage in (Stage.SUCCEEDED, Stage.FAILED)
    names = [
        str(c.get("name", "")) for c in pod["spec"].get("containers") or [] if isinstance(c, dict)
    ]
    why = {Stage.STARTING: "ContainersNotReady", Stage.READY: "",
           Stage.SUCCEEDED: "PodCompleted", Stage.FAILED: "PodFailed"}[stage]  # fmt: skip
    unready: JsonObj = {"message": f"containers with unready status: [{' '.join(names)}]"}
    status.update(
        phase={Stage.SUCCEEDED: "Succeeded", Stage.FAILED: "Failed"}.get(stage, "Running"),
        hostIP=status.get("hostIP", "10.0.0.1"),
        podIP=status.get("podIP") or _pod_ip(pod),
        startTime=started,
        qosClass="Burstable",
        conditions=[
            _condition("PodReadyToStartContainers", not done, started),
            _condition("Initialized", True, started, "PodCompleted" if done else ""),
            {**_condition("Ready", ready, now, why), **({} if ready or done else unready)},
            {
                **_condition("ContainersReady", ready, now, why),
                **({} if ready or done else unready),
            },
            _condition("PodScheduled", True, started),
        ],
        containerStatuses=[
            _played_container(pod, c, stage, fate, started, now)
            for c in pod["spec"].get("containers") or []
        ],
    )
    return status


def _played_container(
    pod: JsonObj, container: Any, stage: Stage, fate: PodFate, started: str, now: str
) -> JsonObj:
    name = str(container.get("name", "")) if isinstance(container, dict) else ""
    image = str(container.get("image", "")) if isinstance(container, dict) else ""
    if stage in (Stage.STARTING, Stage.READY):
        state: JsonObj = {"running": {"startedAt": started}}
    else:
        ended = dict(fate.containers).get(name, COMPLETED)
        state = {"terminated": {"exitCode": ended.exit_code, "reason": ended.reason,
                                "startedAt": started, "finishedAt": now,
                                "containerID": _container_id(pod, name)}}  # fmt: skip
    return {
        "name": name,
        "image": image,
        "imageID": "",
        "containerID": _container_id(pod, name),
        "ready": stage == Stage.READY,
        "started": stage in (Stage.STARTING, Stage.READY),
        "restartCount": 0,
        "state": state,
    }


class JobPods:
    """The pods of every Job, indexed by job so that a sync costs the job's pods, not all."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._names: dict[tuple[str, str], list[str]] = {}

    def adopt(self) -> None:
        """Index the Job pods already stored (a kubelet started on an existing store)."""
        self._names.clear()
        for pod in self.store.objects(PODS):
            job = (pod["metadata"].get("labels") or {}).get(JOB_NAME_LABEL)
            if job and owner_uid(pod):
                key = (pod["metadata"]["namespace"], job)
                self._names.setdefault(key, []).append(pod["metadata"]["name"])

    def jobs(self) -> list[tuple[str, str]]:
        """(namespace, name) of every job with pods, gone ones included."""
        return list(self._names)

    def pods_of(self, namespace: str, job_name: str) -> list[JsonObj]:
        """The job's pods that still exist (the stored objects: never mutate them)."""
        names = self._names.get((namespace, job_name), [])
        found = [self.store.find(PODS, namespace, n, shared=True) for n in names]
        pods = [p for p in found if p is not None]
        self._names[(namespace, job_name)] = [p["metadata"]["name"] for p in pods]
        return pods

    def note(self, namespace: str, job_name: str, pod: JsonObj) -> None:
        """Index a pod just created for the job."""
        self._names.setdefault((namespace, job_name), []).append(pod["metadata"]["name"])

    def sync(self, namespace: str, name: str) -> None:
        """Make the job's pods what a cluster shows for the job as it is now (or gone)."""
        job = self.store.find(_JOBS, namespace, name, shared=True)
        pods = self.pods_of(namespace, name)
        if job is None:
            for pod in pods:  # the garbage collector's part
                remove(self.store, pod)
            self._names.pop((namespace, name), None)
            return
        stale = [p for p in pods if owner_uid(p) != job["metadata"]["uid"]]
        for pod in stale:  # a job of the same name deleted and created again
            remove(self.store, pod)
        pods = [p for p in pods if p not in stale]
        phase = job_phase(job)
        if phase == "stopped":
            for pod in pods:
                if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    remove(self.store, pod)
            return
        now = rfc3339(self.store.now())
        if phase == "running":
            wanted = int((job.get("status") or {}).get("active") or 0)
            for index in range(len(pods), wanted):
                node = node_for(self.store, job, index)
                manifest = pod_manifest(job, node)
                pods.append(self.store.create(PODS, namespace, manifest, shared=True))
            self._names[(namespace, name)] = [p["metadata"]["name"] for p in pods]
        for pod in pods:
            _write_status(self.store, pod, phase, now)


def _write_status(store: Store, pod: JsonObj, phase: str, now: str) -> None:
    current = (pod.get("status") or {}).get("phase")
    if not pod["spec"].get("nodeName") and (pod.get("status") or {}).get("conditions"):
        return  # unschedulable, and already says so
    settled = {"running": "Running", "succeeded": "Succeeded", "failed": "Failed"}[phase]
    if current == settled or current in ("Succeeded", "Failed"):
        return  # nothing to change; a finished pod stays as it ended
    body = {**pod, "status": pod_status(pod, phase, now, store)}
    meta = pod["metadata"]
    try:
        store.update(PODS, meta["namespace"], meta["name"], body, subresource="status", shared=True)
    except ApiError:
        return  # changed or deleted meanwhile: the next sync sees it


def remove(store: Store, pod: JsonObj) -> None:
    try:
        store.delete(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], shared=True)
    except ApiError:
        return


_JOBS = next(rt for rt in RESOURCES if rt.storage_key == ("batch", "jobs"))
