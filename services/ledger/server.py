"""Request/reply of the ledger: reservations and preemptions, coalesced into transactions.

What it does: subscribes to ``<p>.ledger.reserve``, ``<p>.ledger.preempt``,
``<p>.ledger.requeue`` and every identity's ``<p>.ledger.hold.<identity>`` in queue group
``ledger``; an operator's hold, drain or resume (R14/R15) is recorded with the identity its
subject names as who asked (NATS lets each identity publish only its own), replied
``HoldReply``; requests that arrive while a transaction runs
are served together by the next one (consecutive ``ReserveRequest``s share one transaction,
their results split back per request in order; each ``PreemptRequest`` and each
``RequeueRequest`` is its own transaction, in arrival order). Replies
``ReserveReply``, or ``LedgerError`` (``bad-request`` and parked for input that does not decode
or is invalid, ``transient`` when the database gave up for now, ``ledger-failure`` otherwise).
What it must never do: reply before the transaction committed, let one bad request fail the
others of its batch, or stop serving because of one message.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Final

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from schemas import (
    HoldReply,
    HoldRequest,
    LedgerError,
    PreemptRequest,
    RequestId,
    RequeueRequest,
    ReservationResult,
    ReserveReply,
    ReserveRequest,
    decode,
    encode,
)
from services.common.requests import untrusted_reply
from services.common.runtime import ServiceContext, wall_ms
from services.ledger.outbox import hold_outbox
from usher.adapters.pg.ledger_store import (
    LedgerPermanentError,
    LedgerRequestError,
    LedgerStore,
    LedgerTransientError,
    OutboxBuilder,
    check_reservations,
)
from usher.core.rules.holds import HoldOrder

QUEUE_GROUP: Final = "ledger"


class _RequestIdOnly(msgspec.Struct):
    """Enough of any request to name it in an error reply."""

    request_id: str = ""


@dataclass(frozen=True, slots=True)
class _Call:
    msg: Msg
    request: ReserveRequest | PreemptRequest | RequeueRequest | HoldRequest


class RequestServer:
    """Serves the ledger's request subjects until stopped."""

    def __init__(
        self,
        ctx: ServiceContext,
        store: LedgerStore,
        outbox: OutboxBuilder,
        on_commit: Callable[[], None],
        *,
        max_reservations: int = 5000,
    ) -> None:
        self._ctx = ctx
        self._store = store
        self._outbox = outbox
        self._on_commit = on_commit
        self._max_reservations = max_reservations
        self._inbox: list[Msg] = []
        self._wake = asyncio.Event()
        self._subs: list[Subscription] = []

    async def start(self) -> None:
        """Subscribe (queue group ``ledger``): requests buffer until ``run`` serves them."""
        subjects = self._ctx.subjects
        for subject in (
            subjects.ledger_reserve,
            subjects.ledger_preempt,
            subjects.ledger_requeue,
            subjects.ledger_holds,
        ):
            self._subs.append(
                await self._ctx.nc.subscribe(subject, queue=QUEUE_GROUP, cb=self._on_message)
            )
        # The server knows the subscriptions once this returns: ready means reachable.
        await self._ctx.nc.flush()

    async def close(self) -> None:
        """Stop taking requests; those already received are still answered by ``run``."""
        subs, self._subs = self._subs, []
        for sub in subs:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    async def _on_message(self, msg: Msg) -> None:
        self._inbox.append(msg)
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop``; then unsubscribe and answer what was already received."""
        stopper = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                self._wake.clear()
                if self._inbox:
                    await self.serve_waiting()
                    continue
                waker = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait({waker, stopper}, return_when=asyncio.FIRST_COMPLETED)
                waker.cancel()
        finally:
            stopper.cancel()
        await self.close()
        await self.serve_waiting()

    async def serve_waiting(self) -> None:
        """Serve every buffered request, in arrival order, in as few transactions as allowed."""
        while self._inbox:
            taken, self._inbox = self._inbox, []
            calls = [call for msg in taken if (call := await self._decode(msg)) is not None]
            for group in self._groups(calls):
                if isinstance(group[0].request, HoldRequest):
                    await self._hold(group[0])
                elif isinstance(group[0].request, PreemptRequest):
                    await self._preempt(group[0])
                elif isinstance(group[0].request, RequeueRequest):
                    await self._requeue(group[0])
                else:
                    await self._reserve(group)

    def _groups(self, calls: list[_Call]) -> Iterator[list[_Call]]:
        """Runs of consecutive reserve calls (bounded), and each preempt or requeue call alone."""
        group: list[_Call] = []
        size = 0
        for call in calls:
            request = call.request
            if isinstance(request, PreemptRequest | RequeueRequest | HoldRequest):
                if group:
                    yield group
                group, size = [], 0
                yield [call]
                continue
            if group and size + len(request.reservations) > self._max_reservations:
                yield group
                group, size = [], 0
            group.append(call)
            size += len(request.reservations)
        if group:
            yield group

    async def _decode(self, msg: Msg) -> _Call | None:
        untrusted = untrusted_reply(msg.subject, msg.reply)
        if untrusted is not None:  # not a requester's: parked unanswered
            await self._ctx.park(msg.subject, msg.data, untrusted)
            return None
        try:
            request: ReserveRequest | PreemptRequest | RequeueRequest | HoldRequest
            if self._ctx.subjects.hold_identity(msg.subject) is not None:
                request = decode(msg.data, HoldRequest)
            elif msg.subject == self._ctx.subjects.ledger_preempt:
                request = decode(msg.data, PreemptRequest)
                check_reservations("preempt", [request.preemptor])
            elif msg.subject == self._ctx.subjects.ledger_requeue:
                request = decode(msg.data, RequeueRequest)
            else:
                request = decode(msg.data, ReserveRequest)
                check_reservations("reserve", request.reservations)
        except (msgspec.DecodeError, msgspec.ValidationError, LedgerRequestError) as exc:
            await self._bad_request(msg, exc)
            return None
        return _Call(msg, request)

    async def _reserve(self, group: list[_Call]) -> None:
        items = [item for call in group for item in _reserve(call).reservations]
        request_ids = [
            str(_reserve(call).request_id) for call in group for _ in _reserve(call).reservations
        ]
        views = [_reserve(call).log_seq for call in group for _ in _reserve(call).reservations]
        try:
            started = time.perf_counter()
            results = await self._store.reserve(
                items, outbox=self._outbox, request_ids=request_ids, views=views
            )
            self._ctx.metrics.ledger_seconds.labels("reserve").observe(
                time.perf_counter() - started
            )
        except LedgerTransientError as exc:
            for call in group:
                await self._transient(call, exc)
            return
        except LedgerPermanentError as exc:
            if len(group) > 1:
                # Serve them one by one so that only the culprit gets the error.
                for call in group:
                    await self._reserve([call])
                return
            await self._failed(group[0], exc)
            return
        if any(r.granted for r in results):
            self._on_commit()
        start = 0
        for call in group:
            request = _reserve(call)
            count = len(request.reservations)
            reply = ReserveReply(
                request_id=request.request_id, results=results[start : start + count]
            )
            start += count
            await self._reply(call.msg, reply)

    async def _preempt(self, call: _Call) -> None:
        request = call.request
        assert isinstance(request, PreemptRequest)

        async def preempt(log_seq: int | None) -> list[ReservationResult]:
            result = await self._store.preempt(
                request.preemptor, request.victims, outbox=self._outbox, log_seq=log_seq
            )
            return [result]

        await self._after_the_log(call, "preempt", request.request_id, preempt)

    async def _requeue(self, call: _Call) -> None:
        request = call.request
        assert isinstance(request, RequeueRequest)

        async def requeue(log_seq: int | None) -> list[ReservationResult]:
            return await self._store.requeue(
                [*request.requeues, *request.drains], outbox=self._outbox, log_seq=log_seq
            )

        await self._after_the_log(call, "requeue", request.request_id, requeue)

    async def _hold(self, call: _Call) -> None:
        """Record an operator's order (R14/R15); who asks is the identity of the subject."""
        request = call.request
        assert isinstance(request, HoldRequest)
        identity = self._ctx.subjects.hold_identity(call.msg.subject) or ""
        order = HoldOrder(
            action=request.action,
            target=request.target,
            by=identity,
            reason=request.reason,
            grace_seconds=request.grace_seconds,
        )
        built = hold_outbox(self._ctx.subjects, RequestId(f"{identity}:{request.request_id}"))
        try:
            outcome = await self._store.hold(order, wall_ms(), built)
        except LedgerTransientError as exc:
            await self._transient(call, exc)
            return
        except LedgerPermanentError as exc:
            await self._failed(call, exc)
            return
        if isinstance(outcome, list):
            first = outcome[0]
            reply = HoldReply(
                request_id=request.request_id, field=first.path, message=first.message
            )
        else:
            self._on_commit()
            self._ctx.log.info("hold recorded", node=outcome.node, by=identity)
            reply = HoldReply(request_id=request.request_id, recorded=outcome)
        await self._reply(call.msg, reply)

    async def _after_the_log(
        self,
        call: _Call,
        label: str,
        request_id: RequestId,
        run: Callable[[int | None], Awaitable[list[ReservationResult]]],
    ) -> None:
        """Serve one preemption or requeue: ``run`` with the log's last sequence, timed,
        errors answered, the reply sent.

        The sequence is read first: observations already on the log were made before this
        request, so they must not count as its victims' (or the requeued job's) pods having
        stopped.
        """
        try:
            log_seq = await self._log_seq()
            started = time.perf_counter()
            results = await run(log_seq)
            self._ctx.metrics.ledger_seconds.labels(label).observe(time.perf_counter() - started)
        except LedgerTransientError as exc:
            await self._transient(call, exc)
            return
        except LedgerPermanentError as exc:
            await self._failed(call, exc)
            return
        if any(r.granted for r in results):
            self._on_commit()
        await self._reply(call.msg, ReserveReply(request_id=request_id, results=results))

    async def _log_seq(self) -> int | None:
        try:
            info = await self._ctx.js.stream_info(self._ctx.subjects.stream_name)
        except (nats.errors.Error, TimeoutError) as exc:
            # Without it a stale observation could release a victim early; the hold still
            # keeps the quota safe, so carry on.
            self._ctx.log.warning("log position unknown for a preemption", error=repr(exc))
            return None
        return int(info.state.last_seq)

    async def _bad_request(self, msg: Msg, exc: Exception) -> None:
        reply = LedgerError(
            request_id=_request_id(msg.data), code="bad-request", message=str(exc), transient=False
        )
        await self._reply(msg, reply)
        await self._ctx.park(msg.subject, msg.data, exc)

    async def _transient(self, call: _Call, exc: LedgerTransientError) -> None:
        self._ctx.log.warning("ledger busy or unreachable", error=str(exc), sqlstate=exc.sqlstate)
        reply = LedgerError(
            request_id=call.request.request_id, code="transient", message=str(exc), transient=True
        )
        await self._reply(call.msg, reply)

    async def _failed(self, call: _Call, exc: LedgerPermanentError) -> None:
        if isinstance(exc, LedgerRequestError):
            await self._bad_request(call.msg, exc)
            return
        self._ctx.log.error("request failed", error=str(exc), sqlstate=exc.sqlstate)
        reply = LedgerError(
            request_id=call.request.request_id,
            code="ledger-failure",
            message=str(exc),
            transient=False,
        )
        await self._reply(call.msg, reply)
        await self._ctx.park(call.msg.subject, call.msg.data, exc)

    async def _reply(self, msg: Msg, reply: ReserveReply | HoldReply | LedgerError) -> None:
        if not msg.reply:
            return  # published without a reply subject: nobody to answer
        try:
            await msg.respond(encode(reply))
        except nats.errors.Error as exc:
            # The requester will time out and retry with the same request_id (idempotent).
            self._ctx.log.warning("reply not sent", error=type(exc).__name__)


def _reserve(call: _Call) -> ReserveRequest:
    request = call.request
    assert isinstance(request, ReserveRequest)
    return request


def _request_id(data: bytes) -> RequestId:
    try:
        return RequestId(msgspec.json.decode(data, type=_RequestIdOnly).request_id)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return RequestId("")


__all__ = ["QUEUE_GROUP", "RequestServer"]
