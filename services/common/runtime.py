"""The process shell of a service: connect, run until SIGTERM, park poison messages.

What it does: configures structlog (JSON), connects to NATS with unlimited reconnects,
checks that the streams exist (the admin creates and configures them; a service never
updates them), installs SIGTERM/SIGINT handlers that set a stop event, runs the service's
coroutine, and closes everything in order. ``ServiceContext.park`` puts a message that cannot
be processed on ``<prefix>.dlq.<service>`` with its error (as a reference: size, digest and
head, when it is too large to travel whole), so a loop never dies (or spins) on one bad
message (and counts it in ``usher_dlq_parked_total``).
It also serves ``/metrics``, ``/healthz`` and ``/readyz`` (``services.common.health``) from
before the NATS connection (liveness during a long start) until the service has stopped.
What it must never do: hold service logic, swallow an error without parking or logging it,
reconfigure the log, or log a secret (URLs are redacted).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext

from schemas import DeadLetter, Millis
from services.common import collector
from services.common.health import ConnectionWatch, HealthServer
from services.common.metrics import Metrics, process_metrics
from services.common.settings import ServiceSettings
from usher.adapters.logs import configure, get_logger, redact_url
from usher.adapters.nats.log import StreamMissing, park, require_streams
from usher.adapters.nats.subjects import Subjects


def wall_ms() -> Millis:
    """The service clock. Only the shell reads it; the core gets it as ``now``."""
    return Millis(int(time.time() * 1000))


def to_utc(ms: int) -> datetime:
    """An envelope time from epoch milliseconds."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


@dataclass
class ServiceContext:
    """What a running service gets: its connections, names, logger and stop signal."""

    name: str
    settings: ServiceSettings
    nc: Client
    js: JetStreamContext
    subjects: Subjects
    stop: asyncio.Event
    log: Any
    """structlog logger with the service (and zone) bound."""
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by the service once it serves requests and follows the log (readiness probe)."""
    metrics: Metrics = field(default_factory=process_metrics)
    """The process's registry and metric families (one per process, shared)."""

    async def park(
        self,
        subject: str,
        data: bytes,
        error: BaseException | str,
        detail: str = "",
        stream_seq: int | None = None,
    ) -> None:
        """Park an unprocessable message with its error; never raises for a NATS hiccup."""
        kind = error if isinstance(error, str) else type(error).__name__
        text = detail or (str(error) if isinstance(error, BaseException) else "")
        letter = DeadLetter(
            service=self.name,
            subject=subject,
            error=kind,
            detail=text,
            data=data,
            stream_seq=stream_seq,
        )
        self.metrics.dlq_parked.labels(self.name).inc()
        self.log.warning(
            "message parked",
            subject=subject,
            error=kind,
            detail=text[:500],
            stream_seq=stream_seq,
            size=len(data),
        )
        try:
            # A message too large to fit in a letter is parked as a reference (adapter).
            await park(self.nc, self.subjects, letter)
        except (nats.errors.Error, TimeoutError) as exc:
            # The DLQ itself is unreachable: the log line above is the record of last resort.
            self.log.error("dead letter not stored", error=type(exc).__name__)


ServiceMain = Callable[[ServiceContext], Awaitable[None]]


class ServiceUnavailable(Exception):
    """A server the service needs could not be reached at start; ``server`` says which."""

    def __init__(self, server: str, detail: str) -> None:
        super().__init__(f"{server}: {detail}")
        self.server = server
        self.detail = detail


def nats_tls_context(settings: ServiceSettings) -> ssl.SSLContext | None:
    """TLS for NATS from the settings: CA only verifies the server, cert + key add a client
    certificate (mutual TLS); None (plain, or TLS from a ``tls://`` URL with the system CAs)
    when neither is set."""
    if settings.nats_tls_ca is None and settings.nats_tls_cert is None:
        return None
    ca = str(settings.nats_tls_ca) if settings.nats_tls_ca is not None else None
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    if settings.nats_tls_cert is not None:
        key = str(settings.nats_tls_key) if settings.nats_tls_key is not None else None
        context.load_cert_chain(str(settings.nats_tls_cert), key)
    return context


