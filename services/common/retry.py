"""Retry delays and a retry loop for NATS calls, shared by the services.

What it does: ``Backoff``: exponential delays with jitter, capped, reset on success;
``retrying``: run a NATS call until it succeeds (a slow or restarting server delays a
service, never kills it), or until the service is asked to stop (``Stopping``).
What it must never do: retry anything but NATS and timeout errors, or retry without a pause.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import nats.errors

T = TypeVar("T")


class Stopping(Exception):
    """The service is stopping; the request or call was not answered."""


class Backoff:
    """Exponential delays (base x 2^n) with "equal jitter" (half fixed, half random), capped."""

    def __init__(self, base_s: float, cap_s: float, rng: random.Random | None = None) -> None:
        self._base = base_s
        self._cap = cap_s
        self._attempts = 0
        # The shared generator unless one is given: seeding a new Random reads os.urandom,
        # and a Backoff is made per request while most never wait (2% of the watcher's CPU).
        self._uniform = rng.uniform if rng is not None else random.uniform

    def next_delay(self) -> float:
        delay = min(self._cap, self._base * 2.0 ** min(self._attempts, 30))
        self._attempts += 1
        # Jitter keeps many watchers (or many kinds) from reconnecting in lockstep.
        return delay / 2 + self._uniform(0, delay / 2)

    def reset(self) -> None:
        self._attempts = 0


async def retrying(
    operation: Callable[[], Awaitable[T]],
    what: str,
    log: Any,
    backoff: Backoff,
    stop: asyncio.Event | None = None,
) -> T:
    """Run ``operation`` until NATS answers; ``Stopping`` when ``stop`` is set meanwhile.

    Only for operations that are safe to repeat (a publish with a ``Nats-Msg-Id``, a read).
    """
    while True:
        try:
            return await operation()
        except (nats.errors.Error, TimeoutError) as exc:
            delay = backoff.next_delay()
            log.warning(f"{what} failed, retrying", error=type(exc).__name__,
                        retry_in_s=round(delay, 2))  # fmt: skip
        if stop is None:
            await asyncio.sleep(delay)
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=delay)
        if stop.is_set():
            raise Stopping(what)


__all__ = ["Backoff", "Stopping", "retrying"]
