"""Run the Alembic migrations of ``migrations/`` against a database URL.

What it does: builds an Alembic config in code (no ini file to find) and upgrades or
downgrades; usable from sync code and, through a worker thread, from asyncio code.
What it must never do: print or log the database URL's password.
"""

from __future__ import annotations

import asyncio
from importlib.resources import files

from alembic import command
from alembic.config import Config

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
