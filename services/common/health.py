"""The HTTP side of a service process: ``/metrics``, ``/healthz`` and ``/readyz``.

What it does: serves, with aiohttp, the process's Prometheus registry in the text exposition
format on ``/metrics``; on ``/healthz`` (liveness) 200 while the process can still do its work
and 503 with the reason once it cannot: its NATS connection has been down longer than
``nats_down_limit_s`` (30 s by default: the client retries every 0.5 s with a 5 s connect
timeout, so about five full reconnects failed) or was lost ``FLAP_LIMIT`` times within
``FLAP_WINDOW_S`` (a connection the server keeps dropping, e.g. on a message it refuses), so
Kubernetes restarts the pod; on ``/readyz`` 200 once the service said it is ready
(``ServiceContext.ready``) and its NATS connection is up, 503 otherwise. The gauges
``usher_up`` (1 while ``/healthz`` would answer 200) and ``usher_nats_connected`` say the same
to Prometheus, whose own ``up`` only says the scrape worked. Binds ``USHER_METRICS_HOST``
(default 127.0.0.1: local runs expose nothing; the deploy sets 0.0.0.0) and
``USHER_METRICS_PORT`` (default 9102, 0 picks a free port, -1 turns the server off).
What it must never do: stop a service because the port is taken (several services of one
``usher up`` share a host: it logs and runs without the endpoint), serve anything that
changes state, or block the event loop (rendering the registry is a few milliseconds).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiohttp import web

from services.common.metrics import CONTENT_TYPE_LATEST, Metrics

__all__ = ["ConnectionWatch", "HealthServer"]

ReadyCheck = Callable[[], bool]
ProblemCheck = Callable[[], "str | None"]
FLAP_LIMIT = 5
"""Connections lost within ``FLAP_WINDOW_S`` after which the process is not alive."""
FLAP_WINDOW_S = 120.0


class ConnectionWatch:
    """When the NATS connection went down and how often: the liveness of a service.

    Fed by the client's disconnected/reconnected callbacks; ``clock`` is monotonic seconds.
    """

    def __init__(self, down_limit_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.down_limit_s = down_limit_s
        self._clock = clock
        self.down_since: float | None = None
        self._losses: deque[float] = deque(maxlen=FLAP_LIMIT)

    def disconnected(self) -> None:
        now = self._clock()
        if self.down_since is None:
            self.down_since = now
            self._losses.append(now)

    def reconnected(self) -> None:
        self.down_since = None

    @property
    def connected(self) -> bool:
        return self.down_since is None

    def problem(self) -> str | None:
        """Why the process is not alive, or None while it is."""
        now = self._clock()
        if self.down_since is not None and now - self.down_since > self.down_limit_s:
            return (
                f"nats connection down for {now - self.down_since:.0f}s "
                f"(limit {self.down_limit_s:g}s)"
            )
        recent = [t for t in self._losses if now - t <= FLAP_WINDOW_S]
        if len(recent) >= FLAP_LIMIT:
            return f"nats connection lost {len(recent)} times in {FLAP_WINDOW_S:g}s"
        return None


class HealthServer:
    """One aiohttp site per process; ``port`` is the bound port once started (None: off)."""

    def __init__(
        self,
        metrics: Metrics,
        ready: ReadyCheck,
        log: Any = None,
        watch: ConnectionWatch | None = None,
    ) -> None:
        self._metrics = metrics
        self._ready = ready
        self._log = log
        self._watch = watch
        metrics.up.set_function(lambda: 0.0 if self.problem() else 1.0)
        metrics.nats_connected.set_function(
            lambda: 1.0 if watch is None or watch.connected else 0.0
        )
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.host: str | None = None

    async def start(self, host: str, port: int) -> int | None:
        """Listen on ``host:port`` (0: a free port); the bound port, or None when off."""
        if port < 0:
            return None
        app = web.Application()
        app.router.add_get("/metrics", self._serve_metrics)
        app.router.add_get("/healthz", self._serve_health)
        app.router.add_get("/readyz", self._serve_ready)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            # Port taken (another service of a local stack on the default port): metrics are
            # an aid, never a reason not to run.
            await runner.cleanup()
            if self._log is not None:
                self._log.warning(
                    "metrics endpoint not started", host=host, port=port, error=str(exc)
                )
            return None
        self._runner = runner
        self.host = host
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1]) if sockets else port
        if self._log is not None:
            self._log.info("metrics endpoint serving", host=host, port=self.port)
        return self.port

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _serve_metrics(self, request: web.Request) -> web.Response:
        body = self._metrics.render()
        # CONTENT_TYPE_LATEST carries its own charset parameter: set the header verbatim.
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def problem(self) -> str | None:
        """Why the process is not alive (``/healthz`` 503), or None."""
        return self._watch.problem() if self._watch is not None else None

    async def _serve_health(self, request: web.Request) -> web.Response:
        problem = self.problem()
        if problem is not None:
            return web.Response(status=503, text=f"{problem}\n")
        return web.Response(text="ok\n")

    async def _serve_ready(self, request: web.Request) -> web.Response:
        if self._ready():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready\n")
