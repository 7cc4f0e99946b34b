"""A pure-core engine kept equal to the log: what every deciding service folds the log into.

What it does: ``Projection`` applies each entry the follower (usher/adapters/nats/follower.py)
hands out, in order and at its time, to the service's ``Engine``, and lets a caller wait until
a sequence is applied.
What it must never do: decide anything, read the log itself, or apply an entry twice.
"""

from __future__ import annotations

import asyncio
import contextlib

from usher.core.engine import Engine
from usher.core.log import LogEntry


class Projection:
    """A pure-core engine kept equal to the log: apply every entry, in order, at its time.

    The deciding services hold just this; the watcher's ``WatcherProjection`` and the
    client's ``PeopleProjection`` keep more beside their engine, and ``usher.core.history``'s
    ``History`` is the log itself, read whole and folded on demand.

    ``applied_seq`` starts at 0 for a full replay, or at the sequence a restored snapshot
    covers (``services.common.snapshots``); the follower then starts right after it.
    """

    def __init__(self, engine: Engine, applied_seq: int = 0) -> None:
        self.engine = engine
        self.applied_seq = applied_seq
        self.changed = asyncio.Event()

    async def wait_for(self, seq: int, timeout_s: float) -> bool:
        """Wait until entries up to ``seq`` are applied; False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.applied_seq < seq:
            left = deadline - loop.time()
            if left <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=left)
        return True

    def apply(self, entry: LogEntry) -> None:
        if entry.seq <= self.applied_seq:
            return  # an ordered consumer restarted by the client may repeat the tail
        self.engine.apply(entry.envelope.event, entry.time_ms)
        self.applied_seq = entry.seq
        self.changed.set()
