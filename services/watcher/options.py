"""Tuning of the watcher's loops, and the retry delays they share.

What it does: ``WatcherOptions`` (watch lifetime, backoff, consumer batch sizes, resync period)
with production defaults; ``Backoff``: exponential delays with jitter, capped, reset on success;
``retrying``: run a NATS call until it succeeds.
What it must never do: hold service logic or read the environment (settings come from
``services.common.settings``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import nats.errors

T = TypeVar("T")


@dataclass(frozen=True)
class WatcherOptions:
    """How the watcher's loops pace themselves (defaults suit a production cluster)."""

    watch_timeout_s: int = 300
    """Server-side lifetime of one watch; it is then resumed from the last resourceVersion."""
    backoff_base_s: float = 0.2
    backoff_cap_s: float = 30.0
    not_served_retry_s: float = 60.0
    """How soon to look again for a kind the server does not serve (its CRD may come later)."""
    fetch_batch: int = 64
    fetch_timeout_s: float = 1.0
    ack_wait_s: float = 30.0
    queue_resync_s: float = 60.0
    """How often Queue objects are listed again to repair changes made by others."""


class Backoff:
    """Exponential delays (base x 2^n) with "equal jitter" (half fixed, half random), capped."""

    def __init__(self, base_s: float, cap_s: float, rng: random.Random | None = None) -> None:
        self._base = base_s
        self._cap = cap_s
        self._attempts = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        delay = min(self._cap, self._base * 2.0 ** min(self._attempts, 30))
        self._attempts += 1
        # Jitter keeps many watchers (or many kinds) from reconnecting in lockstep.
        return delay / 2 + self._rng.uniform(0, delay / 2)

    def reset(self) -> None:
        self._attempts = 0

    @classmethod
    def of(cls, options: WatcherOptions) -> Backoff:
        return cls(options.backoff_base_s, options.backoff_cap_s)


async def retrying(
    operation: Callable[[], Awaitable[T]], what: str, log: Any, options: WatcherOptions
) -> T:
    """Run ``operation`` until NATS answers: a slow or restarting server delays, never kills."""
    backoff = Backoff.of(options)
    while True:
        try:
            return await operation()
        except (nats.errors.Error, TimeoutError) as exc:
            delay = backoff.next_delay()
            log.warning(f"{what} failed, retrying", error=type(exc).__name__,
                        retry_in_s=round(delay, 2))  # fmt: skip
            await asyncio.sleep(delay)
