"""deploy/postgres-roles.sql on the real test PostgreSQL: only the ledger's role writes."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from usher.adapters.pg.migrate import upgrade_async

ROLES_SQL = Path(__file__).resolve().parents[2] / "deploy" / "postgres-roles.sql"

INSERT_ALLOCATION = (
    "INSERT INTO allocations (workload, zone, quota_path, queue, requests, state)"
    " VALUES ('ns/job', 'a', 'root/a', 'q', '{}', 'admitted')"
)


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _as_role(url: str, role: str, statement: str) -> None:
    """Run ``statement`` with the privileges of ``role`` (SET ROLE from the test superuser)."""
    conn = await asyncpg.connect(_dsn(url))
    try:
        async with conn.transaction():
            await conn.execute(f"SET LOCAL ROLE {role}")
            await conn.execute(statement)
    finally:
        await conn.close()


async def _apply_roles(url: str) -> None:
    conn = await asyncpg.connect(_dsn(url))
    try:
        await conn.execute(ROLES_SQL.read_text())
    finally:
        await conn.close()


@pytest.fixture(params=["roles-then-migrations", "migrations-then-roles"])
async def granted_url(request: pytest.FixtureRequest, database_url: str) -> str:
    """A migrated database with the roles applied, in either order (bootstrap or upgrade)."""
    if request.param == "roles-then-migrations":
        await _apply_roles(database_url)
        await upgrade_async(database_url)
    else:
        await upgrade_async(database_url)
        await _apply_roles(database_url)
    return database_url


async def test_the_ledger_role_writes_allocations(granted_url: str) -> None:
    await _as_role(granted_url, "usher_ledger", INSERT_ALLOCATION)
    await _as_role(granted_url, "usher_ledger", "UPDATE allocations SET state = 'released'")


async def test_the_audit_role_reads_but_cannot_write(granted_url: str) -> None:
    await _as_role(granted_url, "usher_audit", "SELECT count(*) FROM allocations")
    for statement in (
        INSERT_ALLOCATION,
        "UPDATE allocations SET state = 'released'",
        "DELETE FROM outbox",
        "CREATE TABLE sneaky (id int)",
    ):
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await _as_role(granted_url, "usher_audit", statement)


async def test_the_ledger_role_cannot_change_the_schema(granted_url: str) -> None:
    for statement in ("CREATE TABLE sneaky (id int)", "DROP TABLE allocations",
                      "TRUNCATE allocations"):  # fmt: skip
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await _as_role(granted_url, "usher_ledger", statement)


async def test_the_roles_file_can_be_applied_twice(granted_url: str) -> None:
    await _apply_roles(granted_url)
