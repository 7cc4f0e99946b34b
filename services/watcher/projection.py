"""The watcher's own reading of the log: a projection for status, and what it already said.

What it does: replays the whole log, then follows it. Every entry goes into a pure-core
``Projection`` (queues and quota usage for the status writer). While replaying, each cluster
event also records what the log last said about its object (``Said``: a digest of the event
without its resourceVersion, and the object's kind, uid and zone; deleted objects are
forgotten), so that after a restart the watcher publishes only what changed and can tell which
objects were deleted while it was down; likewise the last pod progress said of each workload,
per admission, and the allocation intervals (U1) estimates rest on. It also remembers the stream
sequence of the latest ``Admitted``/``Preempted`` decision and of the current incarnation of
each workload, so a stale decision is never carried out, and whether each workload holds a live
admission (an ``Admitted`` not yet followed by its ``Preempted``/``Released``), so a job running
without one can be stopped. Decisions that claim to be the ledger's but are not (wrong subject,
wrong source: ``usher.core.history.fold``) are left out of all of it, as are entries the engine
cannot fold; the decision runner parks forged decisions, this reader parks the rest. ``synced``
is set once the replay has caught up.
What it must never do: publish or decide anything, believe a forged ledger decision, or record
a cluster event after the replay (from then on the observers, the only publishers of cluster
events, record what they publish).
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field

import msgspec

from schemas import (
    DEFAULT_ZONE,
    Admitted,
    NodeName,
    NodeObserved,
    NodeRemoved,
    Preempted,
    PriorityClassDeleted,
    PriorityClassObserved,
    QuotaNode,
    QuotaTreeApplied,
    QuotaTreeDeleted,
    QuotaTreeRejected,
    Released,
    Requeued,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    WorkloadProgress,
    WorkloadRejected,
    Zone,
    encode,
)
from schemas.envelope import LogEvent
from schemas.events import ClusterEvent
from services.common.projection import Projection
from services.common.runtime import ServiceContext
from services.watcher.options import WatcherOptions, retrying
from usher.adapters.nats.follower import LogFollower
from usher.adapters.nats.subjects import Subjects
from usher.core.engine.facade import Engine
from usher.core.history.fold import BAD_ENTRY_ERRORS, Verdict
from usher.core.history.usage import UsageFold
from usher.core.protocol.log import BadEntry, LogEntry

FORGED = BAD_ENTRY_ERRORS[Verdict.FORGED]


@dataclass
class Said:
    """What the log last said about one object."""

    fingerprint: bytes
    kind: str = ""
    uid: str = ""
    zone: Zone = DEFAULT_ZONE


def fingerprint(event: ClusterEvent) -> bytes:
    """A digest of the event as it matters: without the resourceVersion (a write that changed
    nothing relevant, such as a status update, must not be published again), without a
    finish's terminations (read from pods that may be gone when the job is read again) and
    without when progress was observed. A digest, not the event: the watcher keeps one per
    live object."""
    if isinstance(event, WorkloadObserved | QuotaTreeApplied | QuotaTreeRejected):
        event = msgspec.structs.replace(event, resource_version="")
    elif isinstance(event, WorkloadFinished):
        event = msgspec.structs.replace(event, terminations=[])
    elif isinstance(event, WorkloadProgress):
        event = msgspec.structs.replace(event, observed_ms=None)
    return hashlib.blake2b(encode(event), digest_size=16).digest()


@dataclass
class WatcherProjection:
    """The watcher's projection of the log: the engine's ``Projection`` plus what the log last
    said about each object and which decisions still stand, shared by the watcher's tasks."""

    projection: Projection
    subjects: Subjects
    workloads: dict[WorkloadKey, Said] = field(default_factory=dict)
    nodes: dict[NodeName, Said] = field(default_factory=dict)
    classes: dict[str, Said] = field(default_factory=dict)
    quota: Said | None = None
    tree: QuotaNode | None = None
    """The quota tree in force (the last ``QuotaTreeApplied`` on the log)."""
    tree_deleted: bool = False
    """The log's latest word on the tree object is ``QuotaTreeDeleted`` (``tree`` stays in
    force all the same)."""
    latest_decision: dict[WorkloadKey, int] = field(default_factory=dict)
    """Stream sequence of the latest ``Admitted``/``Preempted`` of each workload."""
    born: dict[WorkloadKey, tuple[str, int]] = field(default_factory=dict)
    """``(uid, seq)`` of the first observation of each workload's current incarnation: a
    decision older than that was about a deleted predecessor of the same name."""
    admissions: dict[WorkloadKey, int] = field(default_factory=dict)
    """Stream sequence of the latest (ledger) ``Admitted`` of each workload."""
    withdrawals: dict[WorkloadKey, int] = field(default_factory=dict)
    """Stream sequence of the latest ``Preempted``/``Released`` of each workload."""
    progress: dict[WorkloadKey, tuple[int, bytes]] = field(default_factory=dict)
    """The last ``WorkloadProgress`` said of each workload: the admission it was about (its
    stream sequence) and its fingerprint. Counts are news again after a new admission."""
    usage: UsageFold = field(default_factory=UsageFold)
    """The allocation intervals the log records (U1): the run lengths estimates rest on."""
    synced: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    def empty(cls, engine: Engine, subjects: Subjects) -> WatcherProjection:
        return cls(projection=Projection(engine), subjects=subjects)

    # ------------------------------------------------------------------ what was said

    def said(self, event: ClusterEvent) -> Said | None:
        """What the log last said about the object ``event`` is about."""
        match event:
            case WorkloadObserved() | WorkloadFinished() | WorkloadDeleted() | WorkloadRejected():
                return self.workloads.get(event.workload)
            case NodeObserved() | NodeRemoved():
                return self.nodes.get(event.node)
            case PriorityClassObserved() | PriorityClassDeleted():
                return self.classes.get(event.name)
            case QuotaTreeApplied() | QuotaTreeRejected() | QuotaTreeDeleted():
                return self.quota
        return None

    def is_news(self, event: ClusterEvent) -> bool:
        """Whether publishing ``event`` would tell the log something it does not say yet."""
        if isinstance(event, WorkloadProgress):
            return self.progress.get(event.workload) != self._progress_said(event)
        said = self.said(event)
        return said is None or said.fingerprint != fingerprint(event)

    def _progress_said(self, event: WorkloadProgress) -> tuple[int, bytes]:
        return self.admissions.get(event.workload, 0), fingerprint(event)

    def progress_started(self, workload: WorkloadKey) -> bool:
        """Whether progress was said about the workload's current admission."""
        said = self.progress.get(workload)
        return said is not None and said[0] == self.admissions.get(workload, 0)

    def knows_live(self, event: ClusterEvent) -> bool:
        """Whether the log holds the object ``event`` is about as existing."""
        return self.said(event) is not None

    def record(self, event: ClusterEvent) -> None:
        """Remember that the log now says ``event``."""
        if self._forget(event):
            return
        if isinstance(event, WorkloadProgress):
            self.progress[event.workload] = self._progress_said(event)
            return
        before = self.said(event)
        said = Said(
            fingerprint=fingerprint(event),
            kind=before.kind if before else "",
            uid=before.uid if before else "",
            zone=before.zone if before else DEFAULT_ZONE,
        )
        match event:
            case WorkloadObserved():
                said.kind, said.uid, said.zone = event.kind, event.uid, event.zone
                self.workloads[event.workload] = said
            case WorkloadRejected():
                said.kind = event.kind or said.kind
                self.workloads[event.workload] = said
            case WorkloadFinished():
                self.workloads[event.workload] = said
            case NodeObserved():
                said.zone = event.zone
                self.nodes[event.node] = said
            case PriorityClassObserved():
                self.classes[event.name] = said
            case QuotaTreeApplied() | QuotaTreeRejected() | QuotaTreeDeleted():
                self.quota = said
                self.tree_deleted = isinstance(event, QuotaTreeDeleted)

    def _forget(self, event: ClusterEvent) -> bool:
        """A deletion: nothing to remember about a gone object (memory stays bounded by what
        exists); a later deletion of it is then not news, a re-creation is."""
        match event:
            case WorkloadDeleted():
                self.workloads.pop(event.workload, None)
                self.progress.pop(event.workload, None)
            case NodeRemoved():
                self.nodes.pop(event.node, None)
            case PriorityClassDeleted():
                self.classes.pop(event.name, None)
            case _:
                return False
        return True

    # ------------------------------------------------------------------ following the log

    def apply(self, entry: LogEntry) -> BadEntry | None:
        """One log entry: into the projection; while replaying, into the record too. What
        the fold refuses (forged, unfoldable) is left out of all of it and returned."""
        event: LogEvent = entry.envelope.event
        refused = self.projection.apply(entry)
        if refused is not None:
            return refused
        self.usage.apply(event, entry.time_ms)
        if isinstance(event, QuotaTreeApplied):
            self.tree = event.root
        elif isinstance(event, WorkloadObserved):
            self._note_incarnation(event, entry.seq)
        elif isinstance(event, WorkloadDeleted):
            # Decisions about a deleted workload have nothing left to act on.
            self.born.pop(event.workload, None)
            self.latest_decision.pop(event.workload, None)
            self._forget_decisions(event.workload, entry.seq)
        elif isinstance(event, Admitted | Preempted | Released | Requeued):
            self.note_decision(event, entry.seq)
        if not self.synced.is_set() and not isinstance(event, Admitted | Preempted | Requeued):
            self._record_replayed(event)
        return None

    def note_decision(self, decision: Admitted | Preempted | Released | Requeued, seq: int) -> None:
        """A ledger decision at ``seq``. Also called by the decision runner before it carries
        one out: the job it unsuspends must not look unadmitted until the log follower
        catches up with the same decision."""
        key = decision.workload
        if isinstance(decision, Admitted | Preempted | Requeued):
            # A requeue for readiness suspends like a preemption (R10).
            self.latest_decision[key] = max(seq, self.latest_decision.get(key, 0))
        held = self.admissions if isinstance(decision, Admitted) else self.withdrawals
        held[key] = max(seq, held.get(key, 0))

    def watches_readiness(self, workload: WorkloadKey) -> bool:
        """Whether a ready timeout (R10) is in force where ``workload`` is: only then does
        anything decide on its pod counts, so only then are they worth a log entry each."""
        return self.projection.engine.ready_timeout_ms(workload) > 0

    def admitted(self, workload: WorkloadKey) -> bool:
        """Whether the ledger admitted ``workload`` and has not preempted or released it."""
        return self.admissions.get(workload, 0) > self.withdrawals.get(workload, 0)

    def _forget_decisions(self, workload: WorkloadKey, seq: int) -> None:
        # Only what came before the deletion: the runner may already have noted a later
        # admission of a new job of the same name.
        for held in (self.admissions, self.withdrawals):
            if held.get(workload, seq) < seq:
                del held[workload]

    def _note_incarnation(self, event: WorkloadObserved, seq: int) -> None:
        known = self.born.get(event.workload)
        if known is None or known[0] != event.uid:
            self.born[event.workload] = (event.uid, seq)

    def stale(self, workload: WorkloadKey, seq: int) -> bool:
        """Whether a decision at ``seq`` is superseded by a later decision or incarnation."""
        born = self.born.get(workload)
        return self.latest_decision.get(workload, 0) > seq or (born is not None and born[1] > seq)

    def _record_replayed(self, event: LogEvent) -> None:
        if isinstance(
            event,
            WorkloadObserved
            | WorkloadFinished
            | WorkloadProgress
            | WorkloadDeleted
            | WorkloadRejected
            | NodeObserved
            | NodeRemoved
            | PriorityClassObserved
            | PriorityClassDeleted
            | QuotaTreeApplied
            | QuotaTreeRejected
            | QuotaTreeDeleted,
        ):
            self.record(event)


