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


async def _fetch_as(url: str, role: str, query: str) -> list[asyncpg.Record]:
    """Rows of ``query`` read with the privileges of ``role``."""
    conn = await asyncpg.connect(_dsn(url))
    try:
        async with conn.transaction():
            await conn.execute(f"SET LOCAL ROLE {role}")
            return list(await conn.fetch(query))
    finally:
        await conn.close()


GRANTS = """
SELECT grantee, table_name, privilege_type FROM information_schema.role_table_grants
 WHERE grantee IN ('usher_ledger', 'usher_audit') AND table_schema = 'public'
UNION ALL
SELECT r.rolname, c.relname, p.privilege_type
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  CROSS JOIN pg_roles r
  CROSS JOIN (VALUES ('USAGE'), ('SELECT'), ('UPDATE')) AS p(privilege_type)
 WHERE n.nspname = 'public' AND c.relkind = 'S' AND r.rolname IN ('usher_ledger', 'usher_audit')
   AND has_sequence_privilege(r.rolname, c.oid, p.privilege_type)
UNION ALL
SELECT 'default:' || pg_get_userbyid(d.defaclrole), d.defaclobjtype::text, d.defaclacl::text
  FROM pg_default_acl d
UNION ALL
SELECT 'database', datname, datacl::text FROM pg_database WHERE datname = current_database()
UNION ALL
SELECT 'schema', nspname, nspacl::text FROM pg_namespace WHERE nspname = 'public'
ORDER BY 1, 2, 3
"""
"""Every privilege the roles file gives: on tables, sequences, future objects, the database
and the schema (ACLs as text, so a grant given twice or lost shows as a difference)."""


async def _grants(url: str) -> list[tuple[str, str, str]]:
    conn = await asyncpg.connect(_dsn(url))
    try:
        return [(r[0], r[1], r[2]) for r in await conn.fetch(GRANTS)]
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
    read = "SELECT workload, quota_path, state FROM allocations"
    # The row the ledger wrote is there, updated, for the ledger and for the audit to read.
    for role in ("usher_ledger", "usher_audit"):
        rows = await _fetch_as(granted_url, role, read)
        assert [tuple(r) for r in rows] == [("ns/job", "root/a", "released")], role
    # ... and the same writes are refused to the audit role.
    for statement in (INSERT_ALLOCATION, "UPDATE allocations SET state = 'admitted'"):
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await _as_role(granted_url, "usher_audit", statement)
    assert len(await _fetch_as(granted_url, "usher_ledger", read)) == 1


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
    before = await _grants(granted_url)
    ledger_tables = {table for who, table, _ in before if who == "usher_ledger"}
    assert {"allocations", "outbox", "quota_usage"} <= ledger_tables
    await _apply_roles(granted_url)
    assert await _grants(granted_url) == before
    # Still usable as before: the ledger writes, the audit reads.
    await _as_role(granted_url, "usher_ledger", INSERT_ALLOCATION)
    rows = await _fetch_as(granted_url, "usher_audit", "SELECT count(*) FROM allocations")
    assert rows[0][0] == 1
