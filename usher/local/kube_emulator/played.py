"""The Job controller of the emulator for Jobs with a playbook: status counted from pods.

What it does: for a batch Job carrying ``emulator.usher.io/*`` annotations (``playbook``), plays
what the Job controller and the kubelets of a cluster do, one pod at a time: creates the pods the
Job wants (``min(parallelism, remaining completions)``, one per pending completion index for an
Indexed Job, a replacement for a failed one while ``spec.backoffLimit`` allows), moves each
through its fate (Running not ready, Running ready, Succeeded or Failed with its containers'
``state.terminated``), and writes the Job's status from them as the Job controller of Kubernetes
1.32 does: ``active``, ``ready``, ``succeeded``, ``failed``, ``completedIndexes``; ``Complete``
(with ``SuccessCriteriaMet``) once the completions are reached or a rule of
``spec.successPolicy`` (Indexed Jobs) is met, ``Failed`` (with ``FailureTarget``) once more pods
failed than ``spec.backoffLimit``; then, as in a cluster, the pods still running are removed.
A suspended Job has its running pods removed (finished ones stay) and says ``Suspended``.
What it must never do: touch a Job's spec or metadata, a Job without a playbook (the fake
kubelet's whole-job timing keeps those), write what does not change (no event storms), or
mutate a Job or pod it was handed (the stored objects themselves).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from usher.core.kinds.family import condition_true, set_condition, status_copy
from usher.local.kube_emulator.errors import ApiError
from usher.local.kube_emulator.playbook import PREFIX, Playbook, PodFate, Stage, fate, playbook
from usher.local.kube_emulator.pods import (
    COMPLETION_INDEX,
    PODS,
    JobPods,
    node_for,
    owner_uid,
    played_status,
    pod_manifest,
    remove,
)
from usher.local.kube_emulator.resources import RESOURCES
from usher.local.kube_emulator.store import Store
from usher.local.kube_emulator.wire import JsonObj, rfc3339

JOBS = next(rt for rt in RESOURCES if rt.storage_key == ("batch", "jobs"))
ORDINAL = f"{PREFIX}pod-ordinal"
"""Which pod of its Job a pod is (NonIndexed Jobs): which duration of the playbook it runs."""
DEFAULT_BACKOFF_LIMIT = 6
TERMINAL = ("Succeeded", "Failed")
EARLY_WAKE_S = 0.001
"""Timers fire a hair late rather than early: a pod then always moved on when looked at."""


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def parse_indexes(text: object) -> set[int]:
    """``"0,2-3"`` (Kubernetes' index intervals) to ``{0, 2, 3}``; what does not parse counts
    for nothing (the API server refuses it in a real cluster)."""
    out: set[int] = set()
    for part in str(text or "").split(","):
        low, _, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            continue
        out.update(range(first, last + 1))
    return out


def format_indexes(indexes: set[int]) -> str:
    """``{0, 2, 3}`` to ``"0,2-3"``, as ``status.completedIndexes`` writes them."""
    runs: list[str] = []
    for index in sorted(indexes):
        if runs and index - 1 in indexes:
            first = runs[-1].split("-")[0]
            runs[-1] = f"{first}-{index}"
        else:
            runs.append(str(index))
    return ",".join(runs)


def success_rule_met(spec: JsonObj, succeeded: set[int]) -> int | None:
    """The index of the first ``spec.successPolicy`` rule the succeeded indexes meet."""
    rules = (spec.get("successPolicy") or {}).get("rules") or []
    for number, rule in enumerate(rules):
        if not isinstance(rule, dict):
            continue
        wanted = parse_indexes(rule["succeededIndexes"]) if "succeededIndexes" in rule else None
        done = succeeded & wanted if wanted is not None else succeeded
        count = rule.get("succeededCount")
        if isinstance(count, int) and count > 0:
            if len(done) >= count:
                return number
        elif wanted is not None and wanted <= succeeded:
            return number
    return None


@dataclass
class Tally:
    """What the Job's pods did, as the Job controller counts them."""

    active: int = 0
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    succeeded_indexes: set[int] = field(default_factory=set)
    live_indexes: set[int] = field(default_factory=set)
    ordinals: set[int] = field(default_factory=set)
    wake: float | None = None
    """Seconds (at playbook speed) until a live pod moves on."""


class PlayedJobs:
    """Plays the Jobs that carry a playbook; the fake kubelet calls it on every change."""

    def __init__(self, store: Store, pods: JobPods, *, speed: float = 1.0) -> None:
        self.store = store
        self.pods = pods
        self.speed = speed
        self._started: dict[str, datetime] = {}
        """When each pod (by uid) started, as this controller saw it."""

    @staticmethod
    def plays(job: JsonObj) -> bool:
        return playbook(job) is not None

    def play(self, job: JsonObj) -> float | None:
        """Bring the Job's pods and status one step on; seconds until it must be played again
        (None: nothing will change by itself)."""
        book = playbook(job)
        assert book is not None
        meta, spec = job["metadata"], job.get("spec") or {}
        pods = self.pods.pods_of(meta["namespace"], meta["name"])
        for pod in [p for p in pods if owner_uid(p) != meta["uid"]]:
            remove(self.store, pod)  # of a Job of the same name deleted before
        pods = [p for p in pods if owner_uid(p) == meta["uid"]]
        status = job.get("status") or {}
        live = [p for p in pods if (p.get("status") or {}).get("phase") not in TERMINAL]
        if condition_true(status, "Complete") or condition_true(status, "Failed"):
            self._remove(live)
            return None
        now = self.store.now()
        if spec.get("suspend") is True:
            self._remove(live)
            self._write(job, self._suspended(job, rfc3339(now)))
            return None
        tally = self._advance(job, book, pods, now)
        verdict = self._verdict(job, tally)
        if verdict is None:
            self._create(job, book, tally, now)
        else:
            self._remove(
                [
                    p
                    for p in self.pods.pods_of(meta["namespace"], meta["name"])
                    if (p.get("status") or {}).get("phase") not in TERMINAL
                ]
            )
            tally.active = tally.ready = 0
            tally.wake = None
        self._write(job, self._status(job, tally, verdict, rfc3339(now)))
        return None if tally.wake is None else tally.wake / self.speed + EARLY_WAKE_S

    # ------------------------------------------------------------------ the pods

    def _elapsed(self, pod: JsonObj, now: datetime) -> float:
        """Seconds (at playbook speed) since the pod started."""
        uid = pod["metadata"]["uid"]
        started = self._started.get(uid)
        if started is None:  # created before this controller ran: its creation time
            created = pod["metadata"].get("creationTimestamp") or rfc3339(now)
            started = datetime.fromisoformat(created)
            self._started[uid] = started
        return max((now - started).total_seconds(), 0.0) * self.speed

    def _fate(self, job: JsonObj, book: Playbook, pod: JsonObj) -> PodFate:
        containers = (pod.get("spec") or {}).get("containers") or []
        return fate(book, containers, _ordinal(pod))

    def _advance(self, job: JsonObj, book: Playbook, pods: list[JsonObj], now: datetime) -> Tally:
        """Move every live pod to where its fate has it now; count them all."""
        tally = Tally()
        for pod in pods:
            phase = (pod.get("status") or {}).get("phase")
            if phase not in TERMINAL:
                pod_fate = self._fate(job, book, pod)
                elapsed = self._elapsed(pod, now)
                stage = pod_fate.stage(elapsed) if pod["spec"].get("nodeName") else Stage.STARTING
                self._show(pod, stage, pod_fate, now)
                phase = {Stage.SUCCEEDED: "Succeeded", Stage.FAILED: "Failed"}.get(stage, phase)
                if pod["spec"].get("nodeName"):
                    step = pod_fate.next_change(elapsed)
                    if step is not None:
                        tally.wake = step if tally.wake is None else min(tally.wake, step)
                if stage == Stage.READY:
                    tally.ready += 1
            self._count(tally, pod, phase)
        return tally

    @staticmethod
    def _count(tally: Tally, pod: JsonObj, phase: object) -> None:
        index = _index(pod)
        tally.ordinals.add(_ordinal(pod))
        if phase == "Succeeded":
            tally.succeeded += 1
            if index is not None:
                tally.succeeded_indexes.add(index)
        elif phase == "Failed":
            tally.failed += 1
        else:
            tally.active += 1
            if index is not None:
                tally.live_indexes.add(index)

    def _show(self, pod: JsonObj, stage: Stage, pod_fate: PodFate, now: datetime) -> None:
        """Write the pod's status when its stage changed (the kubelet's status update)."""
        body = {**pod, "status": played_status(pod, stage, pod_fate, rfc3339(now), self.store)}
        if _same_stage(pod.get("status") or {}, body["status"]):
            return
        meta = pod["metadata"]
        try:
            self.store.update(
                PODS, meta["namespace"], meta["name"], body, subresource="status", shared=True
            )
        except ApiError:
            return  # deleted meanwhile: the next play sees it

    def _create(self, job: JsonObj, book: Playbook, tally: Tally, now: datetime) -> None:
        """The pods the Job wants and does not have (never past its backoff limit)."""
        spec = job.get("spec") or {}
        meta = job["metadata"]
        parallelism = _int(spec.get("parallelism"), 1)
        completions = spec.get("completions")
        room = parallelism - tally.active
        if spec.get("completionMode") == "Indexed" and isinstance(completions, int):
            done = tally.succeeded_indexes | tally.live_indexes
            pending: list[int | None] = [i for i in range(completions) if i not in done]
            slots = pending[:room]
        else:
            left = completions - tally.succeeded if isinstance(completions, int) else room
            slots = [None] * max(min(room, left - tally.active), 0)
        ordinal = max(tally.ordinals, default=-1) + 1
        for index in slots:
            node = node_for(self.store, job, tally.active)
            manifest = pod_manifest(job, node, index)
            if index is None:
                manifest["metadata"].setdefault("annotations", {})[ORDINAL] = str(ordinal)
                ordinal += 1
            pod = self.store.create(PODS, meta["namespace"], manifest, shared=True)
            self.pods.note(meta["namespace"], meta["name"], pod)
            self._started[pod["metadata"]["uid"]] = now
            pod_fate = self._fate(job, book, pod)
            stage = pod_fate.stage(0.0) if node else Stage.STARTING
            self._show(pod, stage, pod_fate, now)
            self._count(
                tally, pod, {Stage.SUCCEEDED: "Succeeded", Stage.FAILED: "Failed"}.get(stage)
            )
            tally.ready += stage == Stage.READY
            step = pod_fate.next_change(0.0) if node else None
            if step is not None:
                tally.wake = step if tally.wake is None else min(tally.wake, step)

    def _remove(self, pods: list[JsonObj]) -> None:
        for pod in pods:
            remove(self.store, pod)
            self._started.pop(pod["metadata"]["uid"], None)

    # ------------------------------------------------------------------ the Job's status

    @staticmethod
    def _verdict(job: JsonObj, tally: Tally) -> tuple[bool, str, str] | None:
        """``(succeeded, reason, message)`` once the Job has ended, else None."""
        spec = job.get("spec") or {}
        if tally.failed > _int(spec.get("backoffLimit"), DEFAULT_BACKOFF_LIMIT):
            return False, "BackoffLimitExceeded", "Job has reached the specified backoff limit"
        completions = spec.get("completions")
        if spec.get("completionMode") == "Indexed":
            rule = success_rule_met(spec, tally.succeeded_indexes)
            if rule is not None:
                return True, "SuccessPolicy", f"Matched rules at index {rule}"
            reached = isinstance(completions, int) and len(tally.succeeded_indexes) >= completions
        elif isinstance(completions, int):
            reached = tally.succeeded >= completions
        else:  # a work queue: done once one pod succeeded and none runs any more
            reached = tally.succeeded > 0 and tally.active == 0
        if reached:
            return True, "CompletionsReached", "Reached expected number of succeeded pods"
        return None

    @staticmethod
    def _status(
        job: JsonObj, tally: Tally, verdict: tuple[bool, str, str] | None, now: str
    ) -> JsonObj:
        status = status_copy(job)
        resumed = set_condition(
            status, "Suspended", False, "JobResumed", "Job resumed", now, only_if_present=True
        )
        if resumed or not status.get("startTime"):
            status["startTime"] = now
        _set_count(status, "active", tally.active)  # int32 omitempty, as the server shows them
        status["ready"] = tally.ready
        _set_count(status, "succeeded", tally.succeeded)
        _set_count(status, "failed", tally.failed)
        status.setdefault("uncountedTerminatedPods", {})
        if (job.get("spec") or {}).get("completionMode") == "Indexed":
            status["completedIndexes"] = format_indexes(tally.succeeded_indexes)
        if verdict is not None:
            succeeded, reason, message = verdict
            kinds = ("SuccessCriteriaMet", "Complete") if succeeded else ("FailureTarget", "Failed")
            for kind in kinds:
                set_condition(status, kind, True, reason, message, now)
            if succeeded:
                status["completionTime"] = now
        return status

    @staticmethod
    def _suspended(job: JsonObj, now: str) -> JsonObj:
        status = status_copy(job)
        status.pop("active", None)
        status["ready"] = 0
        set_condition(status, "Suspended", True, "JobSuspended", "Job suspended", now)
        return status

    def _write(self, job: JsonObj, status: JsonObj) -> None:
        if status == (job.get("status") or {}):
            return
        meta = job["metadata"]
        body = {**job, "status": status}
        try:
            self.store.update(
                JOBS, meta["namespace"], meta["name"], body, subresource="status", shared=True
            )
        except ApiError:
            return  # changed or deleted meanwhile: the change feed brings it back


def _set_count(status: JsonObj, name: str, value: int) -> None:
    if value > 0:
        status[name] = value
    else:
        status.pop(name, None)


def _index(pod: JsonObj) -> int | None:
    raw = (pod["metadata"].get("labels") or {}).get(COMPLETION_INDEX)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _ordinal(pod: JsonObj) -> int:
    index = _index(pod)
    if index is not None:
        return index
    try:
        return int((pod["metadata"].get("annotations") or {}).get(ORDINAL, "0"))
    except ValueError:
        return 0


def _same_stage(before: JsonObj, after: JsonObj) -> bool:
    """Whether a pod already shows ``after``'s phase, readiness and conditions (times aside)."""

    def seen(status: JsonObj) -> tuple[object, ...]:
        ready = [c.get("ready") for c in status.get("containerStatuses") or []]
        conditions = [(c.get("type"), c.get("status")) for c in status.get("conditions") or []]
        return status.get("phase"), ready, conditions

    return seen(before) == seen(after)
