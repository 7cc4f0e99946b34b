"""Run the Alembic migrations of ``migrations/`` against a database URL.

What it does: builds an Alembic config in code (no ini file to find) and upgrades or
downgrades; usable from sync code and, through a worker thread, from asyncio code. Tells a
service whether the database's schema is behind this release's head (``require_head``).
What it must never do: print or log the database URL's password, or migrate on its own when
a service starts (only the migration Job, ``usher migrate``, changes the schema).
"""

from __future__ import annotations

import asyncio
from importlib.resources import files

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

MIGRATIONS_PACKAGE = "migrations"
"""Found by name, never imported: its ``env.py`` imports our models (usher/adapters/pg/models.py),
so an import back from here would make the two packages a cycle."""


def alembic_config(database_url: str) -> Config:
    """An Alembic config pointing at our migration scripts and ``database_url``."""
    config = Config()
    config.set_main_option("script_location", str(files(MIGRATIONS_PACKAGE)))
    # `%` must be doubled for configparser interpolation (URL-encoded passwords contain it).
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    config.attributes["configure_logger"] = False
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)


async def upgrade_async(database_url: str, revision: str = "head") -> None:
    """Upgrade from async code: env.py runs its own event loop, so use a thread."""
    await asyncio.to_thread(upgrade, database_url, revision)


async def downgrade_async(database_url: str, revision: str = "base") -> None:
    await asyncio.to_thread(downgrade, database_url, revision)


class SchemaBehind(Exception):
    """The database's schema is older than this release's: the migration has not run."""

    def __init__(self, current: str | None, head: str) -> None:
        at = f"revision {current}" if current else "no Usher schema"
        super().__init__(
            f"the database schema is at {at}, this release needs revision {head} (head): "
            "run the migration first (the usher-migrate Job, or `usher migrate`)"
        )
        self.current = current
        self.head = head


def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config(""))


def head_revision() -> str:
    """This release's head: the revision ``usher migrate`` upgrades to."""
    head = _scripts().get_current_head()
    assert head is not None, "migrations/ has no revision"
    return head


def _current_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


async def require_head(engine: AsyncEngine) -> str:
    """The schema's revision when it is this release's head or newer (a later release migrated
    first, as a rolling upgrade does: its migrations keep the old code working); raises
    ``SchemaBehind`` when it is older or missing."""
    script = _scripts()
    head = head_revision()
    async with engine.connect() as conn:
        current = await conn.run_sync(_current_revision)
    known = {revision.revision for revision in script.walk_revisions()}
    if current is None or (current != head and current in known):
        raise SchemaBehind(current, head)
    return current