async def connect(
    settings: ServiceSettings,
    name: str,
    log: Any | None = None,
    watch: ConnectionWatch | None = None,
) -> Client:
    """Connect with unlimited reconnects: a NATS restart pauses a service, never kills it
    (``watch`` hears of every loss and reconnect: the process's liveness, /healthz)."""

    async def on_error(exc: Exception) -> None:
        # nats-py would print a traceback per failed attempt; one log line says enough.
        if log is not None:
            log.warning("nats connection problem", error=type(exc).__name__, detail=str(exc))

    async def on_disconnected() -> None:
        if watch is not None:
            watch.disconnected()
        if log is not None:
            log.warning("nats disconnected, reconnecting")

    async def on_reconnected() -> None:
        if watch is not None:
            watch.reconnected()
        if log is not None:
            log.info("nats reconnected")

    return await nats.connect(
        settings.nats_url,
        name=f"usher-{name}",
        connect_timeout=5,
        reconnect_time_wait=0.5,
        max_reconnect_attempts=-1,
        allow_reconnect=True,
        error_cb=on_error,
        disconnected_cb=on_disconnected,
        reconnected_cb=on_reconnected,
        tls=nats_tls_context(settings),
    )


async def connect_or_stop(
    settings: ServiceSettings,
    name: str,
    stop: asyncio.Event,
    log: Any,
    watch: ConnectionWatch | None = None,
) -> Client | None:
    """Connect within ``settings.startup_timeout_s``; ``None`` when asked to stop first.

    nats-py retries an initial connection forever when reconnects are unlimited, so the
    deadline and the stop signal are enforced here.
    """
    attempt = asyncio.ensure_future(connect(settings, name, log, watch))
    stopper = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait(
            {attempt, stopper},
            timeout=settings.startup_timeout_s,
            return_when=asyncio.FIRST_COMPLETED,
        )
    finally:
        stopper.cancel()
    if attempt in done:
        return attempt.result()
    attempt.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await attempt
    if stop.is_set():
        return None
    raise ServiceUnavailable(
        "nats",
        f"{redact_url(settings.nats_url)} not reachable within {settings.startup_timeout_s:g}s",
    )


async def serve(
    name: str, settings: ServiceSettings, main: ServiceMain, *, own_process: bool = False
) -> None:
    """Run ``main`` as service ``name`` until SIGTERM/SIGINT or until it returns.

    ``own_process``: the process is this service's alone (``run_service``): its garbage
    collector is frozen once the service is ready (``services.common.collector``)."""
    log = get_logger(service=name, zone=settings.zone)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
    try:
        await _serve(name, settings, main, stop, log, own_process)
    finally:
        # The loop may outlive the service (a caller's, a test's): give the signals back, so
        # that a later Ctrl-C raises KeyboardInterrupt again instead of setting a dead event.
        for sig in handled:
            loop.remove_signal_handler(sig)


async def _serve(
    name: str,
    settings: ServiceSettings,
    main: ServiceMain,
    stop: asyncio.Event,
    log: Any,
    own_process: bool,
) -> None:
    # Filled once connected: until then the process is alive (/healthz) but not ready.
    started: list[ServiceContext] = []

    def ready() -> bool:
        return bool(started) and started[0].ready.is_set() and started[0].nc.is_connected

    watch = ConnectionWatch(settings.nats_down_limit_s)
    health = HealthServer(process_metrics(), ready, log, watch)
    await health.start(settings.metrics_host, settings.metrics_port)
    try:
        nc = await connect_or_stop(settings, name, stop, log, watch)
        if nc is None:
            return
        try:
            js = nc.jetstream()
            subjects = Subjects(settings.prefix)
            try:
                await require_streams(js, subjects, settings.stream_replicas)
            except StreamMissing as exc:
                raise ServiceUnavailable("nats", str(exc)) from exc
            ctx = ServiceContext(name, settings, nc, js, subjects, stop, log)
            started.append(ctx)
            log.info("service starting", nats=redact_url(settings.nats_url), prefix=settings.prefix)
            if own_process:
                freezing = asyncio.ensure_future(collector.freeze_when_ready(ctx.ready, stop))
            try:
                await main(ctx)
            finally:
                if own_process:
                    freezing.cancel()
        finally:
            with contextlib.suppress(Exception):
                await nc.drain()
            log.info("service stopped")
    finally:
        await health.stop()


def run_service(name: str, settings: ServiceSettings, main: ServiceMain) -> None:
    """Blocking entry point used by ``usher run <service>`` and ``python -m services.<name>``."""
    configure()
    collector.tune()
    asyncio.run(serve(name, settings, main, own_process=True))


async def wait_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep up to ``seconds``; True when the service was asked to stop meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    return stop.is_set()
