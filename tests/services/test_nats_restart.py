"""Services' NATS helpers ride out a real NATS restart (SIGKILL, then the same port and store,
as ``usher up`` does).

* A log follower resumes soon after, each entry exactly once. NATS keeps an ordered consumer
  in memory only, so the client must re-create it. Two followers: one that had received
  entries, and one that had received nothing yet (nats-py then re-creates it from sequence 1,
  before its start).
* ``retrying`` publishes through the outage: the entry is on the log once, not lost and not
  doubled; asked to stop meanwhile, it says so (``Stopping``) instead of hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from schemas import Envelope, EventId, QuotaTreeApplied
from services.common.retry import Backoff, Stopping, retrying
from services.common.runtime import connect
from services.common.settings import ServiceSettings
from tests.builders.trees import two_leaf_tree
from tests.services.helpers import log_events, publish
from usher.adapters.logs import get_logger
from usher.adapters.nats.follower import LogFollower
from usher.adapters.nats.log import ensure_streams, publish_envelope
from usher.adapters.nats.subjects import Subjects
from usher.core.protocol.log import LogEntry
from usher.local.servers import HOST, NatsServer


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
        # A test may end with the server down: closing then finds the socket already reset.
        with contextlib.suppress(ConnectionError):
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
            await publish(js, subjects.quota, QuotaTreeApplied(root=two_leaf_tree()))
            return
        except Exception:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)


def _kill(server: NatsServer) -> None:
    assert server.process is not None and server.process.popen is not None
    os.kill(server.process.popen.pid, signal.SIGKILL)
    server.process.popen.wait(timeout=10)


async def test_followers_resume_after_a_nats_restart_with_each_entry_once(
    server: NatsServer, nc: Client
) -> None:
    subjects = Subjects("restart")
    js = nc.jetstream()
    await ensure_streams(js, subjects)
    for _ in range(3):
        await publish(js, subjects.quota, QuotaTreeApplied(root=two_leaf_tree()))
    stop = asyncio.Event()
    had_entries: list[int] = []
    had_none: list[int] = []
    tasks = [
        asyncio.create_task(_follow(LogFollower(js, subjects, start_seq=2), stop, had_entries)),
        asyncio.create_task(_follow(LogFollower(js, subjects, start_seq=4), stop, had_none)),
    ]
    try:
        await _until(lambda: had_entries == [2, 3], 5)
        _kill(server)
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


async def test_a_publish_retried_through_a_restart_lands_once(
    server: NatsServer, nc: Client
) -> None:
    subjects = Subjects("retry")
    js = nc.jetstream()
    await ensure_streams(js, subjects)
    envelope = Envelope(
        id=EventId("retry:once"),
        time=datetime.now(UTC),
        source="test",
        event=QuotaTreeApplied(root=two_leaf_tree()),
    )

    async def once() -> object:
        return await publish_envelope(js, subjects.quota, envelope)

    _kill(server)
    log = get_logger(service="test")
    task = asyncio.create_task(retrying(once, "publishing", log, Backoff(0.2, 1.0)))
    await asyncio.sleep(2.0)  # several attempts time out while the server is away
    assert not task.done()
    server.launch().wait_for_port(HOST, server.port, 20)
    await asyncio.wait_for(task, timeout=20)
    events = await log_events(js, subjects)
    assert events == [envelope.event]


async def test_retrying_stops_when_the_service_stops(server: NatsServer, nc: Client) -> None:
    stop = asyncio.Event()

    async def never() -> object:
        return await nc.request("nobody.home", b"", timeout=0.2)

    _kill(server)
    task = asyncio.create_task(
        retrying(never, "reading", get_logger(service="test"), Backoff(0.1, 0.5), stop)
    )
    await asyncio.sleep(1.0)
    stop.set()
    with pytest.raises(Stopping):
        await asyncio.wait_for(task, timeout=2.0)
