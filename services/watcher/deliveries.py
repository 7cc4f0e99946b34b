"""Webhook deliveries: each job Event the watcher records, POSTed as a CloudEvent.

What it does: when ``USHER_NOTIFY_URL`` is set, ``WebhookDeliveries.offer`` takes a CloudEvent
(``services.watcher.notify.cloud_event``) into a bounded queue and returns at once; ``run``
POSTs them one after the other, in order, as structured-mode CloudEvents JSON
(``Content-Type: application/cloudevents+json``), retrying a failed POST (no answer, or not 2xx)
with exponential backoff; after the last attempt, or when the queue is full, the CloudEvent is
dead-lettered on the DLQ (``WebhookUndelivered`` / ``WebhookQueueFull``) with the reason.
What it must never do: block or slow the carrying out of decisions (``offer`` never waits),
lose an event silently, or log the URL's credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import msgspec

from services.common.retry import Backoff
from services.common.runtime import ServiceContext, wait_or_stop
from usher.adapters.logs import redact_url

CONTENT_TYPE = "application/cloudevents+json"


@dataclass(frozen=True)
class DeliveryOptions:
    """How hard a delivery is tried (defaults: 6 attempts over about 30 seconds)."""

    attempts: int = 6
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 16.0
    timeout_s: float = 5.0
    queue_size: int = 1000


class WebhookDeliveries:
    """The CloudEvents on their way to one webhook, in order."""

    def __init__(
        self, ctx: ServiceContext, url: str, options: DeliveryOptions | None = None
    ) -> None:
        self.ctx = ctx
        self.url = url
        self.options = options or DeliveryOptions()
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(self.options.queue_size)
        self._parking: set[asyncio.Task[None]] = set()
        self.delivered = 0
        """CloudEvents the webhook accepted (2xx) since start."""

    def offer(self, cloud_event: dict[str, Any]) -> None:
        """Queue ``cloud_event`` for delivery; never waits (a full queue dead-letters it)."""
        try:
            self._queue.put_nowait(cloud_event)
        except asyncio.QueueFull:
            why = f"{self.options.queue_size} CloudEvents already wait for {self._where()}"
            task = asyncio.create_task(self._park(cloud_event, "WebhookQueueFull", why))
            self._parking.add(task)
            task.add_done_callback(self._parking.discard)

    async def run(self) -> None:
        """Deliver until the service stops."""
        timeout = aiohttp.ClientTimeout(total=self.options.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not self.ctx.stop.is_set():
                getting = asyncio.ensure_future(self._queue.get())
                stopping = asyncio.ensure_future(self.ctx.stop.wait())
                await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                if not getting.done():
                    getting.cancel()
                    break
                await self._deliver(session, getting.result())
        while not self._queue.empty():  # stopping: what is left is dead-lettered, not lost
            await self._park(self._queue.get_nowait(), "WebhookUndelivered", "the watcher stopped")

    async def _deliver(self, session: aiohttp.ClientSession, cloud_event: dict[str, Any]) -> None:
        body = msgspec.json.encode(cloud_event)
        backoff = Backoff(self.options.backoff_base_s, self.options.backoff_cap_s)
        last = ""
        for attempt in range(1, self.options.attempts + 1):
            try:
                async with session.post(
                    self.url, data=body, headers={"Content-Type": CONTENT_TYPE}
                ) as answer:
                    if 200 <= answer.status < 300:
                        self.delivered += 1
                        return
                    last = f"HTTP {answer.status}"
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if attempt < self.options.attempts:
                self.ctx.log.warning(
                    "webhook delivery failed, retrying", id=cloud_event.get("id"),
                    attempt=attempt, error=last[:200], webhook=self._where(),
                )  # fmt: skip
                if await wait_or_stop(self.ctx.stop, backoff.next_delay()):
                    break
        why = f"{self._where()}: {last} after {self.options.attempts} attempts"
        await self._park(cloud_event, "WebhookUndelivered", why)

    async def _park(self, cloud_event: dict[str, Any], error: str, why: str) -> None:
        with contextlib.suppress(Exception):  # park logs, and never raises for NATS
            await self.ctx.park(
                f"{self.ctx.subjects.prefix}.notify.webhook",
                msgspec.json.encode(cloud_event),
                error,
                why,
            )

    def _where(self) -> str:
        """The webhook for logs and letters: no user, password or query (a token may hide
        in any of them)."""
        parts = urlsplit(redact_url(self.url))
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"
