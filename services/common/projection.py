"""A pure-core engine kept equal to the log: what every deciding service folds the log into.

What it does: ``Projection`` applies each entry the follower (usher/adapters/nats/follower.py)
hands out, in order and at its time, to the service's ``Engine`` through the fold every reader
uses (``usher.core.history.fold``: only its owner's decisions, never an exception out of the
engine),
and lets a caller wait until a sequence is applied. What the fold refuses comes back as the
``BadEntry`` the service parks.
What it must never do: decide anything, read the log itself, apply an entry twice, or fold an
entry its owner did not make.
"""

from __future__ import annotations

import asyncio
import contextlib

from usher.core.engine.facade import Engine
from usher.core.history.fold import fold_entry, refused_entry
from usher.core.protocol.log import BadEntry, LogEntry


class Projection:
    """A pure-core engine kept equal to the log: apply every entry, in order, at its time.

    The deciding services hold just this; the watcher's ``WatcherProjection`` and the
    client's ``PeopleProjection`` keep more beside their engine, and ``usher.core.history.replay``'s
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

    def apply(self, entry: LogEntry) -> BadEntry | None:
        """Fold ``entry``; the ``BadEntry`` to park when the fold refused it (forged,
        unfoldable: the engine is then as ``usher.core.history.fold`` says), else None."""
        if entry.seq <= self.applied_seq:
            return None  # an ordered consumer restarted by the client may repeat the tail
        outcome = fold_entry(self.engine, entry)
        self.applied_seq = entry.seq
        self.changed.set()
        return None if outcome.folded else refused_entry(entry, outcome)
