"""Shared fixtures: a real NATS JetStream server and a real PostgreSQL for every test.

Servers are started once per test session from the wheels (fsync off: throwaway data) unless
``USHER_NATS_URL`` / ``USHER_DATABASE_URL`` point at running ones. Each test gets its own
subject prefix and streams, and its own database, so tests never see each other's data.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import nats
import pytest
from hypothesis import settings
from nats.aio.client import Client
from nats.js import JetStreamContext
from sqlalchemy.engine import make_url

from usher.adapters.nats.log import delete_streams, ensure_streams
from usher.adapters.nats.subjects import Subjects
from usher.adapters.pg.migrate import upgrade_async
from usher.local.servers import NatsServer, PostgresServer

# No timing in tests: hypothesis' per-example deadline fails a property on a busy machine
# (two pytest workers, servers, a CI neighbour) although nothing is wrong; speed is measured
# by `make bench`.
settings.register_profile("usher", deadline=None)
settings.load_profile("usher")


@dataclass(frozen=True)
class Infra:
    nats_url: str
    database_url: str


@pytest.fixture(scope="session")
def infra(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Infra]:
    """URLs of the NATS and PostgreSQL servers of this session (started here if not given)."""
    nats_url = os.environ.get("USHER_NATS_URL")
    database_url = os.environ.get("USHER_DATABASE_URL")
    home = tmp_path_factory.mktemp("infra")
    started: list[NatsServer | PostgresServer] = []
    try:
        if not nats_url:
            server = NatsServer(home)
            started.append(server)
            nats_url = server.start()
        if not database_url:
            pg = PostgresServer(home, durable=False)
            started.append(pg)
            database_url = pg.start()
        yield Infra(nats_url=nats_url, database_url=database_url)
    finally:
        for running in reversed(started):
            if isinstance(running, PostgresServer):
                running.stop(remove_data=True)  # throwaway: as root it lives outside tmp
            else:
                running.stop()


@pytest.fixture
def subjects() -> Subjects:
    """A subject prefix no other test uses."""
    return Subjects(f"t{secrets.token_hex(4)}")


@pytest.fixture
async def nc(infra: Infra) -> AsyncIterator[Client]:
    client = await nats.connect(infra.nats_url, connect_timeout=5)
    try:
        yield client
    finally:
        await client.drain()


@pytest.fixture
async def js(nc: Client, subjects: Subjects) -> AsyncIterator[JetStreamContext]:
    """JetStream with this test's own log and DLQ streams, deleted afterwards."""
    context = nc.jetstream()
    await ensure_streams(context, subjects)
    try:
        yield context
    finally:
        await delete_streams(context, subjects)


def _asyncpg_dsn(url: str, database: str | None = None) -> str:
    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


@pytest.fixture
async def database_url(infra: Infra) -> AsyncIterator[str]:
    """A fresh, empty database for this test (dropped afterwards)."""
    name = f"t_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(_asyncpg_dsn(infra.database_url, "postgres"))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield make_url(infra.database_url).set(database=name).render_as_string(hide_password=False)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture
async def migrated_url(database_url: str) -> str:
    """A fresh database with the Alembic migrations applied to head."""
    await upgrade_async(database_url)
    return database_url


REPO = Path(__file__).resolve().parent.parent
