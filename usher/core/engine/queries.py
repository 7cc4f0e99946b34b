"""Read-side queries of the engine: what a workload's state is and why, per queue and node.

What it does: answers ``EngineContext.queues``, ``queue_counts``, ``job_state``, ``jobs``,
``ready_timeout_ms``, ``quota_used`` (and split by zone, ``quota_used_by_zone``),
``quota_zone_mins``, ``quota_nodes``, ``reason`` (as of the last pass),
``reason_now`` (worked out from the state alone, for a state rebuilt from the log) and
``admission_shortfall`` (the ledger's check) over an engine's state; for people, an admitted
workload's ``topology_pin`` (TP1), each cluster with its zones and jobs (``clusters``, M1) and
each topology domain's room (``domain_use``: TP1's own ``topology.rooms``, never a second
count); the views they return (``JobView``, ``QueueEntry``, ``ClusterView``, ``DomainUse``).
What it must never do: change the state (only ``next_wakeup``'s pruning of stale wakeups is
a write, and it stays in the engine), decide anything, read a clock, or iterate an unordered
collection where the order could reach an answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import msgspec

from schemas import (
    ClusterName,
    Millis,
    QueueName,
    QuotaPath,
    Reason,
    TopologyPin,
    WorkloadKey,
    Zone,
    cluster_of,
)
from usher.core.engine import backfill, starvation
from usher.core.gates import chain
from usher.core.model import reasons
from usher.core.rules import topology
from usher.core.rules.arbitration import Load, NodeLoad, first_shortfall, quota_exceeded
from usher.core.rules.clusters import LinkState
from usher.core.state.indexed import (
    ADMITTED,
    FINISHED,
    INADMISSIBLE,
    PENDING,
    UNMAPPED,
    Job,
    JobState,
    Placement,
    QuotaNodeInfo,
    shape_of,
)

if TYPE_CHECKING:
    from usher.core.engine.context import EngineContext


class QueueEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One pending workload as a queue shows it."""

    job: WorkloadKey
    position: int
    priority: int


class JobView(msgspec.Struct, frozen=True, kw_only=True):
    """What the engine knows about one workload, for queries and ``usher explain``."""

    job: WorkloadKey
    state: JobState
    """One of ``ENGINE_STATES``."""
    queue: QueueName | None = None
    quota: QuotaPath | None = None
    position: int | None = None
    priority: int = 0
    reason: Reason | None = None


def queues(e: EngineContext, head: int | None = None) -> dict[QueueName, list[QueueEntry]]:
    """Every queue with its pending workloads in order (only the first ``head`` of each when
    given: a view per workload is what costs)."""
    out: dict[QueueName, list[QueueEntry]] = {}
    for queue in e.leaf_queues.values():
        entries = queue.entries if head is None else queue.entries[:head]
        out[queue.name] = [
            QueueEntry(job=key, position=i + 1, priority=-neg)
            for i, (neg, _, key) in enumerate(entries)
        ]
    return out


def queue_counts(e: EngineContext) -> dict[QueueName, tuple[int, int]]:
    """``{queue: (pending, admitted)}`` in O(queues), without a view per workload."""
    return {
        queue.name: (len(queue.entries), len(e.leaf_admitted.get(leaf, ())))
        for leaf, queue in e.leaf_queues.items()
    }


def job_state(e: EngineContext, key: WorkloadKey) -> JobView | None:
    """What the engine knows about one workload, or None if unknown (or deleted)."""
    job = e.state.jobs.get(key)
    if job is None:
        return None
    queue: QueueName | None = None
    quota: QuotaPath | None = None
    position: int | None = None
    if job.state == ADMITTED or (job.state == FINISHED and job.leaf is not None):
        quota = job.used_path or job.leaf
    else:
        quota = job.leaf
    if quota is not None and quota in e.state.tree.nodes:
        queue = e.state.tree.nodes[quota].queue
    if job.state == PENDING and job.leaf is not None:
        position = e.leaf_queues[job.leaf].position(job)
    return JobView(
        job=key,
        state=job.state,
        queue=queue,
        quota=quota,
        position=position,
        priority=job.priority,
        reason=reason(e, key),
    )


