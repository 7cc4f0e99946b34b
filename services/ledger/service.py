"""The ledger service's main: wires the store, the request server, the log consumer, the relay.

What it does: opens the PostgreSQL engine (asyncpg) from ``settings.database_url``, starts
following the log after the stored offset, subscribes to the request subjects, says it is
ready, and runs the three loops until ``ctx.stop``, sampling every second its log lag and whether
PostgreSQL answers (``usher_postgres_up``): on SIGTERM each loop finishes the
transaction in flight, the server answers the requests it already received, and the relay
publishes what the last transactions wrote before the engine is closed.
High availability: request handling and the log consumer are safe in many replicas (the
transactions arbitrate; the consumer's offset is written with its rows), so they always run;
the outbox relay runs only in the elected leader (key ``ledger-relay``) and goes back to
standby when it loses the key (the outbox is in PostgreSQL: nothing to hand over).
It refuses to start on a schema behind this release's head (``SchemaBehind``: the migration
Job has not run), before it touches a table.
What it must never do: run without a database URL, migrate the schema itself, or swallow a
loop's crash (the task group propagates it, so the process exits and is restarted).
"""

from __future__ import annotations

import asyncio

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from services.common.leader import Leadership
from services.common.metrics import Sampler
from services.common.runtime import ServiceContext
from services.common.settings import ServiceSettings, SettingsError
from services.ledger.consumer import LogConsumer
from services.ledger.outbox import outbox_builder
from services.ledger.relay import OutboxRelay
from services.ledger.server import RequestServer
from usher.adapters.pg.ledger_store import LedgerStore
from usher.adapters.pg.migrate import require_head
from usher.adapters.pg.probe import answers

_ASYNCPG = "postgresql+asyncpg"


PROBE_TIMEOUT_S = 2.0
"""How long PostgreSQL has to answer the metrics sampler's ``SELECT 1`` (every second)."""


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
        revision = await require_head(engine)
        ctx.log.info("schema at head", revision=revision)
        config = ctx.settings.engine
        store = LedgerStore(
            engine,
            config.oversell_rate,
            within_quota=config.within_quota,
            min_runtime_ms=config.min_runtime_ms,
        )
        outbox = outbox_builder(ctx.subjects)
        leader = Leadership(ctx, "ledger-relay")
        relay = OutboxRelay(store, ctx.js, ctx.log, ctx.park, leading=leader.acquired)
        server = RequestServer(ctx, store, outbox, relay.kick)
        consumer = LogConsumer(ctx, store, outbox, relay.kick)
        if not await consumer.start(ctx.stop):
            return

        async def sample() -> None:
            reached = await answers(engine, PROBE_TIMEOUT_S)
            ctx.metrics.postgres_up.labels("ledger").set(1 if reached else 0)
            ctx.metrics.consumer_lag.labels("ledger").set(await consumer.lag())

        sampler = Sampler(sample, ctx.log)
        try:
            await leader.start()
            await server.start()
            sampler.start()
            ctx.ready.set()
            ctx.log.info("ledger ready", offset=consumer.applied_seq, relay=leader.is_leader)
            async with asyncio.TaskGroup() as loops:
                loops.create_task(relay.run(ctx.stop))
                loops.create_task(server.run(ctx.stop))
                loops.create_task(consumer.run(ctx.stop))
            # Decisions committed by the last transactions go out before the process ends
            # (by the relay leader; a standby's commits are published by the leader's tick).
            await relay.flush_safely()
        finally:
            await sampler.stop()
            await leader.close()
            await server.close()
            await consumer.close()
    finally:
        await engine.dispose()


__all__ = ["create_engine", "main"]
