"""The ledger's store rides out a real PostgreSQL restart between two transactions.

A server of its own (the session's is shared) is SIGKILLed and started again on the same port
with the same data, as ``usher up`` does. The store's engine is the ledger's own
(``services.ledger.service.create_engine``): its pool holds connections to the dead server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.common.settings import ServiceSettings
from services.ledger.service import create_engine
from tests.builders.events import CORE
from tests.builders.events import reservation as res
from tests.builders.trees import users_tree as tree
from usher.adapters.pg.ledger_store import LedgerStore, LedgerTransientError
from usher.adapters.pg.migrate import upgrade_async
from usher.local.servers import HOST, PostgresServer

LEAF = "root/Department-a/user-a"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[PostgresServer]:
    pg = PostgresServer(tmp_path)
    await asyncio.to_thread(pg.start)
    try:
        yield pg
    finally:
        await asyncio.to_thread(pg.stop)


@pytest.fixture
async def engine(server: PostgresServer) -> AsyncIterator[AsyncEngine]:
    await upgrade_async(server.url)
    ledger_engine = create_engine(
        ServiceSettings(nats_url="nats://unused", database_url=server.url)
    )
    try:
        yield ledger_engine
    finally:
        await ledger_engine.dispose()


async def _fill_pool(store: LedgerStore) -> None:
    """Several transactions at once: the pool keeps several connections open."""
    await asyncio.gather(*(store.usage() for _ in range(4)))


def _crash_and_relaunch(server: PostgresServer) -> None:
    """SIGKILL the postmaster and start it again on the same port and data (no waiting)."""
    assert server.process is not None and server.process.popen is not None
    os.kill(server.process.popen.pid, signal.SIGKILL)
    server.process.popen.wait(timeout=10)
    port = server.port
    deadline = time.monotonic() + 20
    while True:  # its backends exit on their own once they see the postmaster gone
        process = server.launch()
        assert server.port == port
        try:
            process.wait_for_port(HOST, port, timeout=20)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


async def test_a_transaction_during_crash_recovery_is_transient_never_permanent(
    server: PostgresServer, engine: AsyncEngine
) -> None:
    """Right after the restart the server replays its WAL and refuses sessions (57P03): the
    store says "try again" (transient) until it works; it must never call that permanent
    (the log consumer would park the entry and move past it)."""
    store = LedgerStore(engine)
    await store.apply_tree(tree(), version=1)
    first = await store.reserve([res("first", LEAF, 10)])
    assert first[0].granted
    await _fill_pool(store)
    await asyncio.to_thread(_crash_and_relaunch, server)
    transient = 0
    deadline = time.monotonic() + 30
    while True:
        try:
            second = await store.reserve([res("second", LEAF, 5)])
            break
        except LedgerTransientError:
            transient += 1
            assert time.monotonic() < deadline, "the store never recovered"
            await asyncio.sleep(0.05)
    assert second[0].granted
    usage = await store.usage()
    assert usage[LEAF] == {"cpu": 15 * CORE}, "the committed reservation survived the crash"


async def test_the_pool_drops_connections_to_the_dead_server(
    server: PostgresServer, engine: AsyncEngine
) -> None:
    """Once the restarted server takes sessions, the very next transaction works: the pooled
    connections to the killed server are dropped, not handed out until they run out."""
    store = LedgerStore(engine)
    await store.apply_tree(tree(), version=1)
    await _fill_pool(store)
    await asyncio.to_thread(_crash_and_relaunch, server)
    password = quote(server.superuser_password, safe="")
    dsn = f"postgresql://usher:{password}@{HOST}:{server.port}/usher"
    deadline = time.monotonic() + 30
    while True:  # a session of our own: the server has finished its recovery
        try:
            probe = await asyncpg.connect(dsn)
            await probe.close()
            break
        except (asyncpg.CannotConnectNowError, OSError):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
    results = await store.reserve([res("after", LEAF, 7)])
    assert results[0].granted
    assert (await store.usage())[LEAF] == {"cpu": 7 * CORE}
