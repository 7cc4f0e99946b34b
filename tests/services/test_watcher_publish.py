"""The watcher's pipelined publishing of observations, against real NATS JetStream.

* ``publish`` returns before the ack (the burst is on its way together); ``settle`` waits
  for the log to hold all of it.
* The events about one object land in the order they were published, each once, whatever
  the interleaving with other objects; a condition (``when``: "the log holds the object as
  live") is asked only after the log holds what was published before about it.
* A NATS restart (SIGKILL, same port and store) in the middle of a burst loses nothing,
  doubles nothing (the retried publish keeps its ``Nats-Msg-Id``) and reorders nothing about
  any object, although later events were published while earlier ones were unacknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from schemas import EventId, WorkloadDeleted, WorkloadKey, WorkloadObserved
from services.common.runtime import ServiceContext, connect
from services.common.settings import ServiceSettings
from services.watcher.observe import Publisher
from services.watcher.options import WatcherOptions
from services.watcher.projection import WatcherProjection
from services.watcher.translate import Outgoing
from tests.builders import events
from tests.conftest import Infra
from tests.services.test_nats_restart import _kill
from tests.services.test_watcher import read_log
from usher.adapters.logs import get_logger
from usher.adapters.nats.log import ensure_streams
from usher.adapters.nats.subjects import Subjects
from usher.core.engine.facade import Engine
from usher.local.servers import HOST, NatsServer

FAST = WatcherOptions(backoff_base_s=0.05, backoff_cap_s=0.3)
LOG = get_logger(service="watcher", test="publish")


def publisher(url: str, nc: Client, js: JetStreamContext, subjects: Subjects) -> Publisher:
    settings = ServiceSettings(nats_url=url, prefix=subjects.prefix)
    ctx = ServiceContext("watcher", settings, nc, js, subjects, asyncio.Event(), LOG)
    return Publisher(ctx, WatcherProjection.empty(Engine(settings.engine), subjects), FAST)


def observed(subjects: Subjects, n: int, version: int) -> Outgoing:
    """Workload ``n`` as its ``version``-th watch event shows it (its priority tells which)."""
    event = events.observed("user-a", f"job-{n}", 1, priority=version)
    subject = subjects.job(event.zone, event.namespace, event.name)
    return Outgoing(subject, EventId(f"test:job-{n}:{version}"), event)


def deleted(subjects: Subjects, n: int) -> Outgoing:
    event = WorkloadDeleted(workload=WorkloadKey(f"user-a/job-{n}"))
    subject = subjects.job(events.observed("user-a", "x", 1).zone, "user-a", f"job-{n}")
    return Outgoing(subject, EventId(f"test:job-{n}:deleted"), event)


async def versions(js: JetStreamContext, subjects: Subjects) -> dict[str, list[int | None]]:
    """Each workload's observations on the log, in log order (by the version they carry);
    fails on any Nats-Msg-Id the log holds twice."""
    logged = await read_log(js, subjects)
    ids = [entry.msg_id for entry in logged]
    assert len(ids) == len(set(ids)), "an observation is on the log twice"
    seen: dict[str, list[int | None]] = {}
    for entry in logged:
        if isinstance(entry.event, WorkloadObserved):
            seen.setdefault(entry.event.name, []).append(entry.event.priority)
    return seen


async def test_a_burst_is_sent_at_once_and_lands_in_order_per_object(
    infra: Infra, nc: Client, js: JetStreamContext, subjects: Subjects
) -> None:
    out = publisher(infra.nats_url, nc, js, subjects)
    for n in range(100):
        assert await out.publish(observed(subjects, n, 1), LOG)
    assert out.unacknowledged == 100  # all on their way, none awaited yet
    for version in (2, 3, 4):
        for n in range(100):
            assert await out.publish(observed(subjects, n, version), LOG)
    await out.settle()
    assert out.unacknowledged == 0
    assert await versions(js, subjects) == {f"job-{n}": [1, 2, 3, 4] for n in range(100)}
    # Already said: not news, not published again.
    assert not await out.publish(observed(subjects, 7, 4), LOG)


async def test_a_condition_is_asked_once_the_earlier_events_about_the_object_landed(
    infra: Infra, nc: Client, js: JetStreamContext, subjects: Subjects
) -> None:
    out = publisher(infra.nats_url, nc, js, subjects)
    view = out._view
    # Created and deleted before the creation's ack came back: the deletion must still be
    # told (the log holds the job as live by then), or the log would keep a job that is gone.
    assert await out.publish(observed(subjects, 1, 1), LOG)
    assert await out.publish(deleted(subjects, 1), LOG, when=view.knows_live)
    # Never observed: its deletion is not news.
    assert not await out.publish(deleted(subjects, 2), LOG, when=view.knows_live)
    await out.settle()
    logged = [entry.event for entry in await read_log(js, subjects)]
    assert [type(event) for event in logged] == [WorkloadObserved, WorkloadDeleted]


# --------------------------------------------------------------------------- a restart


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    nats_server = NatsServer(tmp_path)
    await asyncio.to_thread(nats_server.start)
    try:
        yield nats_server
    finally:
        await asyncio.to_thread(nats_server.stop)


@pytest.fixture
async def own_nc(server: NatsServer) -> AsyncIterator[Client]:
    client = await connect(ServiceSettings(nats_url=server.url), "watcher-publish-test")
    try:
        yield client
    finally:
        with contextlib.suppress(ConnectionError):
            await client.close()


async def test_a_nats_restart_mid_burst_loses_doubles_and_reorders_nothing(
    server: NatsServer, own_nc: Client
) -> None:
    subjects = Subjects("restart-burst")
    js = own_nc.jetstream()
    await ensure_streams(js, subjects)
    out = publisher(server.url, own_nc, js, subjects)
    count = 200
    for n in range(count):
        await out.publish(observed(subjects, n, 1), LOG)
    await out.settle()
    for n in range(count // 2):
        await out.publish(observed(subjects, n, 2), LOG)
    await asyncio.sleep(0.01)  # the first half on its way (some of it acknowledged)...
    for n in range(count // 2, count):
        await out.publish(observed(subjects, n, 2), LOG)
    _kill(server)  # ... the second half not even written to the socket yet

    await asyncio.sleep(0.3)  # the client knows it is disconnected: it buffers what follows

    async def third_burst() -> None:
        for n in range(count):
            await out.publish(observed(subjects, n, 3), LOG)

    # Published while the server is away: nats-py would send it first thing after the
    # reconnect, ahead of the second burst's retries (its unanswered requests time out later).
    later = asyncio.create_task(third_burst())
    await asyncio.sleep(0.7)
    server.launch().wait_for_port(HOST, server.port, 20)
    await asyncio.wait_for(later, timeout=60)
    await asyncio.wait_for(out.settle(), timeout=60)
    assert await versions(js, subjects) == {f"job-{n}": [1, 2, 3] for n in range(count)}
