"""Fixtures of the ledger store's contract tests: an engine on this test's migrated database and
a store over the test module's ``ledger_tree``. Never seeds allocations (each test does)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from schemas import QuotaNode
from usher.adapters.pg.ledger_store import LedgerStore


@pytest.fixture
async def engine(migrated_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(migrated_url, pool_size=10, max_overflow=0)
    try:
        yield eng
    finally:
        await eng.dispose()


@pytest.fixture
async def store(engine: AsyncEngine, ledger_tree: QuotaNode) -> LedgerStore:
    """The store with ``ledger_tree`` applied as version 1 (a module defines which tree)."""
    s = LedgerStore(engine)
    await s.apply_tree(ledger_tree, version=1)
    return s
