"""Contract tests of the PostgreSQL adapter against a real server."""

from __future__ import annotations

import asyncpg
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from usher.adapters.pg.migrate import downgrade_async, upgrade_async
from usher.adapters.pg.models import Base

LEDGER_TABLES = {
    "allocations",
    "consumer_offsets",
    "decision_audit",
    "outbox",
    "quota_nodes",
    "quota_usage",
    "ended_workloads",
}


async def _tables(url: str) -> set[str]:
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    finally:
        await conn.close()
    return {r["tablename"] for r in rows} - {"alembic_version"}


async def test_upgrade_downgrade_upgrade_round_trip(database_url: str) -> None:
    await upgrade_async(database_url)
    assert await _tables(database_url) == LEDGER_TABLES
    await downgrade_async(database_url, "base")
    assert await _tables(database_url) == set()
    await upgrade_async(database_url)
    assert await _tables(database_url) == LEDGER_TABLES


async def test_migrations_match_the_models(migrated_url: str) -> None:
    """Alembic's autogenerate finds nothing to add: the migration creates the models."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    engine = create_async_engine(migrated_url)
    try:
        async with engine.connect() as conn:
            diff = await conn.run_sync(
                lambda sync: compare_metadata(MigrationContext.configure(sync), Base.metadata)
            )
    finally:
        await engine.dispose()
    assert diff == []


async def test_one_live_allocation_per_workload(migrated_url: str) -> None:
    """The partial unique index refuses a second live allocation of the same workload."""
    engine = create_async_engine(migrated_url)
    insert = text(
        "INSERT INTO allocations (workload, zone, quota_path, queue, requests, state) "
        "VALUES ('ns/a', 'default', 'root/a', 'root-a-ns', '{}', :state)"
    )
    try:
        async with engine.begin() as conn:
            await conn.execute(insert, {"state": "released"})
            await conn.execute(insert, {"state": "admitted"})
        import sqlalchemy.exc

        try:
            async with engine.begin() as conn:
                await conn.execute(insert, {"state": "reserved"})
        except sqlalchemy.exc.IntegrityError as exc:
            assert "uq_allocations_live_workload" in str(exc.orig)
        else:
            raise AssertionError("a second live allocation was accepted")
    finally:
        await engine.dispose()
