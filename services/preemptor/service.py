"""The preemptor (DESIGN: "reclaim of borrowed quota").

What it does: keeps its own projection of the whole log (every zone; started from its latest
snapshot plus the tail of the log, see ``services.common.snapshots``), keeps the people read
model beside it from the same entries (``services.common.views``: what ``usher jobs``,
``queue`` and ``explain`` restore; only this service writes it), and serves
``<prefix>.preempt.request``: a dequeuer proposes a reclaim (a preemptor and its victims); the
preemptor waits until its projection has seen what the proposer had seen, re-computes the
reclaim rules with the core (``Engine.check_preemption``) and, when they hold, asks the
ledger to carry it out: the victims' usage becomes a hold for the preemptor in one
transaction, and the ledger's outbox publishes the ``Preempted`` decisions. The capacity stays
held for the preemptor until it is admitted, which the ledger does once every victim has been
seen stopped.
High availability: replicas elect a leader (``services.common.leader``, key ``preemptor``);
every replica follows the log, only the leader subscribes to the request subject. A leader
that loses its key unsubscribes at once, drops the requests it had not started (their
senders retry and reach the new leader) and goes back to standby: its projection is the log
alone, so it stays valid.
What it must never do: write PostgreSQL or Kubernetes, publish decisions itself, or forward a
reclaim its own projection contradicts.
"""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
from nats.aio.msg import Msg

from schemas import (
    PreemptRequest,
    Reason,
    RequestId,
    ReservationResult,
    ReserveReply,
    decode,
    encode,
)
from schemas.ledger import LedgerError
from services.common.leader import Leadership
from services.common.metrics import Sampler
from services.common.projection import Projection
from services.common.requests import PermanentReplyError, Stopping, ask, untrusted_reply
from services.common.runtime import ServiceContext, wall_ms
from services.common.snapshots import EngineSnapshots
from services.common.tasks import cancel_tasks
from services.common.views import PeopleViews
from usher.adapters.nats.follower import LogFollower, stream_last_seq
from usher.core.engine.facade import Engine
from usher.core.history.people import PeopleProjection
from usher.core.model import reasons
from usher.core.model.config import EngineConfig
from usher.core.protocol.log import BadEntry

CATCH_UP_S = 2.0
"""How long a proposal waits for this projection to reach the proposer's log position."""


