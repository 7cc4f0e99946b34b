"""Limits benchmark: what this machine's NATS JetStream and PostgreSQL can do, without Usher.

What it does: starts a fresh embedded NATS + PostgreSQL (the same servers and settings as the
stack suite and ``usher up``: JetStream with its default sync, PostgreSQL durable with fsync
on) in a temporary folder and measures the ceilings the services work under:
1. JetStream publish with acks, pipelined, of real encoded ``Envelope``s with the headers the
   services send (``Nats-Msg-Id`` included, so the server's duplicate check is paid):
   windows of gathered ``js.publish`` calls, and nats-py's ``publish_async`` (bounded pending
   acks); msg/s. Payloads are encoded before the clock starts.
2. JetStream ordered-consumer read of the whole stream just written (200,000+ entries; quick
   50,000+), msgspec-decoding each ``schemas.Envelope``; msg/s.
3. PostgreSQL batched insert: multi-row ``INSERT`` of 1,000 rows per statement (SQLAlchemy
   Core "insertmanyvalues" + asyncpg, one transaction per statement) into a scratch table
   shaped like ``allocations``; rows/s.
4. PostgreSQL single-row reservation transactions, shaped like the ledger's: ``BEGIN; SELECT
   ... FOR UPDATE`` one usage row; ``UPDATE`` it; ``INSERT`` one allocation-like row;
   ``COMMIT``; tx/s, sequentially on one connection, and with 8 connections at once, each on
   its own row (no lock waits, so group commit is what is measured).
What it must never do: print, touch the ledger's own tables, or pass or fail on a number; it
returns the numbers.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import UTC, datetime
from typing import Any

import nats
from nats.js import JetStreamContext
from nats.js.api import PubAck
from sqlalchemy import BigInteger, Column, Integer, MetaData, Table, Text, insert, select, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bench.common import fresh_servers, prepare_streams, read_stream
from schemas import (
    Envelope,
    EventId,
    Millis,
    PodSet,
    WorkloadKey,
    WorkloadObserved,
    Zone,
    cloudevent_headers,
    encode,
)
from usher.adapters.nats.subjects import Subjects

WINDOW = 500
"""Publishes gathered per window (the way ``bench/stack.py`` and the services pipeline)."""
ROWS_PER_STATEMENT = 1_000
CONCURRENT_CONNECTIONS = 8

scratch = MetaData()
bench_rows = Table(
    "bench_rows",
    scratch,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("workload", Text, nullable=False),
    Column("quota_path", Text, nullable=False),
    Column("requests", JSONB, nullable=False),
    Column("priority", BigInteger, nullable=False),
)
bench_usage = Table(
    "bench_usage",
    scratch,
    Column("id", Integer, primary_key=True),
    Column("used", BigInteger, nullable=False),
    Column("max", BigInteger, nullable=False),
)
bench_alloc = Table(
    "bench_alloc",
    scratch,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("usage_id", Integer, nullable=False),
    Column("workload", Text, nullable=False),
    Column("requests", JSONB, nullable=False),
)


# ---------------------------------------------------------------------- JetStream


def messages(subjects: Subjects, run: str, count: int) -> list[tuple[str, bytes, dict[str, str]]]:
    """``count`` distinct ``WorkloadObserved`` envelopes, encoded, with their headers."""
    now = datetime.now(UTC)
    out = []
    for n in range(count):
        namespace, name = f"ns-{n % 30}", f"{run}-{n}"
        envelope = Envelope(
            id=EventId(f"limits:{run}:{n}"),
            time=now,
            source="bench",
            event=WorkloadObserved(
                workload=WorkloadKey(f"{namespace}/{name}"),
                namespace=namespace,
                name=name,
                kind="batch/v1/Job",
                zone=Zone("default"),
                priority=n % 3,
                created_ms=Millis(n),
                pod_sets=[PodSet(name="main", count=1, requests={"cpu": 1000})],
            ),
        )
        subject = subjects.job(Zone("default"), namespace, name)
        out.append((subject, encode(envelope), cloudevent_headers(envelope, subjects.prefix)))
    return out


async def publish_windows(
    js: JetStreamContext, batch: list[tuple[str, bytes, dict[str, str]]]
) -> float:
    """Windows of ``WINDOW`` gathered ``js.publish`` calls, each waiting for its ack; msg/s."""
    began = time.perf_counter()
    for start in range(0, len(batch), WINDOW):
        await asyncio.gather(
            *(js.publish(s, p, headers=h) for s, p, h in batch[start : start + WINDOW])
        )
    return len(batch) / (time.perf_counter() - began)


async def publish_async(
    js: JetStreamContext, batch: list[tuple[str, bytes, dict[str, str]]]
) -> float:
    """nats-py ``publish_async`` (at most 4,000 acks pending), then every ack; msg/s."""
    began = time.perf_counter()
    futures: list[asyncio.Future[PubAck]] = []
    for subject, payload, headers in batch:
        futures.append(await js.publish_async(subject, payload, headers=headers))
    acks = await asyncio.gather(*futures)
    elapsed = time.perf_counter() - began
    if len(acks) != len(batch) or any(a.duplicate for a in acks):
        raise RuntimeError("publish_async lost or duplicated messages")
    return len(batch) / elapsed


async def measure_jetstream(nats_url: str, quick: bool) -> dict[str, float]:
    subjects = Subjects("limits")
    await prepare_streams(nats_url, subjects)
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        windowed = messages(subjects, "win", 20_000 if quick else 50_000)
        stream = messages(subjects, "async", 50_000 if quick else 200_000)
        # Warm-up: connections, the async reply subscription, the stream's first blocks.
        await publish_async(js, messages(subjects, "warm", 2_000))
        window_rate = await publish_windows(js, windowed)
        async_rate = await publish_async(js, stream)
        info = await js.stream_info(subjects.stream_name)
        total = int(info.state.messages)
        began = time.perf_counter()
        entries = await read_stream(js, subjects)
        read_rate = len(entries) / (time.perf_counter() - began)
        if len(entries) != total:
            raise RuntimeError(f"read {len(entries)} of {total} entries")
    finally:
        await nc.drain()
    return {
        "js_publish_window_per_s": window_rate,
        "js_publish_async_per_s": async_rate,
        "js_publish_pipelined_per_s": max(window_rate, async_rate),
        "js_read_entries": float(total),
        "js_ordered_read_decode_per_s": read_rate,
    }


# ---------------------------------------------------------------------- PostgreSQL


async def batched_insert(engine: AsyncEngine, count: int) -> float:
    """Multi-row INSERTs of ``ROWS_PER_STATEMENT`` rows, one transaction each; rows/s.

    SQLAlchemy's "insertmanyvalues" turns an executemany with RETURNING into one
    ``INSERT ... VALUES (...), (...) ... RETURNING id`` per page of 1,000 rows, compiled once
    (``insert().values(<list>)`` would be recompiled on every call and measure the compiler).
    """
    rows: list[dict[str, Any]] = [
        {
            "workload": f"ns-{n % 30}/job-{n}",
            "quota_path": f"root/p{n % 5}/l{n % 30}",
            "requests": {"cpu": 1000 * (1 + n % 20)},
            "priority": n % 3,
        }
        for n in range(count)
    ]
    statement = insert(bench_rows).returning(bench_rows.c.id)
    stored = 0
    began = time.perf_counter()
    for start in range(0, count, ROWS_PER_STATEMENT):
        async with engine.begin() as conn:
            result = await conn.execute(statement, rows[start : start + ROWS_PER_STATEMENT])
            stored += len(result.all())
    elapsed = time.perf_counter() - began
    if stored != count:
        raise RuntimeError(f"batched insert stored {stored} of {count} rows")
    return count / elapsed


async def reservations(engine: AsyncEngine, usage_id: int, count: int) -> None:
    """``count`` reservation transactions on one usage row, one after the other."""
    for n in range(count):
        async with engine.begin() as conn:
            row = (
                await conn.execute(
                    select(bench_usage.c.used, bench_usage.c.max)
                    .where(bench_usage.c.id == usage_id)
                    .with_for_update()
                )
            ).one()
            if row.used + 1 > row.max:
                raise RuntimeError("usage row full")
            await conn.execute(
                update(bench_usage)
                .where(bench_usage.c.id == usage_id)
                .values(used=bench_usage.c.used + 1)
            )
            await conn.execute(
                insert(bench_alloc).values(
                    usage_id=usage_id, workload=f"ns/job-{usage_id}-{n}", requests={"cpu": 1000}
                )
            )


async def measure_postgres(database_url: str, quick: bool) -> dict[str, float]:
    engine = create_async_engine(database_url, pool_size=CONCURRENT_CONNECTIONS + 2)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(scratch.drop_all)
            await conn.run_sync(scratch.create_all)
            await conn.execute(
                insert(bench_usage),
                [{"id": i, "used": 0, "max": 10**12} for i in range(CONCURRENT_CONNECTIONS + 1)],
            )
        await batched_insert(engine, 5_000)  # warm-up: connections, statement cache
        insert_rate = await batched_insert(engine, 50_000 if quick else 200_000)

        sequential = 500 if quick else 2_000
        await reservations(engine, 0, 50)  # warm-up
        began = time.perf_counter()
        await reservations(engine, 0, sequential)
        sequential_rate = sequential / (time.perf_counter() - began)

        each = 250 if quick else 1_000
        began = time.perf_counter()
        await asyncio.gather(
            *(reservations(engine, 1 + i, each) for i in range(CONCURRENT_CONNECTIONS))
        )
        concurrent_rate = CONCURRENT_CONNECTIONS * each / (time.perf_counter() - began)
        async with engine.begin() as conn:
            await conn.run_sync(scratch.drop_all)
    finally:
        await engine.dispose()
    return {
        "pg_batched_insert_rows_per_s": insert_rate,
        "pg_reservation_tx_per_s": sequential_rate,
        "pg_reservation_tx_8conn_per_s": concurrent_rate,
    }


def run(quick: bool) -> dict[str, float]:
    """Start fresh servers, measure JetStream then PostgreSQL, stop everything."""
    with fresh_servers("usher-bench-limits-") as servers:
        numbers = asyncio.run(measure_jetstream(servers.nats_url, quick))
        numbers.update(asyncio.run(measure_postgres(servers.database_url, quick)))
        return numbers


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    for key, value in run(quick).items():
        print(f"{key:<32} {value:>14,.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
