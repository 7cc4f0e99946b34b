"""A log follower rides out a NATS restart: it resumes soon after, each entry exactly once.

NATS keeps an ordered consumer in memory only, so after a real SIGKILL + restart (same port,
same store, as ``usher up`` does) the client must re-create it. Two followers: one that had
received entries, and one that had received nothing yet (nats-py then re-creates it from
sequence 1, before its start).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from schemas import QuotaTreeApplied
from services.common.follower import LogEntry, LogFollower
from services.common.runtime import connect
from services.common.settings import ServiceSettings
from tests.services.helpers import publish, tree
from usher.adapters.embedded.servers import HOST, NatsServer
from usher.adapters.nats.log import ensure_streams
from usher.adapters.nats.subjects import Subjects


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    nats_server = NatsServer(tmp_path)
    await asyncio.to_thread(nats_server.start)
    try:
        yield nats_server
    finally:
        await asyncio.to_thread(nats_server.stop)


@pytest.fixture
async def nc(server: NatsServer) -> AsyncIterator[Client]:
    client = await connect(ServiceSettings(nats_url=server.url), "follower-test")
    try:
        yield client
    finally:
        await client.close()


async def _follow(follower: LogFollower, stop: asyncio.Event, seen: list[int]) -> None:
    await follower.start()
    async for batch in follower.batches(stop):
        seen.extend(entry.seq for entry in batch if isinstance(entry, LogEntry))


async def _until(check: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def _publish_retrying(js: JetStreamContext, subjects: Subjects) -> None:
    """Publish once JetStream answers again (it restores its streams after the restart)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            await publish(js, subjects.quota, QuotaTreeApplied(root=tree()))
            return
        except Exception:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)


async def test_followers_resume_after_a_nats_restart_with_each_entry_once(
    server: NatsServer, nc: Client
) -> None:
    subjects = Subjects("restart")
    js = nc.jetstream()
    await ensure_streams(js, subjects)
    for _ in range(3):
        await publish(js, subjects.quota, QuotaTreeApplied(root=tree()))
    stop = asyncio.Event()
    had_entries: list[int] = []
    had_none: list[int] = []
    tasks = [
        asyncio.create_task(_follow(LogFollower(js, subjects, start_seq=2), stop, had_entries)),
        asyncio.create_task(_follow(LogFollower(js, subjects, start_seq=4), stop, had_none)),
    ]
    try:
        await _until(lambda: had_entries == [2, 3], 5)
        assert server.process is not None and server.process.popen is not None
        os.kill(server.process.popen.pid, signal.SIGKILL)
        server.process.popen.wait(timeout=10)
        await asyncio.sleep(0.5)
        server.launch().wait_for_port(HOST, server.port, 20)
        await _until(lambda: nc.is_connected, 20)
        for _ in range(3):
            await _publish_retrying(js, subjects)
        published = time.monotonic()
        await _until(lambda: had_entries[-1:] == [6] and had_none[-1:] == [6], 8)
        resumed_s = time.monotonic() - published
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert had_entries == [2, 3, 4, 5, 6]
    assert had_none == [4, 5, 6], "entries before its start or delivered twice"
    assert resumed_s < 5, f"followers were deaf for {resumed_s:.1f}s after the restart"
