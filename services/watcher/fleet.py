"""Which cluster this watcher sees, and whether it still sees it (M1).

What it does: ``here()`` is the cluster this watcher process serves (``DEFAULT_CLUSTER`` in a
single-cluster installation), set once by ``serve_cluster`` before the watcher's tasks start
(a context variable: each task inherits it, and two watchers in one test process keep apart);
``key_here`` makes a workload key of an object of this cluster, ``ours`` tells whether a key
is one of this cluster's workloads and ``object_of`` gives back its ``(namespace, name)``.
``LinkWatch`` runs only in a multi-cluster installation (``USHER_CLUSTER`` set), from the end
of the log's replay: it puts ``ClusterConnected`` (with the cluster's zones) on the log once
the watcher has listed its cluster and whenever its API server answers again, and
``ClusterDisconnected`` once it has not answered ``FAILURES_TO_DISCONNECT`` probes in a row.
What it must never do: decide anything, publish for another cluster, or publish a
``ClusterLost`` (only an operator declares a cluster lost).
"""

from __future__ import annotations

import asyncio
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Final

import aiohttp
from nats.js.api import PubAck

from schemas import (
    DEFAULT_CLUSTER,
    ClusterConnected,
    ClusterDisconnected,
    ClusterName,
    Envelope,
    EventId,
    WorkloadKey,
    Zone,
    cluster_of,
    object_name,
    workload_key,
)
from services.common.runtime import ServiceContext
from services.watcher.kinds import NAMESPACES
from services.watcher.options import WatcherOptions, retrying
from usher.adapters.kube import KubeClient, KubeError, NotFound
from usher.adapters.nats.log import publish_envelope
from usher.core.protocol.subjects import WATCHER_SOURCE

_HERE: ContextVar[tuple[ClusterName, tuple[Zone, ...] | None]] = ContextVar(
    "usher_watcher_cluster", default=(DEFAULT_CLUSTER, None)
)

FAILURES_TO_DISCONNECT: Final = 2
"""Probes in a row that must fail before the cluster is said disconnected (one lost packet
is not a lost cluster)."""
PROBE_INTERVAL_S: Final = 1.0


def serve_cluster(cluster: ClusterName, zones: tuple[Zone, ...]) -> None:
    """This watcher (and every task it starts from now on) serves ``cluster``, whose zones
    are ``zones``."""
    _HERE.set((cluster, zones))


def here() -> ClusterName:
    return _HERE.get()[0]


def zone_here(zone: Zone) -> bool:
    """Whether ``zone`` is one of this watcher's cluster's (any zone in a single-cluster
    installation): it observes only nodes of its own zones."""
    zones = _HERE.get()[1]
    return zones is None or zone in zones


def subject_zone(zone: Zone) -> Zone:
    """The zone a workload's events go under: its own, or, when that is another cluster's,
    this cluster's first (NATS lets a watcher publish only under its own zones; the core
    says why such a job waits: ``ZoneInOtherCluster``, M1)."""
    zones = _HERE.get()[1]
    return zone if not zones or zone in zones else zones[0]


def key_here(namespace: str, name: str) -> WorkloadKey:
    """The key of object ``namespace/name`` of this watcher's cluster."""
    return workload_key(namespace, name, here())


def in_this_cluster(key: WorkloadKey) -> WorkloadKey:
    """``key`` (made by the core from an object's ``namespace/name``) as this cluster's."""
    if here() == DEFAULT_CLUSTER:
        return key
    return key_here(*object_name(key))


def ours(key: WorkloadKey) -> bool:
    """Whether ``key`` is a workload of this watcher's cluster."""
    return cluster_of(key) == here()


def object_of(key: WorkloadKey) -> tuple[str, str]:
    """``(namespace, name)`` of the object ``key`` stands for in its cluster."""
    return object_name(key)


class LinkWatch:
    """Says on the log whether this watcher's cluster answers (M1)."""

    def __init__(
        self,
        ctx: ServiceContext,
        kube: KubeClient,
        options: WatcherOptions,
        *,
        interval_s: float = PROBE_INTERVAL_S,
    ) -> None:
        assert ctx.settings.cluster is not None
        self.ctx = ctx
        self.kube = kube
        self.options = options
        self.cluster = ctx.settings.cluster
        self.zones = list(ctx.settings.clusters.get(self.cluster, ()))
        self.interval_s = interval_s
        self._said = 0
        self._run = uuid.uuid4().hex

    async def run(self, listed: asyncio.Event) -> None:
        """Probe the API server until stopped: connected once the watcher has ``listed`` its
        cluster and the server answers, disconnected after ``FAILURES_TO_DISCONNECT`` failed
        probes in a row (also before the first listing: a watcher restarted while its cluster
        is away says so, whatever the log said before)."""
        connected: bool | None = None  # what this process last said: nothing yet
        failures = 0
        while not self.ctx.stop.is_set():
            problem = await self._probe()
            if problem is None:
                failures = 0
                if connected is not True and listed.is_set():
                    await self._say(self._connected())
                    connected = True
            else:
                failures += 1
                if connected is not False and failures >= FAILURES_TO_DISCONNECT:
                    await self._say(ClusterDisconnected(cluster=self.cluster, reason=problem))
                    connected = False
            await asyncio.sleep(self.interval_s)

    def _connected(self) -> ClusterConnected:
        return ClusterConnected(
            cluster=self.cluster, zones=self.zones, watcher=self.ctx.settings.instance
        )

    async def _probe(self) -> str | None:
        """None when the API server answers (a 404 is an answer), else what failed."""
        try:
            await asyncio.wait_for(
                self.kube.get(NAMESPACES, None, "default"), timeout=self.interval_s * 5
            )
        except NotFound:
            return None
        except KubeError as exc:
            return f"{type(exc).__name__}: {exc}"
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    async def _say(self, event: ClusterConnected | ClusterDisconnected) -> None:
        state = "connected" if isinstance(event, ClusterConnected) else "disconnected"
        self._said += 1
        # Unique per process and announcement: each one is news on the log.
        envelope = Envelope(
            id=EventId(f"cluster:{self.cluster}:{self._run}:{self._said}:{state}"),
            time=datetime.now(UTC),
            source=WATCHER_SOURCE,
            event=event,
        )
        subject = self.ctx.subjects.fleet(self.cluster, state)

        async def publish() -> PubAck:
            return await publish_envelope(self.ctx.js, subject, envelope)

        await retrying(publish, f"saying cluster {state}", self.ctx.log, self.options)
        self.ctx.log.info(f"cluster {state}", cluster=self.cluster)
