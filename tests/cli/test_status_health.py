"""`usher status` asks each service's /healthz (issue 26): a service whose NATS connection is
down past its limit is named unhealthy, with the reason, and the status is not well. A real
``HealthServer`` on 127.0.0.1 whose connection watch has seen the connection go."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime

from services.common.health import ConnectionWatch, HealthServer
from services.common.metrics import Metrics
from usher.adapters.stack_file import StackInfo
from usher.cli.stack import health_problem, status_of
from usher.local.processes import free_port


async def test_status_names_a_service_whose_nats_connection_is_down_too_long() -> None:
    now = [0.0]
    watch = ConnectionWatch(30.0, clock=lambda: now[0])
    health = HealthServer(Metrics(), lambda: True, watch=watch)
    port = await health.start("127.0.0.1", 0)
    assert port is not None
    info = StackInfo(
        home="/nowhere", nats_url="", database_url="", prefix="usher", pids={},
        started_at=datetime.now(UTC), service_pids={"watcher": os.getpid()},
        health_ports={"watcher": port},
    )  # fmt: skip
    try:
        assert await asyncio.to_thread(health_problem, port) == ""
        [well] = (await asyncio.to_thread(status_of, info)).processes
        assert well.well and well.state == "running"
        watch.disconnected()
        now[0] = 45.0
        [down] = (await asyncio.to_thread(status_of, info)).processes
        assert down.alive and not down.well
        assert down.state == "unhealthy: nats connection down for 45s (limit 30s)"
        watch.reconnected()
        assert await asyncio.to_thread(health_problem, port) == ""
    finally:
        await health.stop()


def test_a_service_that_does_not_answer_is_unhealthy() -> None:
    assert health_problem(free_port()) == "/healthz does not answer (Connection refused)"