def ready_timeout_ms(e: EngineContext, key: WorkloadKey) -> int:
    """The ready timeout (R10) that applies to ``key`` where it is: the quota it was admitted
    to, else its leaf; 0 when off or the workload is unknown or unmapped."""
    job = e.state.jobs.get(key)
    if job is None:
        return 0
    quota = job.used_path or job.leaf
    info = e.state.tree.nodes.get(quota) if quota is not None else None
    return info.readiness.timeout_ms if info is not None else 0


def jobs(e: EngineContext) -> dict[WorkloadKey, JobView]:
    """Every known workload (deleted ones are gone), by key."""
    out: dict[WorkloadKey, JobView] = {}
    for key in sorted(e.state.jobs):
        view = job_state(e, key)
        assert view is not None
        out[key] = view
    return out


def quota_used(e: EngineContext) -> dict[QuotaPath, dict[str, int]]:
    """Used amounts of every node of the tree in force (leaves and inner nodes)."""
    return {
        path: {r: a for r, a in sorted(info.used.items()) if a != 0}
        for path, info in e.state.tree.nodes.items()
    }


def quota_used_by_zone(e: EngineContext) -> dict[tuple[QuotaPath, Zone], dict[str, int]]:
    """What ``quota_used`` counts, split by zone, for every node of the tree in force and
    every zone something counts in on it: admissions, holds and lingering usage (R7), each on
    the nodes of its path (a vanished leaf's on its prefixes that exist). The engine's own
    per-zone counts are the same sums kept only on the nodes that cap or guarantee a zone (Z1,
    Z4: all a decision reads); this is for reports. Like them it leaves out what a reclaim's
    victims add above their preemptor's hold until seen stopped (a node's ``residual``, R7),
    which has no zone per node. Sums: the order of the placements reaches no answer."""
    used: dict[tuple[QuotaPath, Zone], dict[str, int]] = {}
    for path, shape, zone in _counted_placements(e):
        for info in e.nodes_on_path(path):
            into = used.setdefault((info.path, zone), {})
            for resource, amount in shape:
                into[resource] = into.get(resource, 0) + amount
    return {
        where: {r: a for r, a in sorted(amounts.items()) if a != 0}
        for where, amounts in sorted(used.items())
    }


def _counted_placements(e: EngineContext) -> Iterator[Placement]:
    """Every placement counted in ``used`` now: admitted workloads (the per-leaf reclaim lists
    and a running pass's own admissions) and held ones, each once, then the lingering usage of
    finished ones. O(admitted), not O(workloads)."""
    keys = dict.fromkeys(k[3] for admitted in e.leaf_admitted.values() for k in admitted)
    keys.update(dict.fromkeys(sorted(e.pass_admitted)))
    keys.update(e.state.held)
    for key in keys:
        job = e.state.jobs.get(key)
        if job is not None and job.used_path is not None:
            yield job.used_path, job.used_shape, job.zone
    yield from e.state.lingering.values()


def quota_zone_mins(e: EngineContext) -> dict[tuple[QuotaPath, Zone], dict[str, int]]:
    """Per node and zone it guarantees, the guarantee (Z4, ``usher.io/zone-min``); empty when
    no node of the tree in force guarantees a zone."""
    return {
        (path, zone): dict(mins)
        for path, info in e.state.tree.nodes.items()
        for zone, mins in sorted(info.zone_min.items())
    }


def quota_nodes(e: EngineContext) -> dict[QuotaPath, tuple[dict[str, int], dict[str, int]]]:
    """``(min, max)`` of every node of the tree in force, for reports."""
    return {path: (dict(i.min), dict(i.max)) for path, i in e.state.tree.nodes.items()}


def counted_requests(e: EngineContext, key: WorkloadKey) -> dict[str, int] | None:
    """What an admitted workload's admission counts (R16: not what it may ask since); None
    when it is not admitted."""
    job = e.state.jobs.get(key)
    return dict(job.used_shape) if job is not None and job.state == ADMITTED else None


