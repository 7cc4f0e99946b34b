"""Read-only reads of the ledger for ``usher audit``: allocations and the unpublished outbox.

What it does: opens a short-lived engine on the ledger database (``postgresql://`` URLs get the
asyncpg driver), reads every allocation (id, workload, quota path, state and its stamps) and
every outbox row not yet published, in id order, in one read-only transaction, and returns
them as the core's ``LedgerSnapshot``.
What it must never do: write anything, hold a connection after the call, or leak a driver
exception past ``LedgerUnavailable`` (whose message never shows a password).
"""

from __future__ import annotations

from sqlalchemy import select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from schemas import QuotaPath, WorkloadKey
from usher.adapters.pg.ledger_store import ALLOCATIONS, OUTBOX
from usher.core.audit import AllocationRecord, LedgerSnapshot, OutboxRecord

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


async def read_ledger(database_url: str) -> LedgerSnapshot:
    """Every allocation and every unpublished outbox row, in id order."""
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
            return LedgerSnapshot(
                allocations=await _allocations(conn), unpublished=await _unpublished(conn)
            )
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


__all__ = ["LedgerUnavailable", "read_ledger"]
