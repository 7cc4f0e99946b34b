"""The HTTP side of a service process: ``/metrics``, ``/healthz`` and ``/readyz``.

What it does: serves, with aiohttp, the process's Prometheus registry in the text exposition
format on ``/metrics``, 200 on ``/healthz`` while the event loop runs (liveness), and on
``/readyz`` 200 once the service said it is ready (``ServiceContext.ready``) and its NATS
connection is up, 503 otherwise. Binds ``USHER_METRICS_HOST`` (default 127.0.0.1: local runs
expose nothing; the deploy sets 0.0.0.0) and ``USHER_METRICS_PORT`` (default 9102, 0 picks a
free port, -1 turns the server off).
What it must never do: stop a service because the port is taken (several services of one
``usher up`` share a host: it logs and runs without the endpoint), serve anything that
changes state, or block the event loop (rendering the registry is a few milliseconds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from services.common.metrics import CONTENT_TYPE_LATEST, Metrics

__all__ = ["HealthServer"]

ReadyCheck = Callable[[], bool]


class HealthServer:
    """One aiohttp site per process; ``port`` is the bound port once started (None: off)."""

    def __init__(self, metrics: Metrics, ready: ReadyCheck, log: Any = None) -> None:
        self._metrics = metrics
        self._ready = ready
        self._log = log
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

    async def _serve_health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _serve_ready(self, request: web.Request) -> web.Response:
        if self._ready():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready\n")
