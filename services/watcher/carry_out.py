"""Carry out decisions: admit (unsuspend, pin to the zone), preempt (suspend), create retries.

What it does: a durable JetStream pull consumer (``<prefix>-watcher``) on ``<prefix>.decision.>`` of
the log, explicit acks. Messages are handled one after the other, in stream order. For an
``Admitted`` decision the workload's suspend field becomes false and every pod template gets the
node selector ``usher.io/zone: <zone>`` (and, in a burst zone of the tree in force, the
zone's tolerations, Z3), in one merge patch guarded by the resourceVersion; for
``Preempted`` and ``Requeued`` (R10) the suspend field becomes true; for a ``Retried`` naming a
next attempt (R12) that attempt is created from the failed job (``usher.core.rules.retry``; it
exists
already after a redelivery: that is success). A message is acked only once
its patch succeeded or there was nothing to do: the workload is gone, finished, already in the
wanted state, or the decision is stale (a later decision about it, or a newer incarnation of the
name, is on the log). The patch is made from the job's last object as its watch showed it
(``services.watcher.objects``), not read first; a conflict on that copy (it was behind), or a
copy saying there is nothing to do, is settled with a GET at once.
Conflicts and transient API errors are retried in place with backoff (so order
is kept); a message that does not decode, or a patch the server refuses for good, is parked on the
DLQ and acked. Only the ledger admits and preempts: a ledger decision (``Admitted``, ``Preempted``,
``Released``) whose subject names another action, workload or zone, or whose source is not the
ledger, is forged, and so is a ``Retried`` not from its zone's dequeuer on its subject
(``Subjects.owner_problem``): it is logged, parked with the precise
reason (``ForgedDecision``) and acked, never carried out. Other decisions (``Released``,
``Pending``...) need no Kubernetes change and are acked as they come. What people care about is
also told as a Kubernetes Event on the job (``services.watcher.notify``): an admission, a
preemption or requeue it carried out, a retry it created or a job given up, an
``Inadmissible`` (once per reason); recorded beside the carrying out, best effort.
What it must never do: ack before the patch, patch a finished or deleted workload, carry out a
stale or forged decision, stop on one bad message, or wait on an Event.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from schemas import (
    Admitted,
    Envelope,
    EventId,
    Inadmissible,
    Preempted,
    Requeued,
    Retried,
    WorkloadObserved,
    decode_envelope,
    object_name,
)
from services.common.runtime import ServiceContext, wait_or_stop
from services.watcher.deliveries import WebhookDeliveries
from services.watcher.fleet import here
from services.watcher.kinds import EVENTS, JOB_FAMILIES, JobFamily, admit_patch, suspend_patch
from services.watcher.notify import Told, cloud_event, decision_event
from services.watcher.observe import SOURCE, ClusterView
from services.watcher.options import WatcherOptions, retrying
from services.watcher.projection import WatcherProjection
from services.watcher.translate import workload_event
from usher.adapters.kube import (
    AlreadyExists,
    Conflict,
    JsonObj,
    KubeClient,
    KubeError,
    NotFound,
    Resource,
    Transient,
)
from usher.adapters.nats.log import publish_envelope
from usher.adapters.nats.permissions import watcher_name
from usher.adapters.nats.subjects import Subjects
from usher.core.rules.retry import retry_manifest
from usher.core.tree.burst_tolerations import Toleration
from usher.core.tree.zone_burst import zone_tolerations

Result = Literal["patched", "created", "gone", "finished", "already", "stale", "ignored"]
RETRY_TOLD: tuple[Result, ...] = ("created", "ignored")
"""A ``Retried`` is told once its next attempt is created, or when there is none (gave up)."""
MAX_TELLING = 256
"""Events recorded at once at most; past that (the API too slow) one is dropped and logged."""


def consumer_name(subjects: Subjects) -> str:
    """The durable consumer of the watcher's decisions: one per installation, and one per
    cluster other than the default one (M1: ``permissions.watcher_name``)."""
    return f"{subjects.prefix}-{watcher_name(here())}".replace(".", "_")


class Stopping(Exception):
    """The service was asked to stop while a decision was still being retried."""


class ForgedDecision(Exception):
    """A message claims to be a ledger decision but is not one (permanent: never retried)."""

    def __init__(self, subject: str, decision: str, reason: str) -> None:
        super().__init__(reason)
        self.subject = subject
        self.decision = decision
        self.reason = reason


class DecisionRunner:
    """Consumes decisions from the log and makes Kubernetes follow them."""

    def __init__(
        self,
        ctx: ServiceContext,
        kube: KubeClient,
        view: WatcherProjection,
        cluster: ClusterView,
        options: WatcherOptions,
        deliveries: WebhookDeliveries | None = None,
    ) -> None:
        self.ctx = ctx
        self.deliveries = deliveries
        """Where each recorded Event also goes as a CloudEvent (``USHER_NOTIFY_URL``)."""
        self.kube = kube
        self.view = view
        self.cluster = cluster
        self.options = options
        self._carried: dict[str, int] = {}
        """Stream sequence of the last decision carried out per workload (this process)."""
        self._families = {family.storage: family for family in JOB_FAMILIES}
        self._telling: set[asyncio.Task[None]] = set()
        """Events being recorded (``notify``): beside the carrying out, never in its way."""
        self._told_inadmissible: set[tuple[str, str]] = set()
        """(workload, reason code) of the Inadmissible Events recorded by this process."""

    async def run(self) -> None:
        """Consume until the service stops."""
        subscription = await self._subscribe()
        self.ctx.log.info("carrying out decisions", consumer=consumer_name(self.ctx.subjects))
        try:
            while not self.ctx.stop.is_set():
                lanes = _lanes(await self._fetch(subscription))
                # Decisions about different workloads are independent: carry them out side by
                # side (one PATCH at a time capped the whole system near 100 jobs/s). Each
                # workload's own decisions stay in stream order within its lane.
                await asyncio.gather(*(self._run_lane(lane) for lane in lanes))
        finally:
            with contextlib.suppress(nats.errors.Error):
                await subscription.unsubscribe()
            for task in self._telling:
                task.cancel()

    async def _run_lane(self, lane: list[Msg]) -> None:
        for msg in lane:
            if self.ctx.stop.is_set():
                await _quietly(msg.nak())  # redelivered at once on the next start
                continue
            await self.handle(msg)

    async def _subscribe(self) -> Any:
        subjects = self.ctx.subjects
        config = ConsumerConfig(
            ack_policy=AckPolicy.EXPLICIT,
            # Everything from the start on first creation: a decision made before the first
            # watcher ever ran must still be carried out (stale ones are skipped).
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=self.options.ack_wait_s,
            max_deliver=-1,
            max_ack_pending=max(self.options.fetch_batch * 4, 256),
        )

        async def subscribe() -> Any:
            return await self.ctx.js.pull_subscribe(
                subjects.all_decisions,
                durable=consumer_name(subjects),
                stream=subjects.stream_name,
                config=config,
            )

        return await retrying(subscribe, "subscribing to decisions", self.ctx.log, self.options)

    async def _fetch(self, subscription: Any) -> list[Msg]:
        try:
            batch: list[Msg] = await subscription.fetch(
                self.options.fetch_batch, timeout=self.options.fetch_timeout_s
            )
        except TimeoutError:
            # Nothing to fetch (nats-py raises its own or asyncio's timeout for that).
            return []
        except nats.errors.Error as exc:
            # NATS is reconnecting: wait a moment instead of spinning.
            self.ctx.log.warning("decision fetch failed", error=type(exc).__name__)
            await wait_or_stop(self.ctx.stop, self.options.backoff_base_s)
            return []
        return batch

    # ------------------------------------------------------------------ one message

    async def handle(self, msg: Msg) -> None:
        """Carry out one decision message and settle it (ack, or nak when stopping)."""
        seq = int(msg.metadata.sequence.stream)
        try:
            envelope = decode_envelope(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            await self.ctx.park(msg.subject, msg.data, exc, stream_seq=seq)
            await _quietly(msg.ack())
            return
        decision = envelope.event
        problem = self.ctx.subjects.owner_problem(msg.subject, envelope)
        if problem is not None:
            forged = ForgedDecision(msg.subject, type(decision).__name__, problem)
            self.ctx.metrics.forged_decisions.labels(forged.decision).inc()
            self.ctx.log.warning(
                "forged decision ignored", subject=msg.subject, decision=forged.decision,
                source=envelope.source, reason=problem, seq=seq,
            )  # fmt: skip
            await self.ctx.park(msg.subject, msg.data, forged, problem, seq)
            await _quietly(msg.ack())
            return
        if isinstance(decision, Inadmissible) and not self.view.stale(decision.workload, seq):
            told = (decision.workload, decision.reason.code)
            if told not in self._told_inadmissible:
                self._told_inadmissible.add(told)
                self._tell(decision, seq)
        if not isinstance(decision, Admitted | Preempted | Requeued | Retried):
            await _quietly(msg.ack())
            return
        log = self.ctx.log.bind(
            workload=decision.workload, decision=type(decision).__name__, seq=seq,
            quota=decision.quota, queue=decision.queue,
        )  # fmt: skip
        try:
            result = await self._carry_out_with_retries(decision, seq, msg, log)
        except Stopping:
            await _quietly(msg.nak())
            return
        except KubeError as exc:
            await self.ctx.park(msg.subject, msg.data, exc, exc.message, seq)
            await _quietly(msg.ack())
            return
        self._carried[decision.workload] = max(seq, self._carried.get(decision.workload, 0))
        await _quietly(msg.ack())
        log.info("decision carried out", result=result)
        if result == "patched" or (isinstance(decision, Retried) and result in RETRY_TOLD):
            self._tell(decision, seq)

    def _tell(self, decision: Told, seq: int) -> None:
        """Record ``decision`` as an Event on its job, beside the carrying out (best effort:
        a refused or lost Event is logged, never retried, and holds nothing up)."""
        if len(self._telling) >= MAX_TELLING:
            self.ctx.log.warning(
                "event dropped: too many being recorded", workload=decision.workload
            )
            return
        task = asyncio.create_task(self._record(decision, seq))
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)

    async def _record(self, decision: Told, seq: int) -> None:
        resource = self.cluster.workloads.get(decision.workload)
        if resource is None:
            return
        namespace, name = object_name(decision.workload)
        try:
            # Who the job is and when it was made: the watch's copy says it as well as a GET.
            obj = self.cluster.objects.get(decision.workload, resource) or await self.kube.get(
                resource, namespace, name
            )
            event = decision_event(decision, obj, datetime.now(UTC))
            if self.deliveries is not None:
                event_id = f"{self.ctx.subjects.prefix}-{seq}"
                self.deliveries.offer(cloud_event(event, decision, event_id))
            await self.kube.create(EVENTS, namespace, event)
        except KubeError as exc:
            self.ctx.log.warning(
                "event not recorded", workload=decision.workload, error=type(exc).__name__,
                detail=exc.message,
            )  # fmt: skip

    async def _carry_out_with_retries(
        self, decision: Admitted | Preempted | Requeued | Retried, seq: int, msg: Msg, log: Any
    ) -> Result:
        backoff = self.options.backoff()
        while True:
            try:
                if isinstance(decision, Retried):
                    return await self.create_retry(decision)
                return await self.carry_out(decision, seq)
            except (Conflict, Transient) as exc:
                # Retried here rather than nak'ed: a redelivery could overtake later decisions.
                delay = backoff.next_delay()
                log.warning(
                    "patch failed, retrying", error=type(exc).__name__, detail=exc.message,
                    retry_in_s=round(delay, 2),
                )  # fmt: skip
                await _quietly(msg.in_progress())
                if await wait_or_stop(self.ctx.stop, delay):
                    raise Stopping() from exc

    async def carry_out(self, decision: Admitted | Preempted | Requeued, seq: int) -> Result:
        """Make the workload follow ``decision``; what was done (or why nothing was)."""
        key = decision.workload
        if self.view.stale(key, seq) or self._carried.get(key, 0) > seq:
            return "stale"
        resource = self.cluster.workloads.get(key)
        if resource is None:
            return "gone"
        self.view.note_decision(decision, seq)
        objects = self.cluster.objects
        try:
            # The watch's copy first (no GET); when it is behind (409) or says there is
            # nothing to do, the server's copy decides.
            cached = objects.get(key, resource)
            if cached is not None:
                with contextlib.suppress(Conflict):
                    result = await self._follow(decision, seq, resource, cached, confirmed=False)
                    if result is not None:
                        return result
                objects.drop(key)
            namespace, name = object_name(key)
            obj = await self.kube.get(resource, namespace, name)
            return await self._follow(decision, seq, resource, obj, confirmed=True) or "already"
        except Conflict:
            objects.drop(key)
            raise
        except NotFound:
            objects.drop(key)
            return "gone"

    async def _follow(
        self,
        decision: Admitted | Preempted | Requeued,
        seq: int,
        resource: Resource,
        obj: JsonObj,
        *,
        confirmed: bool,
    ) -> Result | None:
        """Patch ``obj`` (guarded by its resourceVersion) to follow ``decision``; None when
        there is nothing to do but ``obj`` is not ``confirmed`` by a read of the server."""
        family = self._families[resource.storage]
        if family.outcome(obj) is not None:
            return "finished" if confirmed else None
        patch = _patch_for(decision, family, obj, self._tolerations(decision))
        if patch is None:
            if not confirmed:
                return None
            if isinstance(decision, Preempted | Requeued):
                await self._confirm_stopped(resource, family, obj, seq)
            return "already"
        namespace, name = object_name(decision.workload)
        patched = await self.kube.merge_patch(resource, namespace, name, patch)
        self.cluster.objects.put(decision.workload, resource, patched)
        return "patched"

    def _tolerations(self, decision: Admitted | Preempted | Requeued) -> tuple[Toleration, ...]:
        """What the pods of an admission into a burst zone of the tree in force tolerate."""
        if not isinstance(decision, Admitted) or self.view.tree is None:
            return ()
        return zone_tolerations(self.view.tree.attributes, decision.zone)

    async def create_retry(self, decision: Retried) -> Result:
        """Create the next attempt a ``Retried`` names (R12): the failed job's manifest,
        renamed, suspended, linked to its first attempt, its memory resized (R13). Created
        once: a redelivery after a restart finds it there (AlreadyExists is success)."""
        if decision.job is None:
            return "ignored"  # no further attempt: nothing to create
        resource = self.cluster.workloads.get(decision.workload)
        if resource is None:
            return "gone"
        family = self._families[resource.storage]
        namespace, name = object_name(decision.workload)
        try:
            failed = await self.kube.get(resource, namespace, name)
            body = retry_manifest(failed, decision, family)
            await self.kube.create(resource, namespace, body)
        except NotFound:
            return "gone"
        except AlreadyExists:
            return "already"
        return "created"

    async def _confirm_stopped(
        self, resource: Resource, family: JobFamily, obj: dict[str, Any], seq: int
    ) -> None:
        """A victim that was already stopped when its preemption arrived: say so again.

        The ledger releases a victim on a suspended observation that follows the preemption
        on the log. When the job never ran (it was preempted before its admission was carried
        out), nothing about it changes, so no observation would follow and the preemptor's
        hold would wait forever. This one is tied to the decision's sequence, so it is
        published once per preemption, whatever the dedup of unchanged observations says.
        """
        out = workload_event(resource, family, obj, self.ctx.subjects)
        if not isinstance(out.event, WorkloadObserved) or not out.event.suspended:
            return  # pods still running: the observation of their end will follow
        envelope = Envelope(
            id=EventId(f"{out.id}:after-preemption:{seq}"),
            time=datetime.now(UTC),
            source=SOURCE,
            event=out.event,
        )
        await publish_envelope(self.ctx.js, out.subject, envelope)


def _lanes(batch: list[Msg]) -> list[list[Msg]]:
    """Split a batch by workload (the subject ends in ``<namespace>.<name>``), order kept."""
    lanes: dict[tuple[str, ...], list[Msg]] = {}
    for msg in batch:
        lanes.setdefault(tuple(msg.subject.split(".")[-2:]), []).append(msg)
    return list(lanes.values())


def _patch_for(
    decision: Admitted | Preempted | Requeued,
    family: JobFamily,
    obj: dict[str, Any],
    tolerations: tuple[Toleration, ...],
) -> dict[str, Any] | None:
    if isinstance(decision, Admitted):
        return admit_patch(
            family, obj, decision.zone, decision.pod_counts, tolerations, decision.topology
        )
    return suspend_patch(family, obj)


async def _quietly(settle: Any) -> None:
    """Ack/nak/progress: if NATS is down the message is simply redelivered later."""
    with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
        await settle
