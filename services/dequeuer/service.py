"""The dequeuer of one zone (DESIGN: "queue order, Round/Block, zone capacity").

What it does: rebuilds the pure engine from its latest snapshot plus the tail of the log (or
by replaying the whole log), then follows it, saving snapshots now and then; after
each batch of entries that arrived together (and at min-runtime wakeups) it runs one decision
pass of the core. The pass's admissions become one ``ReserveRequest`` to the ledger, its
reclaims one ``PreemptRequest`` per preemptor to the preemptor service; refusals are reverted
in the engine with the ledger's reason. Inadmissible and unmapped workloads of its zone are
announced on the log.
What it must never do: write PostgreSQL or Kubernetes, publish an ``Admitted`` or
``Preempted`` itself (only the ledger's outbox does, so a workload is admitted once), decide
for another zone, or decide before the replay has caught up with the log.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field

from schemas import (
    Admitted,
    Decision,
    Envelope,
    EventId,
    Inadmissible,
    Preempted,
    PreemptRequest,
    Reason,
    RequestId,
    Reservation,
    ReserveRequest,
    Unmapped,
    WorkloadKey,
    Zone,
)
from services.common.follower import BadEntry, LogEntry, LogFollower, Projection
from services.common.requests import PermanentReplyError, Stopping, ask
from services.common.runtime import ServiceContext, to_utc, wall_ms
from services.common.snapshots import EngineSnapshots
from usher.adapters.nats.log import publish_envelope
from usher.core import reasons
from usher.core.engine import Engine

SOURCE = "usher/dequeuer"


@dataclass
class PassPlan:
    """What one pass asks of the others: reservations, reclaims and announcements."""

    admissions: list[Admitted] = field(default_factory=list)
    reclaims: list[tuple[Admitted, list[Preempted]]] = field(default_factory=list)
    announcements: list[Inadmissible | Unmapped] = field(default_factory=list)


def plan_pass(decisions: list[Decision]) -> PassPlan:
    """Split a pass's decisions: a preemptor's ``Admitted`` follows its victims' ``Preempted``."""
    plan = PassPlan()
    victims: list[Preempted] = []
    for decision in decisions:
        match decision:
            case Preempted():
                victims.append(decision)
            case Admitted():
                mine = [v for v in victims if v.preemptor == decision.workload]
                if mine:
                    plan.reclaims.append((decision, mine))
                    victims = [v for v in victims if v.preemptor != decision.workload]
                else:
                    plan.admissions.append(decision)
            case Inadmissible() | Unmapped():
                plan.announcements.append(decision)
            case _:
                # Released comes from the ledger; Pending is not emitted by passes.
                pass
    return plan


def reservation_of(decision: Admitted, preempting: list[WorkloadKey] | None = None) -> Reservation:
    return Reservation(
        workload=decision.workload,
        queue=decision.queue,
        quota=decision.quota,
        zone=decision.zone,
        requests=decision.requests,
        priority=decision.priority,
        preempting=preempting or [],
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

    async def run(self) -> None:
        self.projection = await self.snapshots.open()
        self.engine = self.projection.engine
        self.follower = self.snapshots.follower(self.projection)
        await self.follower.start()
        self.ctx.ready.set()
        self.ctx.log.info(
            "replaying the log",
            from_seq=self.projection.applied_seq + 1,
            target_seq=self.follower.replay_target,
        )
        settle = self.ctx.settings.settle_ms / 1000
        consistent = True
        try:
            if self.follower.caught_up:
                # The snapshot covers the whole log (or the log is empty): no entry will come
                # to trigger the first pass, so run it now.
                self._replay_done()
                consistent = False
                await self.decide()
                consistent = True
            async for batch in self.follower.batches(
                self.ctx.stop, linger_s=settle, idle_s=self._idle_s
            ):
                await self._fold(batch)
                if self.follower.caught_up:
                    if not self._replayed:
                        self._replay_done()
                    consistent = False  # until every request of the pass is answered
                    await self.decide()
                    consistent = True
                self.snapshots.after_batch(self.projection, self.follower)
        except Stopping:
            pass
        finally:
            await self.follower.stop()
            await self.snapshots.close(self.projection, consistent=consistent)

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
        wake = self.engine.next_wakeup()
        if wake is None:
            return None
        return max(0.0, (wake - wall_ms()) / 1000) + 0.001

    async def _fold(self, batch: list[LogEntry | BadEntry]) -> None:
        for entry in batch:
            if isinstance(entry, BadEntry):
                await self.ctx.park(
                    entry.subject, entry.data, entry.error, entry.detail, stream_seq=entry.seq
                )
                continue
            self.projection.apply(entry)

    async def decide(self) -> None:
        """One pass, then carry out what it decided."""
        self.passes += 1
        plan = plan_pass(self.engine.decide(wall_ms()))
        if plan.admissions:
            await self._reserve(plan.admissions)
        for preemptor, victims in plan.reclaims:
            await self._reclaim(preemptor, victims)
        if plan.announcements:
            await self._announce(plan.announcements)

    def _request_id(self) -> RequestId:
        return RequestId(f"{self._instance}-{next(self._ids)}")

    async def _reserve(self, admissions: list[Admitted]) -> None:
        request = ReserveRequest(
            request_id=self._request_id(),
            zone=self.zone,
            reservations=[reservation_of(a) for a in admissions],
        )
        try:
            reply = await ask(self.ctx, self.ctx.subjects.ledger_reserve, request)
        except PermanentReplyError as exc:
            self.ctx.log.error("ledger refused the whole request", code=exc.code, detail=exc.detail)
            why = reasons.stale_view(admissions[0].workload, f"ledger error {exc.code}")
            for admitted in admissions:
                self.engine.revert_admission(admitted.workload, why)
            return
        granted = 0
        for result in reply.results:
            if result.granted:
                granted += 1
                continue
            reason = result.reason or reasons.stale_view(result.workload, "refused by the ledger")
            self.ctx.log.info(
                "reservation refused",
                workload=result.workload,
                reason=reason.code,
                detail=reason.message,
            )
            self.engine.revert_admission(result.workload, reason)
        self.ctx.log.info("pass reserved", requested=len(admissions), granted=granted)

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
                return
            reason = (result.reason if result else None) or reasons.stale_view(
                preemptor.workload, "refused"
            )
        log.info("reclaim refused", reason=reason.code, detail=reason.message)
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
            await publish_envelope(
                self.ctx.js, subjects.decision(self.zone, action, namespace, name), envelope
            )


async def main(ctx: ServiceContext) -> None:
    """Run the dequeuer of ``ctx.settings.zone`` until the service is stopped."""
    zone = ctx.settings.zone
    if zone is None:
        raise ValueError("the dequeuer needs a zone (--zone)")
    await Dequeuer(ctx, zone).run()
