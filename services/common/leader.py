"""Leader election for single-writer roles through a JetStream key-value key with a TTL.

What it does: one key per role (``dequeuer-<zone>``, ``preemptor``, ``ledger-relay``) in the
bucket ``<PREFIX>_LEADERS``, whose entries expire ``leader_ttl_s`` after they were written
(the bucket's max age). A candidate acquires with ``create`` (refused while the key exists),
the leader renews with ``update(last=revision)`` every third of the TTL, and a standby tries
again at the same pace, so a dead leader is replaced within about TTL + TTL/3. A process
restarted under the same identity (``USHER_INSTANCE``, default the host or pod name; the role
is the key) takes its own key back at once instead of waiting out its predecessor's TTL. A
graceful stop deletes the key so a standby takes over at its next try.
Renewal refused (someone else holds the key, or it expired) means lost at once; renewal
unanswered (NATS away) is retried and counts as lost once two thirds of the TTL went by since
the last successful renewal, before anybody else can acquire it.
What it must never do: report leadership it cannot prove (a leader stops acting when ``lost``
is set: a standby may acquire one TTL after the last renewal), hide a loss, or stop a service
because NATS is briefly away (a standby just keeps trying).
With ``USHER_LEADER_ELECTION=off`` every process is the leader (one replica per role).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from services.common.runtime import ServiceContext, wait_or_stop
from services.common.tasks import cancel_tasks

__all__ = ["Leadership", "LeadershipLost", "bucket_name"]


class LeadershipLost(Exception):
    """Raised by a service that gives up its role for good (the process restarts as standby)."""


def bucket_name(prefix: str) -> str:
    return f"{prefix}_LEADERS"


_NATS_ERRORS = (nats.errors.Error, nats.js.errors.Error, TimeoutError, OSError)


class Leadership:
    """Acquire, renew and release one role's key (see the module docstring)."""

    def __init__(
        self,
        ctx: ServiceContext,
        role: str,
        *,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.role = role
        self.ttl_s = ctx.settings.leader_ttl_s
        self.enabled = ctx.settings.leader_election
        self.owner = ctx.settings.instance
        self._value = self.owner.encode()
        self._on_change = on_change
        self._kv: KeyValue | None = None
        self._revision = 0
        self._renewed_at = 0.0
        self._sent_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self.is_leader = False
        self.acquired = asyncio.Event()
        """Set while this process is the leader."""
        self.standby = asyncio.Event()
        """Set while it is not (the complement of ``acquired``, to wait on)."""
        self.standby.set()
        self.lost = asyncio.Event()
        """Set when leadership this process held was lost (not on a graceful release)."""
        self.log = ctx.log.bind(role=role, instance=self.owner)
        self._gauge = ctx.metrics.leader.labels(role)

    async def start(self) -> bool:
        """Make the first attempt now, keep trying or renewing in the background; leader?"""
        if not self.enabled:
            self._set(True)
            return True
        await self._attempt()
        if not self.is_leader:
            self.log.info("standby: another instance leads, following the log meanwhile")
        self._task = asyncio.create_task(self._run(), name=f"leader-{self.role}")
        return self.is_leader

    async def close(self) -> None:
        """Stop campaigning; a leader deletes its key so a standby takes over at once."""
        self._closing.set()
        task, self._task = self._task, None
        if task is not None:
            for error in (await cancel_tasks([task])).values():
                raise error
        if self.enabled and self.is_leader and self._kv is not None:
            with contextlib.suppress(*_NATS_ERRORS):
                # Only our own revision: never delete a key a successor already holds.
                await self._kv.delete(self.role, last=self._revision)
                self.log.info("leadership released")
        if self.is_leader:
            self._set(False)

    def holds(self) -> bool:
        """Leader, and provably so right now: less than the TTL (minus a margin for clock
        rates) since the last successful write was *sent*. Guards a loop that was stalled
        (a long replay batch, a paused VM) past its renewal against acting on stale rights."""
        if not self.is_leader:
            return False
        return not self.enabled or time.monotonic() - self._sent_at < self.ttl_s * 0.9

    @property
    def interval_s(self) -> float:
        return self.ttl_s / 3

    async def _run(self) -> None:
        while not self._closing.is_set():
            if self.is_leader:
                await asyncio.sleep(self.interval_s)
                await self._renew()
            else:
                await asyncio.sleep(self.interval_s)
                await self._attempt()

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            js = self.ctx.js
            name = bucket_name(self.ctx.subjects.prefix)
            try:
                self._kv = await js.key_value(name)
            except nats.js.errors.BucketNotFoundError:
                # Two candidates may create it at once: same configuration, so both succeed.
                self._kv = await js.create_key_value(bucket=name, ttl=self.ttl_s, history=1)
        return self._kv

    async def _attempt(self) -> None:
        """One try to become the leader; errors only mean "not now"."""
        try:
            kv = await self._bucket()
            sent = time.monotonic()
            revision: int | None
            try:
                revision = await kv.create(self.role, self._value)
            except nats.js.errors.KeyWrongLastSequenceError:
                revision = await self._take_back(kv)
        except _NATS_ERRORS as exc:
            self.log.debug("leadership not acquired", error=type(exc).__name__)
            return
        if revision is None:
            return
        self._revision = revision
        self._renewed_at = time.monotonic()
        self._sent_at = sent
        self.log.info("leadership acquired", revision=revision, pid=os.getpid())
        self._set(True)

    async def _take_back(self, kv: KeyValue) -> int | None:
        """The key exists: ours if it names our identity (our predecessor died), else None."""
        try:
            entry = await kv.get(self.role)
        except nats.js.errors.KeyNotFoundError:
            return None  # expired meanwhile: the next attempt creates it
        if entry.value != self._value:
            return None
        try:
            return await kv.update(self.role, self._value, last=entry.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            return None

    async def _renew(self) -> None:
        kv = self._kv
        assert kv is not None
        while not self._closing.is_set():
            sent = time.monotonic()
            try:
                self._revision = await kv.update(self.role, self._value, last=self._revision)
            except nats.js.errors.KeyWrongLastSequenceError:
                # Someone else holds it, or it expired: another leader may be acting already.
                self._lose("key taken or expired")
                return
            except _NATS_ERRORS as exc:
                # Unknown whether it was written: keep trying, but only while nobody else can
                # have acquired it (the key lives ``ttl_s`` after our last good renewal).
                if time.monotonic() - self._renewed_at >= self.ttl_s * 2 / 3:
                    self._lose(f"renewal unanswered ({type(exc).__name__})")
                    return
                self.log.warning("leadership renewal failed, retrying", error=type(exc).__name__)
                if await wait_or_stop(self._closing, min(0.5, self.interval_s / 2)):
                    return
                continue
            self._renewed_at = time.monotonic()
            self._sent_at = sent
            return

    def _lose(self, why: str) -> None:
        self.log.error("leadership lost", reason=why)
        self._set(False)
        self.lost.set()

    def _set(self, leader: bool) -> None:
        self.is_leader = leader
        self._gauge.set(1 if leader else 0)
        if leader:
            self.standby.clear()
            self.acquired.set()
        else:
            self.acquired.clear()
            self.standby.set()
        if self._on_change is not None:
            self._on_change(leader)
