"""A service's /healthz, /readyz and gauges tell the truth about its NATS connection
(issue 26): the real ``runtime.serve`` of a service against a real nats-server that is stopped
for longer than the limit, then started again on the same port and store."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import nats
import pytest
from prometheus_client.parser import text_string_to_metric_families

from services.common.health import FLAP_LIMIT, ConnectionWatch
from services.common.runtime import ServiceContext, serve
from services.common.settings import ServiceSettings, SettingsError, nats_down_limit
from usher.adapters.nats.log import ensure_streams
from usher.adapters.nats.subjects import Subjects
from usher.local.servers import NatsServer

DOWN_LIMIT_S = 1.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    nats_server = NatsServer(tmp_path)
    await asyncio.to_thread(nats_server.start)
    nc = await nats.connect(nats_server.url)
    await ensure_streams(nc.jetstream(), Subjects("usher"))
    await nc.close()
    try:
        yield nats_server
    finally:
        await asyncio.to_thread(nats_server.stop)


async def _until(check: Callable[[], object], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():  # type: ignore[misc]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


class Probe:
    def __init__(self, session: aiohttp.ClientSession, port: int) -> None:
        self.session = session
        self.base = f"http://127.0.0.1:{port}"

    async def status(self, path: str) -> tuple[int, str]:
        async with self.session.get(f"{self.base}{path}") as response:
            return response.status, await response.text()

    async def gauges(self) -> dict[str, float]:
        _, text = await self.status("/metrics")
        wanted = {"usher_up", "usher_nats_connected"}
        return {
            sample.name: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name in wanted
        }

    async def shows(self, healthz: int, readyz: int, up: float, connected: float) -> bool:
        try:
            gauges = await self.gauges()
            return (
                (await self.status("/healthz"))[0] == healthz
                and (await self.status("/readyz"))[0] == readyz
                and gauges == {"usher_up": up, "usher_nats_connected": connected}
            )
        except aiohttp.ClientError:
            return False


async def test_a_lost_nats_connection_fails_the_probes_and_the_gauges(
    server: NatsServer,
) -> None:
    port = _free_port()
    settings = ServiceSettings(
        nats_url=server.url, metrics_port=port, nats_down_limit_s=DOWN_LIMIT_S
    )
    contexts: list[ServiceContext] = []

    async def main(ctx: ServiceContext) -> None:
        contexts.append(ctx)
        ctx.ready.set()
        await ctx.stop.wait()

    service = asyncio.create_task(serve("probe-test", settings, main))
    try:
        async with aiohttp.ClientSession() as session:
            probe = Probe(session, port)
            await _until(lambda: probe.shows(200, 200, 1.0, 1.0))
            await asyncio.to_thread(server.stop)
            # Not connected: not ready at once, still alive within the limit (a NATS restart
            # is ridden out), then not alive, with the reason.
            await _until(lambda: probe.shows(503, 503, 0.0, 0.0))
            status, text = await probe.status("/healthz")
            assert status == 503 and "nats connection down for" in text
            assert f"(limit {DOWN_LIMIT_S:g}s)" in text
            assert not service.done(), "the service itself goes on reconnecting"
            await asyncio.to_thread(server.start)
            await _until(lambda: probe.shows(200, 200, 1.0, 1.0))
    finally:
        if contexts:
            contexts[0].stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(service, timeout=15)
    # The loop outlives the service: a Ctrl-C raises KeyboardInterrupt again (a handler left
    # behind made every later SIGINT in this process set a dead event).
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_liveness_holds_through_a_short_loss_and_fails_on_a_long_one_or_flapping() -> None:
    now = [100.0]
    watch = ConnectionWatch(30.0, clock=lambda: now[0])
    assert watch.problem() is None and watch.connected
    watch.disconnected()
    now[0] += 30.0
    assert watch.problem() is None and not watch.connected  # within the limit
    now[0] += 0.5
    assert watch.problem() == "nats connection down for 30s (limit 30s)"
    watch.reconnected()
    assert watch.problem() is None
    for _ in range(FLAP_LIMIT - 1):  # each loss short, but the server keeps dropping it
        now[0] += 1.0
        watch.disconnected()
        watch.reconnected()
    assert watch.problem() == f"nats connection lost {FLAP_LIMIT} times in 120s"
    now[0] += 121.0
    assert watch.problem() is None


@pytest.mark.parametrize("raw", ["0", "0.5", "3601", "nan", "inf", "1e3", " 5", "\uff15", ""])
def test_the_down_limit_is_seconds_from_1_to_3600(raw: str) -> None:
    with pytest.raises(SettingsError) as refused:
        nats_down_limit(raw)
    assert refused.value.name == "nats-down-limit"
    assert nats_down_limit("30") == 30.0 and nats_down_limit("1.5") == 1.5
