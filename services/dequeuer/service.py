"""The dequeuer of one zone (DESIGN: "queue order, Round/Block, zone capacity").

What it does: rebuilds the pure engine from its latest snapshot plus the tail of the log (or
by replaying the whole log), then follows it, saving snapshots now and then; after
each batch of entries that arrived together (and at min-runtime wakeups) it runs one decision
pass of the core. The pass's admissions become one ``ReserveRequest`` to the ledger, its
reclaims one ``PreemptRequest`` per preemptor to the preemptor service, its requeues for
readiness (R10) one ``RequeueRequest`` to the ledger; refused admissions and reclaims are
reverted in the engine with the ledger's reason (a refused requeue needs no revert: the
ledger refuses only a workload that already ended or was preempted, which the log brings).
Inadmissible and unmapped workloads of its zone are
announced on the log, and so is what follows each failed attempt of a job with retries
(``Retried``, R12: it moves no quota, so this dequeuer owns it), and the zone itself at start
(``ZoneServed``: people's views and ``usher submit --zone`` learn from it which zones have a
dequeuer), and each pass that proposed something (``PassRan``: the log sequence it had applied
and its ``now``, before its requests, so that ``usher audit`` re-runs it exactly, D4).
High availability: several replicas of one zone's dequeuer may run; they elect a leader
(``services.common.leader``, key ``dequeuer-<zone>``). Every replica follows the log (a warm
standby takes over within about the TTL); only the leader runs passes and saves snapshots.
A leader that loses its key stops deciding at once and ends the process with
``LeadershipLost`` (its engine holds its own passes' admissions, which a standby's must not),
so the orchestrator restarts it as a fresh standby.
Metrics: pass duration, admission wait (creation or first observation to granted
reservation; first admission only, for workloads observed by this process or its snapshot's
successor), preemptions by reason, per-queue and per-quota-node gauges, consumer lag.
What it must never do: write PostgreSQL or Kubernetes, publish an ``Admitted`` or
``Preempted`` itself (only the ledger's outbox does, so a workload is admitted once), decide
for another zone, or decide before the replay has caught up with the log.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time

from schemas import (
    DEQUEUER_SOURCE,
    Admitted,
    Envelope,
    EventId,
    Inadmissible,
    Millis,
    PassRan,
    Preempted,
    PreemptRequest,
    Reason,
    RequestId,
    Requeued,
    RequeueRequest,
    Reservation,
    ReserveRequest,
    Retried,
    Unmapped,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    WorkloadProgress,
    Zone,
    ZoneServed,
)
from services.common.leader import Leadership, LeadershipLost
from services.common.metrics import Sampler, record_admission, record_engine, record_usage
from services.common.projection import Projection
from services.common.requests import PermanentReplyError, Stopping, ask
from services.common.retry import Backoff, retrying
from services.common.runtime import ServiceContext, to_utc, wall_ms
from services.common.snapshots import EngineSnapshots
from usher.adapters.nats.follower import LogFollower, stream_last_seq
from usher.adapters.nats.log import publish_envelope
from usher.core.engine.facade import Engine
from usher.core.engine.pass_plan import plan_pass
from usher.core.history.usage import UsageMeter, held_now
from usher.core.model import reasons
from usher.core.protocol.log import BadEntry, LogEntry

SOURCE = DEQUEUER_SOURCE
RETRY_FIRST_S = 0.2
RETRY_MAX_S = 5.0


def reservation_of(decision: Admitted, preempting: list[WorkloadKey] | None = None) -> Reservation:
    return Reservation(
        workload=decision.workload,
        queue=decision.queue,
        quota=decision.quota,
        zone=decision.zone,
        requests=decision.requests,
        priority=decision.priority,
        preempting=preempting or [],
        pod_counts=decision.pod_counts,
        reason=decision.reason,
        topology=decision.topology,
    )


class Dequeuer:
    """One zone's decision loop over a projection of the log."""

    def __init__(self, ctx: ServiceContext, zone: Zone) -> None:
        self.ctx = ctx
        self.zone = zone
        self.snapshots = EngineSnapshots(ctx, f"dequeuer-{zone}", ctx.settings.engine)
        # Until ``run`` opens the latest snapshot (or starts a full replay).
        self.engine = Engine(ctx.settings.engine)
        self.projection = Projection(self.engine)
        self.follower = LogFollower(ctx.js, ctx.subjects, start_seq=1)
        self._ids = itertools.count(1)
        self._instance = f"{zone}-{os.getpid()}-{wall_ms()}"
        self.passes = 0
        self._replayed = False
        self.metrics = ctx.metrics
        self.leader = Leadership(ctx, f"dequeuer-{zone}", on_change=self._leadership_changed)
        self._led = False
        """Whether this process decided at least once (only then may it save snapshots)."""
        self._seen: dict[WorkloadKey, int] = {}
        """Creation (or first observation) time of this zone's workloads not admitted yet."""
        self._gauges_at = 0.0
        self.usage = UsageMeter(counted_ms=wall_ms())
        """Usage accrued since the last sample, for the usage counters (U1)."""
        self._retry_in_s: float | None = None
        """Backoff before a pass retries refused work; ``None`` when nothing was refused."""
        self._retry_at = 0.0

    def _leadership_changed(self, leader: bool) -> None:
        if leader:
            # A standby's loop waits for entries: make it run its first pass now.
            self.follower.wake()

    async def run(self) -> None:
        # Campaign first: a standby then replays meanwhile instead of after.
        await self.leader.start()
        halt = asyncio.Event()
        watch = asyncio.ensure_future(self._halt_on_stop_or_loss(halt))
        sampler = Sampler(self._sample, self.ctx.log)
        consistent = True
        try:
            self.projection = await self.snapshots.open()
            self.engine = self.projection.engine
            # What ran before the snapshot's end is open in its engine, not on the tail.
            self.usage.seed(held_now(self.engine))
            self.follower = self.snapshots.follower(self.projection)
            await self.follower.start()
            sampler.start()
            self.ctx.ready.set()
            self.ctx.log.info(
                "replaying the log",
                from_seq=self.projection.applied_seq + 1,
                target_seq=self.follower.replay_target,
            )
            settle = self.ctx.settings.settle_ms / 1000
            if self.follower.caught_up:
                # The snapshot covers the whole log (or the log is empty): no entry will come
                # to trigger the first pass, so run it now.
                self._replay_done()
                await self._announce_zone()
                if self.leader.holds():
                    consistent = False
                    await self.decide()
                    consistent = True
            async for batch in self.follower.batches(halt, linger_s=settle, idle_s=self._idle_s):
                await self._fold(batch)
                if self.follower.caught_up:
                    if not self._replayed:
                        self._replay_done()
                        await self._announce_zone()
                    # Checked per batch: leadership lost meanwhile means no pass at all.
                    if self.leader.holds() and (not self._led or may_change_decisions(batch)):
                        consistent = False  # until every request of the pass is answered
                        await self.decide()
                        consistent = True
                if self._led:
                    self.snapshots.after_batch(self.projection, self.follower)
        except Stopping:
            pass
        finally:
            watch.cancel()
            await sampler.stop()
            await self.follower.stop()
            lost = self.leader.lost.is_set()
            await self.leader.close()
            # A standby's engine is the log alone: only a (graceful) leader's state is saved.
            await self.snapshots.close(
                self.projection, consistent=consistent and self._led and not lost
            )
        if self.leader.lost.is_set() and not self.ctx.stop.is_set():
            self.ctx.log.error(
                "leadership lost: stopped deciding, exiting to restart as a standby",
                zone=self.zone,
            )
            raise LeadershipLost(f"dequeuer-{self.zone}")

    async def _announce_zone(self) -> None:
        """Say on the log that this zone is served, once the replay shows it was never said.

        After the replay, so that a restart publishes nothing new (the log already says it).
        """
        if self.zone in self.engine.served_zones():
            return
        envelope = Envelope(
            id=EventId(f"dequeuer:{self.zone}:served"),
            time=to_utc(wall_ms()),
            source=f"{SOURCE}/{self.zone}",
            event=ZoneServed(zone=self.zone, replica=self._instance),
        )
        await self._publish(self.ctx.subjects.zone_served(self.zone), envelope)

    async def _publish(self, subject: str, envelope: Envelope) -> None:
        async def publish() -> object:
            return await publish_envelope(self.ctx.js, subject, envelope)

        # The same id on every attempt: an ack lost in a NATS restart is not a duplicate.
        await retrying(
            publish, f"announcing {envelope.id}", self.ctx.log, Backoff(0.05, 2.0), self.ctx.stop
        )

    async def _halt_on_stop_or_loss(self, halt: asyncio.Event) -> None:
        stop = asyncio.ensure_future(self.ctx.stop.wait())
        lost = asyncio.ensure_future(self.leader.lost.wait())
        try:
            await asyncio.wait({stop, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            lost.cancel()
            halt.set()

    async def _sample(self) -> None:
        last = await stream_last_seq(self.ctx.js, self.ctx.subjects)
        self.metrics.consumer_lag.labels(f"dequeuer-{self.zone}").set(
            max(0, last - self.projection.applied_seq)
        )
        if self.follower.caught_up:
            self._refresh_gauges()

    def _refresh_gauges(self) -> None:
        # O(queues + quota nodes): cheap, but a busy zone runs many passes a second, so at
        # most every quarter second (the sampler catches the last pass of a burst).
        now = time.monotonic()
        if now - self._gauges_at >= 0.25:
            self._gauges_at = now
            record_engine(self.metrics, self.engine)
            record_usage(self.metrics, self.usage, wall_ms())

    def _replay_done(self) -> None:
        self._replayed = True
        # Readiness marker (the replay benchmark waits for it). No count of the workloads:
        # listing 100k of them with their reasons would delay the first pass by a second.
        self.ctx.log.info(
            "replay done, deciding",
            seq=self.projection.applied_seq,
            restored_seq=self.snapshots.restored_seq,
        )

    def _idle_s(self) -> float | None:
        waits: list[float] = []
        wake = self.engine.next_wakeup()
        if wake is not None:
            waits.append(max(0.0, (wake - wall_ms()) / 1000) + 0.001)
        if self._retry_in_s is not None:
            waits.append(max(0.0, self._retry_at - time.monotonic()))
        return min(waits) if waits else None

    def _refused(self) -> None:
        """Something was refused: try again after a backoff even if no event comes.

        A refusal can come from the ledger lagging behind the log (a tree it has not applied
        yet: ``UnknownQuota``; a victim not seen stopped yet: ``PreemptionInProgress``); no new
        entry may ever arrive to trigger the pass that would succeed.
        """
        previous = self._retry_in_s
        self._retry_in_s = RETRY_FIRST_S if previous is None else min(RETRY_MAX_S, previous * 2)
        self._retry_at = time.monotonic() + self._retry_in_s

    def _all_granted(self) -> None:
        self._retry_in_s = None

    async def _fold(self, batch: list[LogEntry | BadEntry]) -> None:
        for entry in batch:
            bad = entry if isinstance(entry, BadEntry) else self.projection.apply(entry)
            if bad is not None:
                await self.ctx.park(bad.subject, bad.data, bad.error, bad.detail, bad.seq)
                continue
            assert isinstance(entry, LogEntry)
            self.usage.apply(entry.envelope.event, entry.time_ms)
            self._track(entry)

    def _track(self, entry: LogEntry) -> None:
        """Note when this zone's workloads appeared, for the admission wait histogram."""
        event = entry.envelope.event
        if isinstance(event, WorkloadObserved):
            if event.zone == self.zone and event.workload not in self._seen:
                self._seen[event.workload] = event.created_ms or entry.time_ms
        elif isinstance(event, Admitted | WorkloadDeleted | WorkloadFinished):
            # Admitted by an earlier leader (or us, already measured): nothing to wait for.
            self._seen.pop(event.workload, None)

    async def decide(self) -> None:
        """One pass, then carry out what it decided."""
        self.passes += 1
        self._led = True
        started = time.perf_counter()
        now = wall_ms()
        seen = self.projection.applied_seq
        decisions = self.engine.decide(now)
        pass_s = time.perf_counter() - started
        self.metrics.pass_seconds.labels(self.zone).observe(pass_s)
        plan = plan_pass(decisions)
        if plan.proposes:
            # Before any request: whatever reaches the log from this pass comes after it (D4).
            await self._record_pass(seen, now)
        if plan.requeues or plan.drains:
            # First: the quota they free is what the pass's admissions may count on (R10).
            await self._requeue(plan.requeues, plan.drains)
        if plan.admissions:
            await self._reserve(plan.admissions, pass_s)
        for preemptor, victims in plan.reclaims:
            await self._reclaim(preemptor, victims)
        if plan.announcements:
            await self._announce(plan.announcements)
        if plan.retries:
            await self._publish_retries(plan.retries)
        self._refresh_gauges()

    async def _record_pass(self, seen: int, now: Millis) -> None:
        """Put this pass on the log (``PassRan``, D4) so that the audit can re-run it exactly.

        The id names the zone, the replica and the pass: a retried publish is deduplicated.
        """
        envelope = Envelope(
            id=EventId(f"dequeuer:{self.zone}:pass:{self._instance}:{self.passes}"),
            time=to_utc(now),
            source=f"{SOURCE}/{self.zone}",
            event=PassRan(zone=self.zone, seq=seen, now_ms=now, replica=self._instance),
        )
        await self._publish(self.ctx.subjects.pass_ran(self.zone), envelope)

    def _request_id(self) -> RequestId:
        return RequestId(f"{self._instance}-{next(self._ids)}")

    async def _reserve(self, admissions: list[Admitted], pass_s: float) -> None:
        """Ask the ledger for this pass's admissions; ``pass_s``, how long the pass took, is
        logged with the outcome."""
        request = ReserveRequest(
            request_id=self._request_id(),
            zone=self.zone,
            reservations=[reservation_of(a) for a in admissions],
            # What this pass saw: the ledger refuses a workload it saw end after that (R8).
            log_seq=self.projection.applied_seq,
        )
        asked = time.perf_counter()
        try:
            reply = await ask(self.ctx, self.ctx.subjects.ledger_reserve, request)
        except PermanentReplyError as exc:
            self.ctx.log.error("ledger refused the whole request", code=exc.code, detail=exc.detail)
            why = reasons.stale_view(admissions[0].workload, f"ledger error {exc.code}")
            for admitted in admissions:
                self.engine.revert_admission(admitted.workload, why)
            return
        granted = 0
        now = wall_ms()
        for result in reply.results:
            if result.granted:
                granted += 1
                record_admission(self.metrics, self.engine, self.zone)
                since = self._seen.pop(result.workload, None)
                if since is not None:
                    self.metrics.admission_wait.labels(self.zone).observe(
                        max(0, now - since) / 1000
                    )
                continue
            reason = result.reason or reasons.stale_view(result.workload, "refused by the ledger")
            self.ctx.log.info(
                "reservation refused",
                workload=result.workload,
                reason=reason.code,
                detail=reason.message,
            )
            self.engine.revert_admission(result.workload, reason)
        self.ctx.log.info(
            "pass reserved",
            requested=len(admissions),
            granted=granted,
            pass_ms=round(pass_s * 1000, 2),
            ledger_ms=round((time.perf_counter() - asked) * 1000, 2),
        )
        if granted < len(admissions):
            self._refused()
        else:
            self._all_granted()

    async def _requeue(self, requeues: list[Requeued], drains: list[Preempted]) -> None:
        """Ask the ledger to carry out readiness requeues (R10) and drain preemptions (R15):
        both turn an admitted allocation into one stopping for itself."""
        request = RequeueRequest(
            request_id=self._request_id(),
            zone=self.zone,
            requeues=requeues,
            log_seq=self.projection.applied_seq,
            drains=drains,
        )
        try:
            reply = await ask(self.ctx, self.ctx.subjects.ledger_requeue, request)
        except PermanentReplyError as exc:
            self.ctx.log.error("ledger refused the requeues", code=exc.code, detail=exc.detail)
            return
        asked: list[Requeued | Preempted] = [*requeues, *drains]
        for decision, result in zip(asked, reply.results, strict=False):
            what = "requeue" if isinstance(decision, Requeued) else "drain"
            if result.granted:
                counter = self.metrics.requeues if what == "requeue" else self.metrics.preemptions
                counter.labels(decision.reason.code).inc()
                done = "requeued" if what == "requeue" else "drained"
                self.ctx.log.info(done, workload=decision.workload, reason=decision.reason.message)
            else:
                detail = result.reason.message if result.reason is not None else "refused"
                self.ctx.log.info(f"{what} refused", workload=decision.workload, detail=detail)

    async def _reclaim(self, preemptor: Admitted, victims: list[Preempted]) -> None:
        request = PreemptRequest(
            request_id=self._request_id(),
            zone=self.zone,
            preemptor=reservation_of(preemptor, [v.workload for v in victims]),
            victims=victims,
            log_seq=self.projection.applied_seq,
        )
        log = self.ctx.log.bind(workload=preemptor.workload, quota=preemptor.quota)
        reason: Reason | None
        try:
            reply = await ask(self.ctx, self.ctx.subjects.preempt_request, request)
        except PermanentReplyError as exc:
            reason = reasons.stale_view(preemptor.workload, f"preemption error {exc.code}")
        else:
            result = reply.results[0] if reply.results else None
            if result is not None and result.granted:
                log.info("reclaim accepted", victims=[v.workload for v in victims])
                record_admission(self.metrics, self.engine, self.zone)
                for victim in victims:
                    self.metrics.preemptions.labels(victim.reason.code).inc()
                return
            reason = (result.reason if result else None) or reasons.stale_view(
                preemptor.workload, "refused"
            )
        log.info("reclaim refused", reason=reason.code, detail=reason.message)
        self._refused()
        self.engine.revert_preemption(preemptor.workload, victims, reason)

    async def _announce(self, decisions: list[Inadmissible | Unmapped]) -> None:
        subjects = self.ctx.subjects
        now = wall_ms()
        for decision in decisions:
            namespace, _, name = decision.workload.partition("/")
            action = "unmapped" if isinstance(decision, Unmapped) else "inadmissible"
            envelope = Envelope(
                # Deterministic per (workload, log position): a replayed dequeuer that
                # announces the same thing at the same point is deduplicated by the server.
                id=EventId(
                    f"dequeuer:{self.zone}:{action}:{decision.workload}:"
                    f"{self.projection.applied_seq}"
                ),
                time=to_utc(now),
                source=f"{SOURCE}/{self.zone}",
                event=decision,
            )
            await self._publish(subjects.decision(self.zone, action, namespace, name), envelope)

    async def _publish_retries(self, decisions: list[Retried]) -> None:
        """What follows each failed attempt (R12): this dequeuer owns the decision, as it
        moves no quota. One id per failed attempt (an attempt fails once): a dequeuer that
        dies before reading its own ``Retried`` back decides it again on restart, and the
        server drops the copy; after that, the log has it and nothing is decided again."""
        for decision in decisions:
            envelope = Envelope(
                id=EventId(f"dequeuer:{self.zone}:retried:{decision.workload}"),
                time=to_utc(wall_ms()),
                source=f"{SOURCE}/{self.zone}",
                event=decision,
            )
            await self._publish(self.ctx.subjects.decision_for(decision, self.zone), envelope)
            self.metrics.retries.labels(decision.reason.code).inc()
            self.ctx.log.info(
                "retried", workload=decision.workload, next=decision.job,
                reason=decision.reason.message,
            )  # fmt: skip


async def main(ctx: ServiceContext) -> None:
    """Run the dequeuer of ``ctx.settings.zone`` until the service is stopped."""
    zone = ctx.settings.zone
    if zone is None:
        raise ValueError("the dequeuer needs a zone (--zone)")
    await Dequeuer(ctx, zone).run()


def may_change_decisions(batch: list[LogEntry | BadEntry]) -> bool:
    """Whether a pass after this batch could decide anything new.

    Pod progress alone cannot: a workload getting ready only ends its ready deadline, and a
    deadline that runs out is a wakeup, which ends the follower's wait with an empty batch
    (``_idle_s``) and so gets its pass. Skipping those passes matters: every admitted job
    reports its progress once. An empty batch (a wakeup, a retry) always may.
    """
    if not batch:
        return True
    return not all(
        isinstance(entry, LogEntry) and isinstance(entry.envelope.event, WorkloadProgress)
        for entry in batch
    )