class Preemptor:
    """Projection of the log plus the request handler."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        config = ctx.settings.engine
        # The preemptor judges reclaims in every zone: no zone filter.
        engine_config = EngineConfig(
            policy=config.policy,
            oversell_rate=config.oversell_rate,
            within_quota=config.within_quota,
            min_runtime_ms=config.min_runtime_ms,
            half_life_ms=config.half_life_ms,  # offers are ordered as the dequeuers order them
        )
        self.snapshots = EngineSnapshots(ctx, "preemptor", engine_config)
        self.views = PeopleViews(ctx, engine_config)
        # Until ``run`` opens the latest snapshot (or starts a full replay).
        self.projection = Projection(Engine(engine_config))
        self.people = PeopleProjection(engine_config)
        self.follower = LogFollower(ctx.js, ctx.subjects, start_seq=1)
        self._requests: asyncio.Queue[Msg] = asyncio.Queue()
        self.leader = Leadership(ctx, "preemptor")
        self._subscribed = asyncio.Event()

    async def run(self) -> None:
        await self.leader.start()
        self.projection = await self.snapshots.open()
        self.people = await self.views.open()
        # One follower for both: from the older of the two (each ignores what it has applied).
        first = min(self.projection.applied_seq, self.people.applied_seq) + 1
        self.follower = self.snapshots.follower(self.projection, start_seq=first)
        await self.follower.start()
        sampler = Sampler(self._sample, self.ctx.log)
        sampler.start()
        tasks = [
            asyncio.create_task(self._follow()),
            asyncio.create_task(self._serve()),
            asyncio.create_task(self._lead()),
        ]
        if self.leader.is_leader:
            # Ready means reachable: a leader has its subscription in place first.
            await self._subscribed.wait()
        self.ctx.ready.set()
        try:
            await self.ctx.stop.wait()
        finally:
            await cancel_tasks(tasks)
            await sampler.stop()
            await self.leader.close()
            await self.follower.stop()
            # The projection only ever applies whole entries: any point of it is consistent.
            await self.snapshots.close(self.projection)
            await self.views.close(self.people)

    async def _sample(self) -> None:
        last = await stream_last_seq(self.ctx.js, self.ctx.subjects)
        lag = max(0, last - self.projection.applied_seq)
        self.ctx.metrics.consumer_lag.labels("preemptor").set(lag)

    async def _lead(self) -> None:
        """Hold the request subscription exactly while this process is the leader."""
        while True:
            await self.leader.acquired.wait()
            sub = await self.ctx.nc.subscribe(
                self.ctx.subjects.preempt_request, queue="preemptor", cb=self._requests.put
            )
            await self.ctx.nc.flush()
            self._subscribed.set()
            self.ctx.log.info("leading: serving preemption requests")
            try:
                await self.leader.standby.wait()
            finally:
                self._subscribed.clear()
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
            self.ctx.log.warning("standby: no longer serving preemption requests")

    async def _follow(self) -> None:
        replayed = False
        async for batch in self.follower.batches(self.ctx.stop):
            for entry in batch:
                self.people.apply(entry)
                if entry.seq <= self.projection.applied_seq:
                    continue  # the people read model's tail, before the engine's snapshot
                bad = entry if isinstance(entry, BadEntry) else self.projection.apply(entry)
                if bad is not None:  # undecodable, forged or unfoldable: parked, skipped
                    await self.ctx.park(bad.subject, bad.data, bad.error, bad.detail, bad.seq)
            if not replayed and self.follower.caught_up:
                replayed = True
                self.ctx.log.info(
                    "replay done",
                    seq=self.projection.applied_seq,
                    restored_seq=self.snapshots.restored_seq,
                )
            self.snapshots.after_batch(self.projection, self.follower)
            self.views.after_batch(self.people, self.follower)

    async def _serve(self) -> None:
        # One request at a time, in arrival order: each check must see the effect of the
        # previous reclaim on the projection.
        while True:
            msg = await self._requests.get()
            if not self.leader.is_leader:
                continue  # lost meanwhile: unanswered, the sender retries with the new leader
            untrusted = untrusted_reply(msg.subject, msg.reply)
            if untrusted is not None:  # not a requester's: parked unanswered
                await self.ctx.park(msg.subject, msg.data, untrusted)
                continue
            try:
                reply = await self.handle(msg.data, msg.subject)
            except Stopping:
                return
            if msg.reply:
                await self.ctx.nc.publish(msg.reply, encode(reply))

    async def handle(self, data: bytes, subject: str) -> ReserveReply | LedgerError:
        try:
            request = decode(data, PreemptRequest)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            await self.ctx.park(subject, data, exc)
            return LedgerError(
                request_id=RequestId(""), code="bad-request", message=str(exc), transient=False
            )
        preemptor = request.preemptor.workload
        log = self.ctx.log.bind(workload=preemptor, quota=request.preemptor.quota)
        if not await self.projection.wait_for(request.log_seq, CATCH_UP_S):
            log.warning(
                "projection behind the proposer",
                want=request.log_seq,
                have=self.projection.applied_seq,
            )
            return _refused(request, reasons.stale_view(preemptor, "the preemptor is behind"))
        why = self.projection.engine.check_preemption(
            preemptor, [v.workload for v in request.victims], wall_ms()
        )
        if why is not None:
            log.info("reclaim refused", reason=why.message)
            return _refused(request, why)
        try:
            reply = await ask(
                self.ctx,
                self.ctx.subjects.ledger_preempt,
                request,
                # Answer the dequeuer before it gives up on us; it repeats the request anyway.
                timeout_s=max(0.5, self.ctx.settings.request_timeout_s / 2),
                deadline_attempts=2,
            )
        except PermanentReplyError as exc:
            log.warning("ledger did not carry out the reclaim", code=exc.code, detail=exc.detail)
            return LedgerError(
                request_id=request.request_id,
                code=exc.code,
                message=exc.detail,
                transient=exc.code == "unanswered",
            )
        log.info(
            "reclaim forwarded",
            victims=[v.workload for v in request.victims],
            granted=bool(reply.results and reply.results[0].granted),
        )
        return reply


def _refused(request: PreemptRequest, reason: Reason) -> ReserveReply:
    return ReserveReply(
        request_id=request.request_id,
        results=[
            ReservationResult(workload=request.preemptor.workload, granted=False, reason=reason)
        ],
    )


async def main(ctx: ServiceContext) -> None:
    """Run the preemptor until the service is stopped."""
    await Preemptor(ctx).run()
