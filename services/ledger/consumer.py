"""The ledger's follower of cluster events: releases and trees, with the offset, per batch.

What it does: follows ``<p>.cluster.>`` from the stored offset + 1 (consumer ``ledger`` in
``consumer_offsets``) and applies each batch of entries that arrived together in one store
transaction that also advances the offset to the batch's last sequence: ``WorkloadFinished``,
``WorkloadDeleted`` and ``WorkloadObserved(suspended=True)`` become observations (the store's
release rules), ``QuotaTreeApplied`` a tree with version = its sequence, ``ClusterLost`` the
deletion of every workload of that cluster the store holds (M1); everything else only moves the
offset. Entries that do not decode, and entries not put there by their owner
(``usher.core.history.fold.forged``: a decision on a cluster subject), are parked and skipped.
What it must never do: apply an entry twice (the offset is in the same transaction), skip an
entry silently, or advance the offset past an entry it could not apply without parking it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from schemas import (
    ClusterLost,
    QuotaTreeApplied,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadObserved,
    encode,
)
from services.common.runtime import ServiceContext, wait_or_stop
from usher.adapters.nats.follower import LogFollower
from usher.adapters.pg.ledger_store import (
    ClusterGone,
    LedgerPermanentError,
    LedgerStore,
    LedgerTransientError,
    LogChange,
    LogOutcome,
    Observation,
    OutboxBuilder,
    TreeUpdate,
)
from usher.core.history.fold import forged, refused_entry
from usher.core.protocol.log import BadEntry, LogEntry

CONSUMER: Final = "ledger"
"""The ledger's row in ``consumer_offsets``."""

T = TypeVar("T")


def change_of(entry: LogEntry) -> LogChange | None:
    """What a log entry means to the ledger; ``None``: nothing but the offset moves."""
    event = entry.envelope.event
    if isinstance(event, WorkloadFinished):
        return Observation(
            seq=entry.seq,
            workload=event.workload,
            change="Finished" if event.succeeded else "Failed",
        )
    if isinstance(event, WorkloadDeleted):
        return Observation(seq=entry.seq, workload=event.workload, change="Deleted")
    if isinstance(event, WorkloadObserved) and event.suspended:
        return Observation(seq=entry.seq, workload=event.workload, change="Suspended")
    if isinstance(event, QuotaTreeApplied):
        return TreeUpdate(seq=entry.seq, root=event.root)
    if isinstance(event, ClusterLost):
        return ClusterGone(seq=entry.seq, cluster=event.cluster)
    return None


