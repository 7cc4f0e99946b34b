"""``services.watcher.deliveries`` against a real HTTP receiver and the real DLQ on NATS.

A receiver that fails twice gets each CloudEvent until it accepts it, in order; one that never
answers has it dead-lettered after the last attempt; a full queue dead-letters at once, and
``offer`` never waits in any case.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from nats.aio.client import Client
from nats.js import JetStreamContext

from schemas import DeadLetter, decode
from services.common.runtime import ServiceContext
from services.common.settings import ServiceSettings, SettingsError, notify_url
from services.watcher.deliveries import CONTENT_TYPE, DeliveryOptions, WebhookDeliveries
from tests.conftest import Infra
from usher.adapters.logs import get_logger
from usher.adapters.nats.subjects import Subjects
from usher.local.processes import free_port

FAST = DeliveryOptions(attempts=3, backoff_base_s=0.01, backoff_cap_s=0.05, timeout_s=2.0)


class Receiver:
    """An HTTP server that answers 503 to its first ``failures`` requests, then 200."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.accepted: list[dict[str, Any]] = []
        self.port = free_port("127.0.0.1")

    async def handle(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        self.requests.append((request.headers["Content-Type"], body))
        if len(self.requests) <= self.failures:
            return web.Response(status=503)
        self.accepted.append(body)
        return web.Response(status=200)

    @property
    def url(self) -> str:
        return f"http://user:secret@127.0.0.1:{self.port}/hooks/usher?token=hidden"


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver(failures=2)
    app = web.Application()
    app.router.add_post("/hooks/usher", found.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", found.port).start()
    try:
        yield found
    finally:
        await runner.cleanup()


def context(infra: Infra, nc: Client, js: JetStreamContext, subjects: Subjects) -> ServiceContext:
    settings = ServiceSettings(nats_url=infra.nats_url, prefix=subjects.prefix)
    log = get_logger(service="watcher", test=subjects.prefix)
    return ServiceContext("watcher", settings, nc, js, subjects, asyncio.Event(), log)


def cloud(n: int) -> dict[str, Any]:
    return {"specversion": "1.0", "id": f"usher-{n}", "type": "io.usher.job.retried"}


async def letters(js: JetStreamContext, subjects: Subjects, count: int) -> list[DeadLetter]:
    for _ in range(200):
        info = await js.stream_info(subjects.dlq_stream_name)
        if info.state.messages >= count:
            break
        await asyncio.sleep(0.05)
    out = []
    for seq in range(max(info.state.first_seq, 1), info.state.last_seq + 1):
        msg = await js.get_msg(subjects.dlq_stream_name, seq)
        if msg.data is not None:
            out.append(decode(msg.data, DeadLetter))
    return out


async def until(check: Any) -> None:
    for _ in range(200):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("not within 10s")


async def test_a_failing_receiver_gets_each_event_until_it_accepts_in_order(
    infra: Infra, nc: Client, js: JetStreamContext, subjects: Subjects, receiver: Receiver
) -> None:
    ctx = context(infra, nc, js, subjects)
    deliveries = WebhookDeliveries(ctx, receiver.url, FAST)
    running = asyncio.create_task(deliveries.run())
    try:
        deliveries.offer(cloud(1))
        deliveries.offer(cloud(2))
        await until(lambda: deliveries.delivered == 2)
    finally:
        ctx.stop.set()
        await running
    assert [body["id"] for _, body in receiver.requests] == ["usher-1"] * 3 + ["usher-2"]
    assert {kind for kind, _ in receiver.requests} == {CONTENT_TYPE}
    assert receiver.accepted == [cloud(1), cloud(2)]


async def test_an_unreachable_receiver_dead_letters_after_the_last_attempt(
    infra: Infra, nc: Client, js: JetStreamContext, subjects: Subjects
) -> None:
    ctx = context(infra, nc, js, subjects)
    closed = f"http://127.0.0.1:{free_port('127.0.0.1')}/hook?token=hidden"
    deliveries = WebhookDeliveries(ctx, closed, FAST)
    running = asyncio.create_task(deliveries.run())
    try:
        deliveries.offer(cloud(7))
        [letter] = await letters(js, subjects, 1)
    finally:
        ctx.stop.set()
        await running
    assert letter.error == "WebhookUndelivered"
    assert json.loads(letter.data) == cloud(7)
    assert "after 3 attempts" in letter.detail
    assert "token" not in letter.detail and "hidden" not in letter.detail


async def test_a_full_queue_dead_letters_at_once_and_never_waits(
    infra: Infra, nc: Client, js: JetStreamContext, subjects: Subjects
) -> None:
    ctx = context(infra, nc, js, subjects)
    small = DeliveryOptions(queue_size=2)
    deliveries = WebhookDeliveries(ctx, "http://127.0.0.1:1/hook", small)  # not running
    for n in range(3):
        deliveries.offer(cloud(n))  # returns at once: nothing is delivering
    [letter] = await letters(js, subjects, 1)
    assert letter.error == "WebhookQueueFull"
    assert json.loads(letter.data) == cloud(2)


@pytest.mark.parametrize(
    "raw", ["ftp://u:pw@host/x", "http://", "hooks.example/x?t=pw", " http://u:pw@h/x"]
)
def test_a_notify_url_that_is_not_http_is_refused_without_echoing_it(raw: str) -> None:
    with pytest.raises(SettingsError) as refused:
        notify_url(raw)
    assert refused.value.name == "USHER_NOTIFY_URL"
    assert "pw" not in str(refused.value)


def test_an_empty_notify_url_is_no_webhook() -> None:
    assert notify_url("") is None
    assert notify_url("https://hooks.example/usher") == "https://hooks.example/usher"
