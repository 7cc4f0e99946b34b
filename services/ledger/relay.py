"""The outbox relay: publishes committed decisions to the log, in outbox order, at least once.

What it does: after each commit that wrote outbox rows (``kick``) and every ``interval_s`` as
a safety net, reads the unpublished rows in id order, publishes them pipelined (the client's
async publish) with CloudEvents headers and ``Nats-Msg-Id`` = event id, waits for the acks and
stamps the acknowledged prefix as published. A crash between publish and stamp republishes;
the server drops the duplicate within its dedup window.
Only the elected relay leader (``services.common.leader``, key ``ledger-relay``) publishes:
``leading`` is set while this process holds it; a replica without it waits (a double
publication would still be deduplicated, but two relays would race on the stamps).
What it must never do: stamp a row whose publish was not acknowledged, publish a later row
in place of an earlier failed one (only the acked prefix counts; the rest is retried), or die
because NATS or PostgreSQL is briefly away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from sqlalchemy.exc import SQLAlchemyError

from schemas import cloudevent_headers, decode_envelope
from usher.adapters.nats.subjects import installation_of
from usher.adapters.pg.ledger_store import LedgerError, LedgerStore, OutboxMessage

Park = Callable[..., Awaitable[None]]
"""``ServiceContext.park``: (subject, data, error, detail) -> None."""


class OutboxRelay:
    """Moves outbox rows to the log; one instance per ledger process."""

    def __init__(
        self,
        store: LedgerStore,
        js: JetStreamContext,
        log: Any,
        park: Park,
        *,
        batch: int = 1000,
        interval_s: float = 1.0,
        ack_timeout_s: float = 5.0,
        leading: asyncio.Event | None = None,
    ) -> None:
        self._store = store
        self._js = js
        self._log = log
        self._park = park
        self._batch = batch
        self._interval = interval_s
        self._ack_timeout = ack_timeout_s
        self._wake = asyncio.Event()
        self._leading = leading
        self.published = 0
        """Rows stamped as published since start (for logs and tests)."""

    def kick(self) -> None:
        """A transaction wrote outbox rows: publish them now rather than at the next tick."""
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Publish until ``stop``; rows left by a previous process go first."""
        while not stop.is_set():
            if self._leading is not None and not self._leading.is_set():
                # Standby: another replica relays. Woken by the election when it wins.
                await _wait_any((self._leading, stop), self._interval)
                continue
            self._wake.clear()
            await self.flush_safely()
            if not self._wake.is_set():
                await _wait_any((self._wake, stop), self._interval)

    async def flush_safely(self) -> None:
        """``flush``, logging (not raising) what a later tick will retry."""
        try:
            await self.flush()
        except (LedgerError, SQLAlchemyError, OSError) as exc:
            self._log.warning("outbox not read or not stamped", error=type(exc).__name__)

    async def flush(self) -> int:
        """Publish every pending row; the number stamped. Stops at the first unacked row."""
        total = 0
        pending = await self._store.pending_outbox(self._batch)
        while pending:
            if self._leading is not None and not self._leading.is_set():
                return total  # leadership lost: stop publishing at once
            done = await self._publish(pending)
            whole = len(done) == len(pending)
            # Stamping reads the next batch in the same statement; a partial one stops here.
            pending = await self._store.mark_published(done, then=self._batch if whole else 0)
            total += len(done)
            self.published += len(done)
        return total  # a partial batch's rest waits for the next kick or tick, in order

    async def _publish(self, messages: list[OutboxMessage]) -> list[int]:
        """Publish pipelined; the ids of the acknowledged prefix (in order)."""
        futures: list[asyncio.Future[Any]] = []
        sent: list[OutboxMessage] = []
        for message in messages:
            headers = await self._headers(message)
            if headers is None:
                # Parked: counts as done, so one corrupt row cannot block the outbox.
                sent.append(message)
                futures.append(_done())
                continue
            try:
                future = await self._js.publish_async(
                    message.subject, message.payload, headers=headers
                )
            except (nats.errors.Error, nats.js.errors.Error) as exc:
                self._log.warning("outbox publish failed", error=type(exc).__name__)
                break
            sent.append(message)
            futures.append(future)
        acks = await asyncio.gather(
            *(asyncio.wait_for(f, self._ack_timeout) for f in futures), return_exceptions=True
        )
        done: list[int] = []
        for message, ack in zip(sent, acks, strict=True):
            if isinstance(ack, BaseException):
                self._log.warning(
                    "outbox publish not acknowledged",
                    event_id=message.event_id,
                    error=type(ack).__name__,
                )
                break
            assert message.id is not None
            done.append(message.id)
        return done

    async def _headers(self, message: OutboxMessage) -> dict[str, str] | None:
        """CloudEvents headers from the stored envelope; ``None`` (parked) when it is corrupt."""
        try:
            envelope = decode_envelope(message.payload)
            return cloudevent_headers(envelope, installation_of(message.subject))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            # Written by this service, so this is a bug; parking keeps the outbox moving.
            await self._park(message.subject, message.payload, exc)
            return None


async def _wait_any(events: tuple[asyncio.Event, ...], seconds: float) -> None:
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def _done() -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


__all__ = ["OutboxRelay"]