def reason(e: EngineContext, key: WorkloadKey) -> Reason | None:
    """Why a workload is where it is now (None for admitted or finished ones)."""
    job = e.state.jobs.get(key)
    if job is None or job.state in (ADMITTED, FINISHED):
        return None
    if job.state in (UNMAPPED, INADMISSIBLE):
        return job.announced
    return _pending_reason(e, job)


def reason_now(e: EngineContext, key: WorkloadKey) -> Reason | None:
    """Why a workload waits, worked out from the state as it is now (no pass needed).

    ``reason`` answers as of the last decision pass; a state rebuilt from the log has run
    none. This says: a held preemptor waits for its victims to stop; under Block, a head
    that does not fit blocks the rest; else the nearest node whose ``max x oversellRate``
    would be exceeded, the zone's room, or "fits now". Unmapped and inadmissible workloads
    keep their announced reason; an admitted one that grew since says so (R16), other
    admitted and finished ones have none. The state is left unchanged.
    """
    job = e.state.jobs.get(key)
    if job is None or job.state in (ADMITTED, FINISHED):
        return None if job is None else job.grown  # admitted, grown since: stopped next (R16)
    if job.state in (UNMAPPED, INADMISSIBLE) or job.leaf is None:
        return job.announced
    e.refresh_budgets()  # no pass ran at this instant: a budget may have run out since
    shut = chain.refusal(e, job)  # the gates, in the order every place asks them
    if shut is not None:
        return shut.reason
    starved = starvation.reason(e, job, backfill.with_why_not)
    if starved is not None:
        return starved
    if job.held:
        return Reason(
            code="PreemptionInProgress",
            message="capacity freed by its preemption is held for it until its victims stop",
        )
    queue = e.leaf_queues[job.leaf]
    head = e.policy.blocking_head(key, lambda: e.head(queue.leaf))
    if head is not None and _shortfall_now(e, e.state.jobs[head]):
        return reasons.blocked_by_head(head, queue.name)
    found = _shortfall_now(e, job)
    return found or reasons.not_yet_evaluated("fits now; the next decision pass admits it")


def admission_shortfall(
    e: EngineContext, key: WorkloadKey, quota: QuotaPath, requests: dict[str, int]
) -> Reason | None:
    """What stops ``requests`` on ``quota`` now, as the ledger checks it; None if they fit.

    On every node root..``quota`` that exists and names the resource in ``max``:
    ``used + requested <= max x oversellRate``. Capacity held for ``key`` itself (a
    preemptor about to be admitted) is set aside; zone capacity is not checked (the ledger
    does not arbitrate it). The state is left unchanged.
    """
    job = e.state.jobs.get(key)
    own_paths: set[QuotaPath] = set()
    own: dict[str, int] = {}
    if job is not None and job.held and job.used_path is not None:
        own_paths = {node.path for node in e.nodes_on_path(job.used_path)}
        own = dict(job.used_shape)
    path: list[NodeLoad] = [
        _set_aside(info, own) if info.path in own_paths else info for info in e.nodes_on_path(quota)
    ]
    short = first_shortfall(path, shape_of(requests))
    if short is None:
        return None
    holder = e.holder_on(short.node, key)
    if holder is not None:
        numbers = (short.node, short.resource, short.used, short.requested, short.cap)
        return reasons.held_for_preemptor(*numbers, holder)
    return quota_exceeded(short, e.config.oversell_rate)


def _set_aside(info: QuotaNodeInfo, own: dict[str, int]) -> Load:
    """``info`` as the fit check sees it once ``own`` (a held preemptor's capacity) is left out."""
    used = {r: info.used.get(r, 0) - own.get(r, 0) for r in info.used.keys() | own.keys()}
    return Load(path=info.path, used=used, max=info.max, cap=info.cap)


def _pending_reason(e: EngineContext, job: Job) -> Reason:
    if job.note is not None and job.note_pass == e.state.passes:
        return job.note
    shut = chain.refusal(e, job)  # the gates, in the order every place asks them
    if shut is not None:
        return shut.reason
    if e.state.passes <= job.arrived_pass:
        return reasons.not_yet_evaluated("arrived after the last decision pass")
    starved = starvation.reason(e, job, backfill.with_why_not)
    if starved is not None:
        return starved
    assert job.leaf is not None
    queue = e.leaf_queues[job.leaf]
    head = e.policy.blocking_head(job.key, lambda: e.head(queue.leaf))
    if head is not None:
        return reasons.blocked_by_head(head, queue.name)
    shortfall = e.quota_shortfall(job)
    if shortfall is not None:
        return shortfall
    zone = e.zone_shortfall(job)
    if zone is not None:
        return zone
    return reasons.not_yet_evaluated("fits now; the next decision pass will admit it")


