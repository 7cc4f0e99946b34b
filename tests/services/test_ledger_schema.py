"""The ledger refuses a schema behind this release's head, before it touches a table; only the
migration (the usher-migrate Job, `usher migrate`) changes the schema. Against real PostgreSQL
and NATS (the fixtures' servers)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from tests.conftest import Infra
from usher.adapters.nats.subjects import Subjects
from usher.adapters.pg.migrate import (
    SchemaBehind,
    head_revision,
    require_head,
    upgrade_async,
)

BIN = Path(sys.executable).parent


async def _require_head(url: str) -> str:
    engine = create_async_engine(url)
    try:
        return await require_head(engine)
    finally:
        await engine.dispose()


def _previous(revision: str) -> str:
    return f"{int(revision) - 1:04d}"


async def test_a_schema_behind_head_is_refused_naming_both_revisions(database_url: str) -> None:
    head = head_revision()
    with pytest.raises(SchemaBehind) as empty:
        await _require_head(database_url)
    assert (empty.value.current, empty.value.head) == (None, head)
    assert "no Usher schema" in str(empty.value)
    await upgrade_async(database_url, _previous(head))
    with pytest.raises(SchemaBehind) as behind:
        await _require_head(database_url)
    assert (behind.value.current, behind.value.head) == (_previous(head), head)
    assert str(behind.value) == (
        f"the database schema is at revision {_previous(head)}, this release needs revision "
        f"{head} (head): run the migration first (the usher-migrate Job, or `usher migrate`)"
    )
    await upgrade_async(database_url)
    assert await _require_head(database_url) == head


async def test_a_schema_ahead_of_head_is_served(database_url: str) -> None:
    """A later release migrated first (a rolling upgrade): this release's ledger still runs."""
    await upgrade_async(database_url)
    engine = create_async_engine(database_url)
    try:
        async with engine.begin() as conn:
            await conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
        assert await require_head(engine) == "9999"
    finally:
        await engine.dispose()


async def test_usher_run_ledger_stops_with_the_message_and_migrate_fixes_it(
    infra: Infra, js: object, subjects: Subjects, database_url: str, tmp_path: Path
) -> None:
    head = head_revision()
    await upgrade_async(database_url, _previous(head))
    url = make_url(database_url)
    env = {"USHER_HOME": str(tmp_path), "PATH": f"{BIN}:/usr/bin:/bin",
           "USHER_STARTUP_TIMEOUT_SECONDS": "5", "USHER_LEADER_ELECTION": "off",
           # As in the cluster: the URL without its password, which has its own variable.
           "USHER_DATABASE_URL": url.set(password=None).render_as_string(hide_password=False),
           "USHER_DATABASE_PASSWORD": str(url.password)}  # fmt: skip
    ledger = await asyncio.create_subprocess_exec(
        str(BIN / "usher"), "run", "ledger", "--nats", infra.nats_url, "--prefix",
        subjects.prefix, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(ledger.communicate(), 120)
    assert ledger.returncode == 4, err.decode()
    assert (
        err.decode()
        .strip()
        .endswith(
            f"usher: ledger: the database schema is at revision {_previous(head)}, this release "
            f"needs revision {head} (head): run the migration first (the usher-migrate Job, or "
            "`usher migrate`)"
        )
    )
    migrate = await asyncio.create_subprocess_exec(
        str(BIN / "usher"), "migrate", env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(migrate.communicate(), 120)
    assert migrate.returncode == 0, err.decode()
    assert out.decode() == "schema at head\n"
    assert await _require_head(database_url) == head
