"""Tuning of the watcher's loops, and the retry delays they share.

What it does: ``WatcherOptions`` (watch lifetime, backoff, consumer batch sizes, resync period)
with production defaults, the ``Backoff`` they make (``services.common.retry``), and
``retrying``: run a NATS call until it succeeds, with the watcher's delays.
What it must never do: hold service logic or read the environment (settings come from
``services.common.settings``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from services.common.retry import Backoff
from services.common.retry import retrying as retry_nats
from services.watcher.objects import DEFAULT_CAPACITY

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
    queue_status_items: int = 100
    """Pending workloads a Queue's status lists (its first ones, in order); ``status.pending``
    counts them all. Every write sends the whole list (a merge patch replaces arrays), so
    listing 15,000 pending jobs once a second cost the watcher and the API server more CPU
    than admitting them; ``usher queue`` shows every position."""

    cached_objects: int = DEFAULT_CAPACITY
    """Workload objects kept from the watch so that carrying out a decision needs no GET
    (``services.watcher.objects``); 0 reads every object before its patch."""
    publishes_in_flight: int = 1024
    """Observations published and not yet acknowledged at most (``observe.Publisher``)."""

    estimate_interval_s: float = 10.0
    """How often the pending workloads are estimated (a trial pass) to count those waiting
    past their estimate (``services.watcher.waits``)."""

    def backoff(self) -> Backoff:
        """A fresh ``Backoff`` with these delays."""
        return Backoff(self.backoff_base_s, self.backoff_cap_s)


async def retrying(
    operation: Callable[[], Awaitable[T]], what: str, log: Any, options: WatcherOptions
) -> T:
    """Run ``operation`` until NATS answers: a slow or restarting server delays, never kills."""
    return await retry_nats(operation, what, log, options.backoff())


__all__ = ["Backoff", "WatcherOptions", "retrying"]