async def follow_log(ctx: ServiceContext, view: WatcherProjection, options: WatcherOptions) -> None:
    """Replay, then follow the log into ``view`` until the service stops."""

    async def started() -> LogFollower:
        follower = LogFollower(ctx.js, ctx.subjects)
        await follower.start()
        return follower

    follower = await retrying(started, "following the log", ctx.log, options)
    decisions = f"{ctx.subjects.prefix}.decision."
    try:
        if follower.caught_up:
            view.synced.set()
        async for batch in follower.batches(ctx.stop):
            for item in batch:
                if isinstance(item, BadEntry):
                    # The decisions consumer parks bad decisions; one letter per message.
                    if not item.subject.startswith(decisions):
                        await ctx.park(item.subject, item.data, item.error, item.detail, item.seq)
                    continue
                await _apply_safely(ctx, view, item)
            if follower.caught_up and not view.synced.is_set():
                ctx.log.info("log replayed", seq=follower.last_seq)
                view.synced.set()
    finally:
        await follower.stop()


async def _apply_safely(ctx: ServiceContext, view: WatcherProjection, entry: LogEntry) -> None:
    try:
        bad = view.apply(entry)
    except Exception as exc:  # the core refused an entry: park it, keep the projection going
        await ctx.park(entry.subject, encode(entry.envelope), exc, stream_seq=entry.seq)
        return
    # A forged decision is parked by the decision runner (one letter per message).
    if bad is not None and not (bad.error == FORGED and view.subjects.is_decision(bad.subject)):
        await ctx.park(bad.subject, bad.data, bad.error, bad.detail, bad.seq)
