"""Read-only reads of the ledger for ``usher audit`` and ``usher usage``.

What it does: opens a short-lived engine on the ledger database (``postgresql://`` URLs get the
asyncpg driver), reads every allocation (id, workload, quota path, state and its stamps),
every outbox row not yet published, in id order, and the allocation intervals (U1: from
``admitted_at`` to ``preempted_at``, else ``released_at``, else still held) in one read-only
transaction, and returns them as the core's ``LedgerSnapshot``; ``read_usage_intervals``
reads only the intervals that overlap a window, for ``usher usage --source ledger``.
What it must never do: write anything, hold a connection after the call, or leak a driver
exception past ``LedgerUnavailable`` (whose message never shows a password).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from sqlalchemy import ColumnElement, func, or_, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from schemas import Millis, QueueName, QuotaPath, WorkloadKey
from usher.adapters.pg.ledger_store import ALLOCATIONS, OUTBOX
from usher.core.history.audit import AllocationRecord, LedgerSnapshot, OutboxRecord
from usher.core.history.replay import to_datetime
from usher.core.history.usage import Interval
from usher.core.protocol.log import datetime_ms

_ASYNCPG = "postgresql+asyncpg"
CONNECT_TIMEOUT_S = 5


class LedgerUnavailable(Exception):
    """The ledger database could not be read; ``url`` is redacted."""

    def __init__(self, url: str, detail: str) -> None:
        super().__init__(f"cannot read the ledger at {url}: {detail}")
        self.url = url
        self.detail = detail


def _redacted(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable database URL>"


T = TypeVar("T")


async def read_ledger(database_url: str) -> LedgerSnapshot:
    """Every allocation, every unpublished outbox row (in id order) and every interval."""

    async def work(conn: AsyncConnection) -> LedgerSnapshot:
        return LedgerSnapshot(
            allocations=await _allocations(conn),
            unpublished=await _unpublished(conn),
            intervals=await _intervals(conn, None, None),
        )

    return await _read(database_url, work)


async def read_usage_intervals(
    database_url: str, since_ms: Millis | None, until_ms: Millis | None
) -> list[Interval]:
    """The allocation intervals that overlap ``[since, until)`` (U1), in allocation id order."""

    async def work(conn: AsyncConnection) -> list[Interval]:
        return await _intervals(conn, since_ms, until_ms)

    return await _read(database_url, work)


async def _read(database_url: str, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    """``work`` in one read-only transaction on a short-lived engine."""
    shown = _redacted(database_url)
    try:
        url = make_url(database_url)
    except ArgumentError as exc:
        raise LedgerUnavailable(shown, "not a database URL") from exc
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername=_ASYNCPG)
    if url.drivername != _ASYNCPG:
        raise LedgerUnavailable(shown, f"driver {url.drivername!r} is not {_ASYNCPG}")
    engine = create_async_engine(url, connect_args={"timeout": CONNECT_TIMEOUT_S})
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SET TRANSACTION READ ONLY"))
            return await work(conn)
    except (OSError, TimeoutError, SQLAlchemyError) as exc:
        detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        raise LedgerUnavailable(shown, f"{type(exc).__name__}: {detail}") from exc
    finally:
        await engine.dispose()


async def _allocations(conn: AsyncConnection) -> list[AllocationRecord]:
    a = ALLOCATIONS.c
    rows = await conn.execute(
        select(
            a.id,
            a.workload,
            a.quota_path,
            a.state,
            a.reserved_at,
            a.admitted_at,
            a.preempted_at,
            a.released_at,
            a.release_cause,
            a.preemptor,
        ).order_by(a.id)
    )
    return [
        AllocationRecord(
            id=row.id,
            workload=WorkloadKey(row.workload),
            quota=QuotaPath(row.quota_path),
            state=row.state,
            reserved_at=row.reserved_at,
            admitted_at=row.admitted_at,
            preempted_at=row.preempted_at,
            released_at=row.released_at,
            release_cause=row.release_cause,
            preemptor=WorkloadKey(row.preemptor) if row.preemptor is not None else None,
        )
        for row in rows
    ]


async def _unpublished(conn: AsyncConnection) -> list[OutboxRecord]:
    o = OUTBOX.c
    rows = await conn.execute(
        select(o.id, o.event_id, o.subject, o.created_at)
        .where(o.published_at.is_(None))
        .order_by(o.id)
    )
    return [
        OutboxRecord(
            id=row.id, event_id=row.event_id, subject=row.subject, created_at=row.created_at
        )
        for row in rows
    ]


def _interval_end() -> ColumnElement[datetime]:
    """Where an allocation's interval ends: its preemption (or requeue), else its release."""
    a = ALLOCATIONS.c
    return func.coalesce(a.preempted_at, a.released_at)


async def _intervals(
    conn: AsyncConnection, since_ms: Millis | None, until_ms: Millis | None
) -> list[Interval]:
    """Allocations that were admitted, as intervals; only those overlapping the window."""
    a = ALLOCATIONS.c
    end = _interval_end()
    query = select(
        a.workload, a.quota_path, a.queue, a.requests, a.admitted_at, end.label("ended_at")
    ).where(a.admitted_at.is_not(None))
    if until_ms is not None:
        query = query.where(a.admitted_at < to_datetime(until_ms))
    if since_ms is not None:
        query = query.where(or_(end.is_(None), end > to_datetime(since_ms)))
    rows = await conn.execute(query.order_by(a.id))
    return [
        Interval(
            workload=WorkloadKey(row.workload),
            quota=QuotaPath(row.quota_path),
            queue=QueueName(row.queue),
            requests={str(k): int(v) for k, v in row.requests.items()},
            start_ms=datetime_ms(row.admitted_at),
            end_ms=datetime_ms(row.ended_at) if row.ended_at is not None else None,
        )
        for row in rows
    ]


__all__ = ["LedgerUnavailable", "read_ledger", "read_usage_intervals"]
