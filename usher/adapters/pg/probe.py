"""Whether PostgreSQL answers: one ``SELECT 1`` on a pooled connection, bounded in time.

What it does: ``answers`` runs ``SELECT 1`` through the engine's pool and says whether it came
back within ``timeout_s`` (the ledger's ``usher_postgres_up``, which the alert
UsherPostgresUnavailable reads where no CloudNativePG exporter runs).
What it must never do: raise, wait longer than asked, or write anything.
"""

from __future__ import annotations

import asyncio

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine


async def answers(engine: AsyncEngine, timeout_s: float) -> bool:
    """Whether ``SELECT 1`` answers within ``timeout_s`` (a refused, broken or hung server:
    False)."""
    try:
        async with asyncio.timeout(timeout_s):
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
    except (SQLAlchemyError, OSError, TimeoutError):
        return False
    return True
