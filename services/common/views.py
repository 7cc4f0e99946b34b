"""The people read model, kept by a service that follows the whole log: what ``usher jobs``,
``queue(s)``, ``explain`` and ``wait`` restore instead of folding the log.

What it does: ``PeopleViews.open`` restores the read model of the service's engine
configuration (object ``people-<digest>``, ``usher.core.history.people_snapshot``) from the
installation's views bucket ``<PREFIX>_VIEWS`` when it is usable (same format, configuration
and log, no further than the log's end: ``usher.adapters.nats.snapshots.unusable``), else
starts an empty ``PeopleProjection``; the service feeds it every entry it follows (its
``apply`` is the one fold readers use) and calls ``after_batch``, which saves it on the
service's snapshot policy (``SnapshotPolicy.due``: every N entries or seconds, at a quiet
moment), and ``close`` on a graceful stop. Only services write this bucket (deploy's NATS
permissions: the preemptor writes it, the console reads it), so what people are shown is what
a service folded from the log.
What it must never do: stop or slow the service's decisions because of the read model (it logs
and starts empty instead; uploads run in the background), or save a state in the middle of an
entry.
"""

from __future__ import annotations

import asyncio
import time

import nats.errors

from services.common.runtime import ServiceContext
from services.common.snapshots import SnapshotPolicy
from usher.adapters.nats.follower import LogFollower
from usher.adapters.nats.snapshots import (
    SnapshotStore,
    labels,
    log_created,
    unusable,
    views_bucket_name,
)
from usher.core.history.people import PeopleProjection
from usher.core.history.people_snapshot import FORM, decode, encode, object_name
from usher.core.model.config import EngineConfig


class PeopleViews:
    """The people read model of one service (see the module docstring)."""

    def __init__(
        self, ctx: ServiceContext, config: EngineConfig, policy: SnapshotPolicy | None = None
    ) -> None:
        self.ctx = ctx
        self.config = config
        self.policy = policy if policy is not None else SnapshotPolicy.from_env()
        self.store = SnapshotStore(ctx.js, ctx.subjects, bucket=views_bucket_name(ctx.subjects))
        self.name = object_name(config)
        self.log = ctx.log.bind(read_model=self.name)
        self.saved_seq = 0
        self._saved_at = time.monotonic()
        self._labels: dict[str, str] = {}
        self._upload: asyncio.Task[None] | None = None

    async def open(self) -> PeopleProjection:
        """The read model to feed: the saved one when usable, else an empty one."""
        self._saved_at = time.monotonic()
        try:
            stream = await self.ctx.js.stream_info(self.ctx.subjects.stream_name)
            self._labels = labels(self.config, log_created(stream), form=FORM)
            stored = await self.store.load(self.name) if self.policy.enabled else None
        except (nats.errors.Error, TimeoutError) as exc:
            self.log.warning("read model not read, folding the whole log", error=repr(exc))
            return PeopleProjection(self.config)
        if stored is None:
            return PeopleProjection(self.config)
        problem = unusable(stored.seq, stored.labels, self._labels, stream.state.last_seq)
        if problem:
            self.log.warning("read model not usable, folding the whole log", reason=problem)
            return PeopleProjection(self.config)
        try:
            state = decode(stored.data, self.config)
        except Exception as exc:
            # A bug in decoding must not keep the service from starting: the log is there.
            self.log.warning("read model refused, folding the whole log", detail=str(exc))
            return PeopleProjection(self.config)
        if state.applied_seq != stored.seq:
            self.log.warning("read model mislabelled, folding the whole log", seq=stored.seq)
            return PeopleProjection(self.config)
        self.saved_seq = state.applied_seq
        self.log.info("read model restored", seq=stored.seq, bytes=len(stored.data))
        return state

    def after_batch(self, state: PeopleProjection, follower: LogFollower) -> None:
        """Call after a batch was applied to ``state``: saves it when the policy says so (the
        upload runs in the background)."""
        seq = state.applied_seq
        if not self.policy.enabled or not follower.caught_up or seq <= self.saved_seq:
            return
        if self._upload is not None and not self._upload.done():
            return
        elapsed = time.monotonic() - self._saved_at
        if not self.policy.due(seq - self.saved_seq, elapsed, busy=bool(follower.pending)):
            return
        data = self._encode(state)
        if data is not None:
            self._upload = asyncio.create_task(self._put(seq, data))

    async def close(self, state: PeopleProjection) -> None:
        """On a graceful stop: finish the upload in flight, then save the final state."""
        upload, self._upload = self._upload, None
        if upload is not None:
            await asyncio.wait({upload})  # ``_put`` never raises
        if not self.policy.enabled or state.applied_seq <= self.saved_seq:
            return
        data = self._encode(state)
        if data is not None:
            await self._put(state.applied_seq, data)

    def _encode(self, state: PeopleProjection) -> bytes | None:
        # Whatever happens, the next attempt is one period away (no retry storm).
        self.saved_seq = state.applied_seq
        self._saved_at = time.monotonic()
        try:
            return encode(state)
        except Exception as exc:
            self.log.error("read model not encoded", error=type(exc).__name__, detail=str(exc))
            return None

    async def _put(self, seq: int, data: bytes) -> None:
        try:
            await self.store.save(self.name, seq, data, self._labels)
        except Exception as exc:
            # Unreachable, refused, full: the previous read model stays; readers fold more.
            self.log.warning("read model not saved", seq=seq, error=type(exc).__name__)
            return
        self.log.info("read model saved", seq=seq, bytes=len(data))
