"""The ledger service's main: wires the store, the request server, the log consumer, the relay.

What it does: opens the PostgreSQL engine (asyncpg) from ``settings.database_url``, starts
following the log after the stored offset, subscribes to the request subjects, says it is
ready, and runs the three loops until ``ctx.stop``: on SIGTERM each loop finishes the
transaction in flight, the server answers the requests it already received, and the relay
publishes what the last transactions wrote before the engine is closed.
What it must never do: run without a database URL, or swallow a loop's crash (the task group
propagates it, so the process exits and is restarted).
"""

from __future__ import annotations

import asyncio

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from services.common.runtime import ServiceContext
from services.common.settings import ServiceSettings, SettingsError
from services.ledger.consumer import LogConsumer
from services.ledger.outbox import outbox_builder
from services.ledger.relay import OutboxRelay
from services.ledger.server import RequestServer
from usher.adapters.pg.ledger_store import LedgerStore

_ASYNCPG = "postgresql+asyncpg"


def create_engine(settings: ServiceSettings) -> AsyncEngine:
    """The ledger's engine; ``postgresql://`` URLs are given the asyncpg driver."""
    if settings.database_url is None:
        raise SettingsError(
            "database",
            "the ledger needs PostgreSQL: pass --database, set USHER_DATABASE_URL or run usher up",
        )
    try:
        url = make_url(settings.database_url)
    except ArgumentError as exc:
        raise SettingsError("database", "not a database URL") from exc
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername=_ASYNCPG)
    if url.drivername != _ASYNCPG:
        raise SettingsError("database", f"driver {url.drivername!r} is not {_ASYNCPG}")
    # Three loops use at most one connection each at a time; a little headroom for bursts.
    return create_async_engine(url, pool_size=4, max_overflow=2)


async def main(ctx: ServiceContext) -> None:
    """Run the ledger until ``ctx.stop`` is set."""
    engine = create_engine(ctx.settings)
    try:
        store = LedgerStore(engine, ctx.settings.engine.oversell_rate)
        outbox = outbox_builder(ctx.subjects)
        relay = OutboxRelay(store, ctx.js, ctx.log, ctx.park)
        server = RequestServer(ctx, store, outbox, relay.kick)
        consumer = LogConsumer(ctx, store, outbox, relay.kick)
        if not await consumer.start(ctx.stop):
            return
        try:
            await server.start()
            ctx.ready.set()
            ctx.log.info("ledger ready", offset=consumer.applied_seq)
            async with asyncio.TaskGroup() as loops:
                loops.create_task(relay.run(ctx.stop))
                loops.create_task(server.run(ctx.stop))
                loops.create_task(consumer.run(ctx.stop))
            # Decisions committed by the last transactions go out before the process ends.
            await relay.flush_safely()
        finally:
            await server.close()
            await consumer.close()
    finally:
        await engine.dispose()


__all__ = ["create_engine", "main"]
