"""Several clusters under one queue (docs/admission-rules.md M1): which are connected, whose
zones are whose, and why a workload waits for its cluster.

What it does: ``ClusterLink`` is what the log last said of one cluster (``ClusterConnected``,
``ClusterDisconnected``, ``ClusterLost``), with its zones; ``fold_link`` moves a cluster's
link by one such event (the first cluster that claims a zone keeps it: ``zone_owner``);
``stop`` says why a waiting workload may not be offered now: its own cluster (the one its key
names, ``schemas.cluster_of``) is disconnected or lost, or a zone it accepts is another
cluster's (no copy of a job is dispatched across clusters: a job runs where it was created).
A log without any of these events has no links, and nothing here ever shuts a workload.
What it must never do: read a clock, decide an admission, or release quota (the engine
folds a lost cluster's workloads as deleted, and the ledger releases them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum

import msgspec

from schemas import (
    ClusterConnected,
    ClusterDisconnected,
    ClusterLost,
    ClusterName,
    Millis,
    Reason,
    WorkloadKey,
    Zone,
    cluster_of,
)
from usher.core.model import reasons


class LinkState(StrEnum):
    """What the log last said of a cluster."""

    CONNECTED = "Connected"
    DISCONNECTED = "Disconnected"
    LOST = "Lost"


class ClusterLink(msgspec.Struct, frozen=True, kw_only=True):
    """One cluster as the log last described it."""

    state: LinkState
    zones: tuple[Zone, ...] = ()
    """The zones it claimed when it last connected (those no earlier cluster held)."""
    since_ms: Millis = Millis(0)
    """When the log said so (the event's time)."""
    why: str = ""
    """The disconnection's reason, or who declared it lost and why."""


ClusterEventOfLink = ClusterConnected | ClusterDisconnected | ClusterLost


def fold_link(
    links: Mapping[ClusterName, ClusterLink], event: ClusterEventOfLink, now: Millis
) -> ClusterLink:
    """The link of ``event.cluster`` after ``event``: connected with the zones no other
    cluster already holds, disconnected or lost with why (its zones kept)."""
    before = links.get(event.cluster)
    kept = before.zones if before is not None else ()
    match event:
        case ClusterConnected():
            owners = zone_owners(links)
            zones = tuple(
                zone for zone in event.zones if owners.get(zone, event.cluster) == event.cluster
            )
            return ClusterLink(state=LinkState.CONNECTED, zones=zones, since_ms=now)
        case ClusterDisconnected():
            return ClusterLink(
                state=LinkState.DISCONNECTED, zones=kept, since_ms=now, why=event.reason
            )
        case ClusterLost():
            why = f"by {event.by}" + (f": {event.reason}" if event.reason else "")
            return ClusterLink(state=LinkState.LOST, zones=kept, since_ms=now, why=why)


def zone_owners(links: Mapping[ClusterName, ClusterLink]) -> dict[Zone, ClusterName]:
    """Zone -> the cluster that holds it (zones no cluster claimed are in none)."""
    return {zone: cluster for cluster, link in links.items() for zone in link.zones}


def lost_workloads(keys: Sequence[WorkloadKey], cluster: ClusterName) -> list[WorkloadKey]:
    """The workloads of ``keys`` that live in ``cluster``, in their order."""
    return [key for key in keys if cluster_of(key) == cluster]


def stop(
    links: Mapping[ClusterName, ClusterLink],
    owners: Mapping[Zone, ClusterName],
    key: WorkloadKey,
    zones: Sequence[Zone],
) -> Reason | None:
    """Why the waiting workload ``key`` accepting ``zones`` may not be offered now (M1), or
    None: its cluster is connected (or the log never spoke of it) and every zone it accepts
    is its cluster's or no cluster's."""
    if not links:
        return None
    cluster = cluster_of(key)
    link = links.get(cluster)
    if link is not None and link.state == LinkState.DISCONNECTED:
        return reasons.cluster_disconnected(cluster, link.since_ms, link.why)
    if link is not None and link.state == LinkState.LOST:
        return reasons.cluster_lost(cluster, link.since_ms, link.why)
    for zone in zones:
        other = owners.get(zone, cluster)
        if other != cluster:
            return reasons.zone_in_other_cluster(zone, other, cluster)
    return None


def opening(links: Mapping[ClusterName, ClusterLink], key: WorkloadKey) -> str:
    """What opens M1 for ``key``, in a clause for people."""
    cluster = cluster_of(key)
    link = links.get(cluster)
    if link is not None and link.state == LinkState.DISCONNECTED:
        return f"cluster {cluster}'s watcher connects again, or it is declared lost"
    if link is not None and link.state == LinkState.LOST:
        return f"cluster {cluster}'s watcher connects again"
    return f"its zones are all cluster {cluster}'s"


def any_shut(links: Mapping[ClusterName, ClusterLink]) -> bool:
    """Whether M1 may shut some workload at all: some cluster is not connected, or some
    cluster claimed zones (a workload may accept one of them from another cluster)."""
    return any(link.state != LinkState.CONNECTED or link.zones for link in links.values())
