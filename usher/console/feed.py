"""The console's reading of the log: the people projection, the log itself, samples over time.

What it does: ``ConsoleLog`` folds every log entry, in order, into the ``PeopleProjection`` the
live view and ``usher jobs`` use (``usher.client.state``), keeps the decoded entries as a
``History`` so a job's story (``usher.core.history.explain``) and the state at any past position
(``usher.core.history.replay.replay``, what ``usher replay --seq N`` prints) are worked out exactly
as the command line does, records one sample of pending and admitted jobs per queue for every
``SAMPLE_MS`` of log time and each admission's wait (for the charts), and hands every new
decision to the pages' live streams. ``follow`` reads the log with an ordered consumer.
What it must never do: publish or acknowledge anything, decide anything (the reasons come from
the projection's preview pass, on a copy), or block a reader: a stream that does not keep up
loses updates, never the console.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Iterable

import msgspec
from nats.js import JetStreamContext

from schemas import Admitted, QuotaNode
from usher.adapters.nats.follower import LogFollower
from usher.adapters.nats.subjects import Subjects
from usher.client.state import DecisionInfo, PeopleProjection, StateView, now_ms
from usher.core.history.replay import History
from usher.core.model.config import EngineConfig
from usher.core.protocol.log import BadEntry, LogEntry
from usher.core.state.indexed import JobState
from usher.core.tree.quota_tree import iter_nodes, leaf_queue_name

SAMPLE_MS = 15_000
"""One chart sample per this much log time (a day of samples is 5,760 points)."""
KEEP_MS = 6 * 3_600_000
"""The charts cover the last six hours of the log."""
KEEP_DECISIONS = 5_000
"""Decisions the stream page can filter (the projection's own default keeps 200)."""
VIEW_REFRESH_S = 0.5
"""A new state is worked out at most this often (a pass over every pending job each time)."""
STREAM_BACKLOG = 1_000
"""Updates a page's stream may fall behind by before it misses some."""


class Sample(msgspec.Struct, frozen=True, kw_only=True):
    """Jobs per queue at one point of log time."""

    time_ms: int
    pending: dict[str, int]
    admitted: dict[str, int]


class Wait(msgspec.Struct, frozen=True, kw_only=True):
    """One admission: how long the job waited from its creation."""

    time_ms: int
    job: str
    queue: str
    wait_s: float


class Update(msgspec.Struct, frozen=True, kw_only=True):
    """What a page's live stream is told: the log position, and a decision when one came."""

    seq: int
    decision: DecisionInfo | None = None


class ConsoleLog:
    """Everything the console shows, folded from the log (see the module docstring)."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.people = PeopleProjection(config, decisions=deque(maxlen=KEEP_DECISIONS))
        self.items: list[LogEntry] = []
        self.bad: list[BadEntry] = []
        self.samples: deque[Sample] = deque(maxlen=KEEP_MS // SAMPLE_MS)
        self.waits: deque[Wait] = deque(maxlen=10_000)
        self.caught_up = asyncio.Event()
        self._bucket: int | None = None
        self._told_seq = 0
        self._streams: set[asyncio.Queue[Update]] = set()
        self._view: StateView | None = None
        self._view_at = 0.0
        self._named_tree: QuotaNode | None = None
        self._names: dict[str, str] = {}

    # ------------------------------------------------------------------ folding

    @property
    def seq(self) -> int:
        """The last log position folded in."""
        return self.people.applied_seq

    def apply(self, batch: Iterable[LogEntry | BadEntry]) -> None:
        """Fold entries in (in order), then tell the live streams what is new."""
        for item in batch:
            if item.seq <= self.people.applied_seq:
                continue  # a re-created consumer may repeat the tail
            if isinstance(item, BadEntry):
                self.bad.append(item)
                self.people.apply(item)
                continue
            self._sample_if_due(item.time_ms)
            self.people.apply(item)
            self.items.append(item)
            event = item.envelope.event
            if isinstance(event, Admitted):
                self._note_wait(item, event)
        self._tell()

    def _sample_if_due(self, time_ms: int) -> None:
        """Before the first entry of a new ``SAMPLE_MS`` bucket: the state so far, at every
        bucket boundary passed since the last entry (a quiet log keeps its level)."""
        bucket = time_ms // SAMPLE_MS
        if self._bucket is not None and bucket > self._bucket:
            sample = self.sample_now(0)
            first = max(self._bucket + 1, bucket - (self.samples.maxlen or 1) + 1)
            for boundary in range(first, bucket + 1):
                self.samples.append(msgspec.structs.replace(sample, time_ms=boundary * SAMPLE_MS))
        self._bucket = bucket if self._bucket is None else max(self._bucket, bucket)

    def sample_now(self, time_ms: int) -> Sample:
        """Pending and admitted jobs per queue as of the entries folded so far."""
        engine = self.people.engine
        pending = {str(q): len(entries) for q, entries in engine.queues().items()}
        admitted: dict[str, int] = {}
        for view in engine.jobs().values():
            if view.state == JobState.ADMITTED and view.queue is not None:
                admitted[view.queue] = admitted.get(view.queue, 0) + 1
        return Sample(time_ms=time_ms, pending=pending, admitted=admitted)

    def _note_wait(self, item: LogEntry, event: Admitted) -> None:
        observed = self.people.observed.get(event.workload)
        if observed is None:
            return
        waited = max(0, item.time_ms - observed.created_ms) / 1000
        self.waits.append(
            Wait(time_ms=item.time_ms, job=event.workload, queue=event.queue, wait_s=waited)
        )

    # ------------------------------------------------------------------ reading

    def history(self) -> History:
        """The log as read so far, as ``usher replay`` and ``usher explain`` take it."""
        return History(items=list(self.items), bad=list(self.bad))

    def queue_names(self) -> dict[str, str]:
        """Leaf path -> queue name in the tree in force (decisions name the path)."""
        tree = self.people.tree
        if tree is not self._named_tree:
            self._named_tree = tree
            self._names = {
                path: leaf_queue_name(path, node)
                for path, node, _ in (iter_nodes(tree) if tree is not None else ())
                if not node.children
            }
        return self._names

    def view(self) -> StateView:
        """The state now: jobs, queues in order with reasons, quota (worked out at most every
        ``VIEW_REFRESH_S``; the view says which log position it shows)."""
        fresh = self._view is not None and (
            self._view.seq == self.seq or time.monotonic() - self._view_at < VIEW_REFRESH_S
        )
        if not fresh or self._view is None:
            self._view = self.people.view(now_ms())
            self._view_at = time.monotonic()
        return self._view

    # ------------------------------------------------------------------ live streams

    def stream(self) -> asyncio.Queue[Update]:
        """A new live stream of updates (close it with ``close_stream``)."""
        queue: asyncio.Queue[Update] = asyncio.Queue(maxsize=STREAM_BACKLOG)
        self._streams.add(queue)
        return queue

    def close_stream(self, queue: asyncio.Queue[Update]) -> None:
        self._streams.discard(queue)

    def _tell(self) -> None:
        if self.seq == self._told_seq:
            return
        updates = [Update(seq=self.seq)]
        for decision in reversed(self.people.decisions):  # newest first: stop at the told
            if decision.seq <= self._told_seq:
                break
            updates.append(Update(seq=decision.seq, decision=decision))
        updates.reverse()
        self._told_seq = self.seq
        for queue in self._streams:
            for update in updates:
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait(update)

    # ------------------------------------------------------------------ following the log

    async def follow(self, js: JetStreamContext, subjects: Subjects, stop: asyncio.Event) -> None:
        """Read the log from where this fold stands until ``stop``; ``caught_up`` is set once
        the end seen at start is folded in."""
        follower = LogFollower(js, subjects, start_seq=self.seq + 1, pause_collector=True)
        await follower.start()
        if follower.caught_up:
            self.caught_up.set()
        try:
            async for batch in follower.batches(stop, idle_s=lambda: 1.0):
                self.apply(batch)
                if follower.caught_up:
                    self.caught_up.set()
        finally:
            await follower.stop()
