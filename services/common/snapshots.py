"""Start a service's engine from its latest snapshot plus the tail of the log; keep it fresh.

What it does: on start, loads this service's snapshot (``dequeuer-<zone>``, ``preemptor``)
from the installation's object store and restores the engine from it when the snapshot was
made under the same engine configuration, of this very log (the stream's creation time), and
covers no more than the log holds; the projection then follows the log from the next
sequence. Otherwise (none, foreign, refused, store unreachable) it replays from sequence 1,
as before. While following and caught up it saves a new snapshot once ``every_entries``
entries were handled or ``every_s`` seconds passed with at least one entry handled (checked
at batch boundaries), at a quiet moment (nothing buffered) unless twice overdue, and once
more on a graceful stop. Encoding is synchronous CPU work (about 0.1 s per 100k workloads,
measured); the upload runs as a background task so the loop goes on meanwhile.
A dequeuer's snapshot holds what it decided itself too (reservations the ledger granted,
refusals reverted): it is its live state at a point where every request of every pass was
answered, and the ledger's decisions for them arrive later on the log as no-ops.
What it must never do: stop a service because of a snapshot (it logs and replays instead);
save a state that is not a consistent point of the log (mid-batch, or during a pass whose
requests were not answered: the service says so with ``consistent=False``); restore a
snapshot of another configuration or another log.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

import nats.errors
from nats.js import JetStreamContext

from services.common.projection import Projection
from services.common.runtime import ServiceContext
from services.common.settings import SettingsError
from usher.adapters.nats.follower import LogFollower
from usher.adapters.nats.snapshots import (
    LABEL_CONFIG,
    LABEL_FORMAT,
    LABEL_LOG,
    SnapshotStore,
    StoredSnapshot,
    labels,
    log_created,
    unusable,
)
from usher.adapters.nats.subjects import Subjects
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import SnapshotError, restore, snapshot
from usher.core.model.config import EngineConfig

__all__ = [
    "LABEL_CONFIG",
    "LABEL_FORMAT",
    "LABEL_LOG",
    "EngineSnapshots",
    "SnapshotPolicy",
    "labels",
]


async def log_identity(js: JetStreamContext, subjects: Subjects) -> str:
    """The log's creation time: a re-created stream reuses sequences for other entries."""
    return log_created(await js.stream_info(subjects.stream_name))


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When a service saves snapshots of its engine."""

    enabled: bool = True
    every_entries: int = 50_000
    every_s: float = 60.0

    @classmethod
    def from_env(cls) -> SnapshotPolicy:
        """``USHER_SNAPSHOTS=off``, ``USHER_SNAPSHOT_EVERY_ENTRIES``, ``USHER_SNAPSHOT_EVERY_S``."""
        env = os.environ
        entries = env.get("USHER_SNAPSHOT_EVERY_ENTRIES", "50000")
        seconds = env.get("USHER_SNAPSHOT_EVERY_S", "60")
        try:
            policy = cls(
                enabled=env.get("USHER_SNAPSHOTS", "on").lower() not in ("off", "0", "false"),
                every_entries=int(entries),
                every_s=float(seconds),
            )
        except ValueError as exc:
            raise SettingsError("snapshot-every", f"not a number: {exc}") from exc
        if policy.every_entries <= 0 or policy.every_s <= 0:
            raise SettingsError("snapshot-every", f"must be positive: {entries}, {seconds}")
        return policy

    def due(self, entries: int, elapsed_s: float, *, busy: bool) -> bool:
        """Whether to save now, ``entries`` handled and ``elapsed_s`` seconds after the last
        save: once a period (entries or seconds) is over, at a quiet moment (nothing
        ``busy`` waiting) unless twice overdue (a log that is never quiet)."""
        every_n, every_s = self.every_entries, self.every_s
        if entries < every_n and elapsed_s < every_s:
            return False
        overdue = entries >= OVERDUE * every_n or elapsed_s >= OVERDUE * every_s
        return overdue or not busy


OVERDUE = 2.0
"""Past this many periods, save even while entries are waiting (a log that is never quiet)."""


class EngineSnapshots:
    """The snapshot policy of one service's projection (see the module docstring)."""

    def __init__(
        self,
        ctx: ServiceContext,
        name: str,
        config: EngineConfig,
        policy: SnapshotPolicy | None = None,
    ) -> None:
        self.ctx = ctx
        self.name = name
        self.config = config
        self.policy = policy if policy is not None else SnapshotPolicy.from_env()
        self.store = SnapshotStore(ctx.js, ctx.subjects)
        self.log = ctx.log.bind(snapshot=name)
        self.restored_seq = 0
        """The log sequence the restored snapshot covered (0: full replay)."""
        self.saved_seq = 0
        self._saved_at = time.monotonic()
        self._log_created = ""
        self._boundary = (0, 0)
        """``(handled_seq, applied_seq)`` at the last batch boundary the service reported."""
        self._upload: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ start

    async def open(self) -> Projection:
        """The projection to follow the log with: restored from the snapshot, or empty."""
        engine, seq = await self._restore()
        self.restored_seq = self.saved_seq = seq
        self._boundary = (seq, seq)
        self._saved_at = time.monotonic()
        return Projection(engine, applied_seq=seq)

    def follower(
        self, projection: Projection, *, max_batch: int = 4096, start_seq: int | None = None
    ) -> LogFollower:
        """A follower of the log from right after what ``projection`` has applied (or from
        ``start_seq``, earlier, for another projection fed by the same follower: the engine
        ignores what it has applied)."""
        return LogFollower(
            self.ctx.js,
            self.ctx.subjects,
            start_seq=projection.applied_seq + 1 if start_seq is None else start_seq,
            max_batch=max_batch,
            # The pure engine makes no reference cycles: no need to collect while replaying.
            pause_collector=True,
        )

    async def _restore(self) -> tuple[Engine, int]:
        fresh = Engine(self.config), 0
        try:
            stream = await self.ctx.js.stream_info(self.ctx.subjects.stream_name)
            self._log_created = log_created(stream)
            if not self.policy.enabled:
                return fresh
            info = await self.store.info(self.name)
            problem = self._unusable(info.seq, info.labels, stream.state.last_seq) if info else ""
            stored = await self.store.load(self.name) if info is not None and not problem else None
        except (nats.errors.Error, TimeoutError) as exc:
            self.log.warning("snapshot not read, replaying the whole log", error=repr(exc))
            return fresh
        if info is None:
            self.log.info("no snapshot, replaying the whole log")
            return fresh
        if stored is not None:
            # It may have been replaced since ``info``: judge what was actually read.
            problem = self._unusable(stored.seq, stored.labels, stream.state.last_seq)
        if problem or stored is None:
            self.log.warning("snapshot not usable, replaying the whole log", reason=problem)
            return fresh
        return self._restored(stored) or fresh

    def _unusable(self, seq: int, found: dict[str, str], last_seq: int) -> str:
        return unusable(seq, found, labels(self.config, self._log_created), last_seq)

    def _restored(self, stored: StoredSnapshot) -> tuple[Engine, int] | None:
        started = time.perf_counter()
        try:
            engine = restore(stored.data, self.config)
        except SnapshotError as exc:
            self.log.warning(
                "snapshot refused, replaying the whole log", reason=exc.reason, detail=str(exc)
            )
            return None
        except Exception as exc:
            # A bug in restoring must not keep the service from starting (it would crash
            # again on every restart): the log is still there to replay.
            self.log.error(
                "snapshot restore failed, replaying the whole log",
                error=type(exc).__name__,
                detail=str(exc),
            )
            return None
        self.log.info(
            "snapshot restored",
            seq=stored.seq,
            bytes=len(stored.data),
            restore_ms=round((time.perf_counter() - started) * 1000, 1),
        )
        return engine, stored.seq

    # ------------------------------------------------------------------ while following

    def after_batch(self, projection: Projection, follower: LogFollower) -> None:
        """Call at a consistent point: a whole batch handled (and the pass it led to done).

        Saves a snapshot when one is due; the upload goes on in the background.
        """
        seq = follower.last_seq
        self._boundary = (seq, projection.applied_seq)
        if not self.policy.enabled or not follower.caught_up or seq <= self.saved_seq:
            return
        if self._upload is not None and not self._upload.done():
            return
        elapsed = time.monotonic() - self._saved_at
        if not self.policy.due(seq - self.saved_seq, elapsed, busy=bool(follower.pending)):
            return
        encoded = self._encode(projection.engine, seq)
        if encoded is not None:
            self._upload = asyncio.create_task(self._put(seq, *encoded))

    def _encode(self, engine: Engine, seq: int) -> tuple[bytes, float] | None:
        started = time.perf_counter()
        # Whatever happens, the next attempt is one period away (no retry storm).
        self.saved_seq = seq
        self._saved_at = time.monotonic()
        try:
            data = snapshot(engine)
        except Exception as exc:
            # A snapshot only shortens the next start; failing one must not stop the loop.
            self.log.error(
                "snapshot not encoded", seq=seq, error=type(exc).__name__, detail=str(exc)
            )
            return None
        return data, (time.perf_counter() - started) * 1000

    async def _put(self, seq: int, data: bytes, encode_ms: float) -> None:
        started = time.perf_counter()
        try:
            await self.store.save(self.name, seq, data, labels(self.config, self._log_created))
        except Exception as exc:
            # NATS unreachable, bucket full...: the previous snapshot stays in place and the
            # next period tries again. Never let the background upload fail the service.
            self.log.warning(
                "snapshot not saved", seq=seq, error=type(exc).__name__, detail=str(exc)
            )
            return
        self.log.info(
            "snapshot saved",
            seq=seq,
            bytes=len(data),
            encode_ms=round(encode_ms, 1),
            upload_ms=round((time.perf_counter() - started) * 1000, 1),
        )

    # ------------------------------------------------------------------ stop

    async def close(self, projection: Projection, *, consistent: bool = True) -> None:
        """On a graceful stop: finish the upload in flight, then save the final state.

        ``consistent=False`` (a pass was interrupted before its requests were answered)
        saves nothing new: that state holds admissions nobody confirmed or refused.
        """
        upload, self._upload = self._upload, None
        if upload is not None:
            await asyncio.wait({upload})  # ``_put`` never raises; our own cancel propagates
        if not self.policy.enabled or not consistent:
            return
        handled, applied = self._boundary
        # Nothing applied since the last boundary: everything up to it is handled (bad entries
        # included, parked). Otherwise stopped mid-batch: what is applied is what is covered.
        seq = handled if projection.applied_seq == applied else projection.applied_seq
        if seq <= self.saved_seq:
            return
        encoded = self._encode(projection.engine, seq)
        if encoded is not None:
            await self._put(seq, *encoded)