class LogConsumer:
    """Applies the cluster events of the log to the store, batch by batch."""

    def __init__(
        self,
        ctx: ServiceContext,
        store: LedgerStore,
        outbox: OutboxBuilder,
        on_commit: Callable[[], None],
        *,
        max_backoff_s: float = 2.0,
    ) -> None:
        self._ctx = ctx
        self._store = store
        self._outbox = outbox
        self._on_commit = on_commit
        self._max_backoff = max_backoff_s
        self._follower: LogFollower | None = None
        self.applied_seq = 0
        """Last sequence committed with the offset (entries at or below it are skipped)."""

    async def start(self, stop: asyncio.Event) -> bool:
        """Read the offset and start following after it; False when stopped meanwhile."""

        async def stored() -> int:
            return await self._store.offset(CONSUMER) or 0  # no row yet: nothing applied

        offset = await self._retrying("read offset", stored, stop)
        if offset is None:
            return False
        self.applied_seq = offset
        self._follower = LogFollower(
            self._ctx.js,
            self._ctx.subjects,
            start_seq=self.applied_seq + 1,
            filter_subject=self._ctx.subjects.all_cluster,
        )
        await self._follower.start()
        return True

    async def lag(self) -> int:
        """Cluster events on the log not applied yet (the metric ``usher_consumer_lag``)."""
        return 0 if self._follower is None else await self._follower.backlog()

    async def close(self) -> None:
        if self._follower is not None:
            await self._follower.stop()

    async def run(self, stop: asyncio.Event) -> None:
        """Apply batches until ``stop``; the batch in flight is committed first."""
        assert self._follower is not None, "start() first"
        async for batch in self._follower.batches(stop):
            await self.apply(batch, stop)

    async def apply(self, batch: list[LogEntry | BadEntry], stop: asyncio.Event) -> None:
        """Apply one batch in one transaction (the ordered consumer may repeat a tail)."""
        fresh = [entry for entry in batch if entry.seq > self.applied_seq]
        if not fresh:
            return
        changes: list[LogChange] = []
        entries: dict[int, LogEntry] = {}
        for entry in fresh:
            bad = entry if isinstance(entry, BadEntry) else _forged(entry)
            if bad is not None:  # undecodable, or not its owner's: parked
                await self._ctx.park(bad.subject, bad.data, bad.error, bad.detail, bad.seq)
                continue
            assert isinstance(entry, LogEntry)
            change = change_of(entry)
            if change is not None:
                changes.append(change)
                entries[entry.seq] = entry
        await self._commit(changes, max(e.seq for e in fresh), entries, stop)

    async def _commit(
        self,
        changes: list[LogChange],
        last_seq: int,
        entries: dict[int, LogEntry],
        stop: asyncio.Event,
    ) -> None:
        try:
            outcome = await self._apply_log(changes, last_seq, stop)
        except LedgerPermanentError as exc:
            if not changes:
                raise  # not even the offset can be written: the database is not ours
            self._ctx.log.error("batch not applied, isolating entries", error=str(exc))
            await self._isolate(changes, last_seq, entries, stop)
            return
        if outcome is not None:
            self._done(outcome)

    async def _isolate(
        self,
        changes: list[LogChange],
        last_seq: int,
        entries: dict[int, LogEntry],
        stop: asyncio.Event,
    ) -> None:
        """Apply entries one by one; park the one the store refuses and move past it."""
        for change in changes:
            try:
                outcome = await self._apply_log([change], change.seq, stop)
            except LedgerPermanentError as exc:
                entry = entries[change.seq]
                await self._ctx.park(
                    entry.subject, encode(entry.envelope), exc, stream_seq=entry.seq
                )
                outcome = await self._apply_log([], change.seq, stop)
            if outcome is None:
                return
            self._done(outcome)
        outcome = await self._apply_log([], last_seq, stop)
        if outcome is not None:
            self._done(outcome)

    async def _apply_log(
        self, changes: list[LogChange], last_seq: int, stop: asyncio.Event
    ) -> LogOutcome | None:
        histogram = self._ctx.metrics.ledger_seconds.labels("log")

        async def timed() -> LogOutcome:
            started = time.perf_counter()
            outcome = await self._store.apply_log(CONSUMER, last_seq, changes, outbox=self._outbox)
            histogram.observe(time.perf_counter() - started)
            return outcome

        return await self._retrying("apply log", timed, stop)

    def _done(self, outcome: LogOutcome) -> None:
        self.applied_seq = max(self.applied_seq, outcome.last_seq)
        if outcome.outbox_rows:
            self._on_commit()
        if outcome.released or outcome.admitted:
            self._ctx.log.debug(
                "log applied",
                seq=outcome.last_seq,
                released=len(outcome.released),
                admitted=len(outcome.admitted),
            )

    async def _retrying(
        self, what: str, call: Callable[[], Awaitable[T]], stop: asyncio.Event
    ) -> T | None:
        """``call`` until it does not fail transiently; ``None`` when stopped meanwhile.

        The log must not move on without the database: an entry skipped now would never be
        applied, so the consumer waits (with capped backoff) instead.
        """
        delay = 0.05
        while True:
            try:
                return await call()
            except LedgerTransientError as exc:
                self._ctx.log.warning(f"{what}: database unavailable, retrying", error=str(exc))
            if await wait_or_stop(stop, delay):
                return None
            delay = min(self._max_backoff, delay * 2)


__all__ = ["CONSUMER", "LogConsumer", "change_of"]


def _forged(entry: LogEntry) -> BadEntry | None:
    """The entry to park if its owner did not put it on the log (``usher.core.history.fold``)."""
    refused = forged(entry)
    return None if refused is None else refused_entry(entry, refused)
