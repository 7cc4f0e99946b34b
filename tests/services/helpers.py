"""Test helpers shared by the service tests: run a service's ``main`` as a task, publish
events on a test's log, read entries back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar

import msgspec
import nats
from nats.js import JetStreamContext

from schemas import (
    Envelope,
    EventId,
    LogEvent,
    decode_envelope,
)
from services.common.runtime import ServiceContext, ServiceMain
from services.common.settings import ServiceSettings
from usher.adapters.logs import get_logger
from usher.adapters.nats.log import publish_envelope
from usher.adapters.nats.subjects import Subjects
from usher.core.protocol.subjects import prefix_of

T = TypeVar("T")
READY_TIMEOUT_S = 40.0
"""How long a service under test may take to be ready (its ``ctx.ready``)."""


@contextlib.asynccontextmanager
async def running(
    name: str, main: ServiceMain, settings: ServiceSettings, subjects: Subjects
) -> AsyncIterator[ServiceContext]:
    """Run ``main`` as service ``name`` until the block ends; fail if it crashed."""
    nc = await nats.connect(settings.nats_url, connect_timeout=5)
    ctx = ServiceContext(
        name=name,
        settings=settings,
        nc=nc,
        js=nc.jetstream(),
        subjects=subjects,
        stop=asyncio.Event(),
        log=get_logger(service=name),
    )
    task = asyncio.create_task(main(ctx))
    ready = asyncio.ensure_future(ctx.ready.wait())
    # Generous: on a loaded machine creating the leader bucket alone can take seconds, and a
    # test that went on before the service was ready would fail for the wrong reason.
    await asyncio.wait({task, ready}, timeout=READY_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
    ready.cancel()
    if task.done():
        task.result()  # raise what made the service end
    if not ctx.ready.is_set():
        ctx.stop.set()
        await asyncio.wait_for(task, timeout=10)
        await nc.drain()
        raise AssertionError(f"service {name} not ready within {READY_TIMEOUT_S} s")
    try:
        yield ctx
        assert not task.done() or task.exception() is None, task.exception()
    finally:
        ctx.stop.set()
        await asyncio.wait_for(task, timeout=10)
        await nc.drain()


_counter = iter(range(1, 10**9))


async def publish(js: JetStreamContext, subject: str, event: LogEvent) -> None:
    """Publish ``event`` on ``subject`` from its owner's source (``Subjects.owner_on``)."""
    _, source = Subjects(prefix_of(subject) or "usher").owner_on(event, subject)
    envelope = Envelope(
        id=EventId(f"test:{next(_counter)}"), time=datetime.now(UTC), source=source, event=event
    )
    await publish_envelope(js, subject, envelope)


async def log_events(js: JetStreamContext, subjects: Subjects) -> list[LogEvent]:
    info = await js.stream_info(subjects.stream_name)
    out: list[LogEvent] = []
    for seq in range(int(info.state.first_seq), int(info.state.last_seq) + 1):
        msg = await js.get_msg(subjects.stream_name, seq, direct=True)
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            out.append(decode_envelope(msg.data or b"").event)
    return out


async def eventually(
    check: Callable[[], Awaitable[T]], timeout_s: float = 5.0, every_s: float = 0.05
) -> T:
    """Poll an async ``check`` until it returns something truthy, or for ``timeout_s``;
    returns its last value (falsy when the time ran out). The one polling loop of the tests."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = await check()
        if value or loop.time() > deadline:
            return value
        await asyncio.sleep(every_s)