def _shortfall_now(e: EngineContext, job: Job) -> Reason | None:
    if job.held:
        return None
    return e.quota_shortfall(job) or e.zone_shortfall(job)


# --------------------------------------------------------------------------- for people


class ClusterView(msgspec.Struct, frozen=True, kw_only=True):
    """One cluster as the log last described it (M1), with the jobs that live in it."""

    cluster: ClusterName
    state: LinkState
    since_ms: Millis
    """When the log said so."""
    zones: tuple[Zone, ...]
    why: str = ""
    """The disconnection's reason, or who declared it lost and why."""
    admitted: int = 0
    """Its admitted workloads (they keep counting while it is disconnected)."""
    pending: int = 0
    """Its workloads waiting in a queue."""


class DomainUse(msgspec.Struct, frozen=True, kw_only=True):
    """One domain of a topology level in one zone (TP1): what its schedulable nodes allocate,
    what the admissions pinned to nodes it shares use, and what is free for a gang."""

    zone: Zone
    level: str
    domain: str
    allocatable: dict[str, int]
    used: dict[str, int]
    free: dict[str, int]


def topology_pin(e: EngineContext, key: WorkloadKey) -> TopologyPin | None:
    """The domain an admitted workload's pods are pinned to (TP1); None when it is not
    admitted or was admitted anywhere in its zone."""
    job = e.state.jobs.get(key)
    return job.pin if job is not None and job.state == ADMITTED else None


def clusters(e: EngineContext) -> list[ClusterView]:
    """Every cluster the log spoke of (M1), by name, with how many of its workloads (those
    whose key names it, ``cluster_of``) are admitted and waiting; empty for a log of one
    cluster that never announced itself."""
    counts: dict[ClusterName, list[int]] = {name: [0, 0] for name in e.state.clusters}
    for key, job in e.state.jobs.items():
        count = counts.get(cluster_of(key))
        if count is not None and job.state in (ADMITTED, PENDING):
            count[0 if job.state == ADMITTED else 1] += 1
    return [
        ClusterView(
            cluster=name,
            state=link.state,
            since_ms=link.since_ms,
            zones=link.zones,
            why=link.why,
            admitted=counts[name][0],
            pending=counts[name][1],
        )
        for name, link in sorted(e.state.clusters.items())
    ]


def topology_levels(e: EngineContext) -> list[str]:
    """Every topology level some node of the tree in force names (TP1), widest first as the
    tree names them (the root's first)."""
    found: dict[str, None] = {}
    for info in e.state.tree.nodes.values():
        found.update(dict.fromkeys(info.topology_levels))
    return list(found)


def domain_use(e: EngineContext) -> list[DomainUse]:
    """Every domain of every topology level of the tree, in every zone whose nodes carry it
    (TP1): its room as ``topology.rooms`` counts it for admission (allocatable of its
    schedulable nodes, less every pinned admission sharing a node with it); by zone, level
    (widest first) and domain."""
    out: list[DomainUse] = []
    levels = topology_levels(e)
    for zone in sorted(e.state.nodes):
        nodes = e.state.nodes[zone]
        pinned = e.pinned_in_zone(zone)
        for level in levels:
            whole = topology.rooms(nodes, level, [], [])
            for total, room in zip(whole, topology.rooms(nodes, level, pinned, []), strict=True):
                used = {
                    r: total.free.get(r, 0) - room.free.get(r, 0)
                    for r in sorted(total.free.keys() | room.free.keys())
                }
                out.append(
                    DomainUse(
                        zone=zone,
                        level=level,
                        domain=room.domain,
                        allocatable=dict(sorted(total.free.items())),
                        used={r: a for r, a in used.items() if a != 0},
                        free=dict(sorted(room.free.items())),
                    )
                )
    return out
