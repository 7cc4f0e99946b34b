"""Backfill under a reservation (docs/admission-rules.md N2): short jobs beside a starved head.

What it does: when a pass ends with capacity reserved for starved heads (N1's holders, their
requests still counted on their paths), works out for each reserved workload the instant the
declared maximum runtimes of the running work promise it fits (``satisfied_at``: the first
declared end after which it fits beside everything that has not declared an earlier end,
other reservations included), and admits, in queue order, the waiting workloads of leaves
with ``usher.io/backfill: "true"`` that declare a maximum runtime (RT1) ending no later than
every such instant and that fit once the holds are set aside (``run``). Also says why a
workload waiting behind a reservation does not backfill (``why_not``).
What it must never do: backfill a workload that declares no maximum runtime, or under a
reservation the declarations cannot promise an instant for (it would delay it without bound);
preempt anything; read a clock; or act when no leaf opts in (N1 is then exactly as before).
"""

from __future__ import annotations

from collections.abc import Iterator

from schemas import Decision, QuotaPath, Reason, WorkloadKey
from usher.core.engine import starvation
from usher.core.engine.context import EngineContext
from usher.core.engine.decision_pass import DecisionPass
from usher.core.model import reasons
from usher.core.model.reason_text import reworded
from usher.core.model.reasons import format_moment
from usher.core.rules.arbitration import Load, first_shortfall
from usher.core.state.indexed import ADMITTED, PENDING, Job
from usher.core.tree.quota_tree import path_nodes


def run(e: EngineContext, decisions: list[Decision], holders: list[Job]) -> None:
    """After the pass proper, with the holds of ``holders`` still counted: admit every
    backfill candidate that ends before each reservation can be satisfied and fits beside
    everything but the holds (N2)."""
    if not holders or not e.state.tree.backfill_on:
        return
    for job in _candidates(e, holders):
        assert job.max_runtime_ms is not None
        limit = _deadline(e, holders)
        if limit is None:
            return  # some reservation has no promised instant: nothing may backfill under it
        satisfied, holder = limit
        ends = e.state.now + job.max_runtime_ms
        if ends > satisfied or not _fits_beside_holds(e, job, holders):
            continue
        reason = reasons.backfilled(job.max_runtime_ms, ends, holder.key, satisfied)
        DecisionPass(e, decisions).admit(job, fallback=reason)


def satisfied_at(e: EngineContext, holder: Job, holders: list[Job], counted: bool) -> int | None:
    """The instant the declared runtimes promise ``holder`` fits on its path: ``now`` or the
    first declared end of a running workload on its path after which its request fits beside
    what is still counted (running work without a declaration, or past its declared end, runs
    on; stopping victims' residual, held preemptors and the other reservations of ``holders``
    stay). None when no such instant exists. ``counted``: the holds of ``holders`` are counted
    in the nodes' usage now (within a pass; ``holder``'s own is set aside), else (a reason
    asked between passes) the others' are added."""
    assert holder.leaf is not None
    path = e.nodes_on_path(holder.leaf)
    on_path = {info.path for info in path}
    freed: dict[QuotaPath, dict[str, int]] = {info.path: {} for info in path}
    if counted:
        for info in path:
            freed[info.path] = dict(holder.shape)
    else:
        for other in holders:
            if other is holder or other.leaf is None:
                continue
            for node in path_nodes(other.leaf):
                if node in on_path:
                    for resource, amount in other.shape:
                        freed[node][resource] = freed[node].get(resource, 0) - amount
    ends = sorted(_declared_ends(e, on_path))
    instants = [e.state.now, *sorted({end for end, _ in ends})]
    index = 0
    for instant in instants:
        while index < len(ends) and ends[index][0] <= instant:
            job = e.state.jobs[ends[index][1]]
            assert job.used_path is not None
            for node in path_nodes(job.used_path):
                if node in on_path:
                    for resource, amount in job.used_shape:
                        freed[node][resource] = freed[node].get(resource, 0) + amount
            index += 1
        loads = [
            Load(
                path=info.path,
                used={
                    r: info.used.get(r, 0) - freed[info.path].get(r, 0)
                    for r in info.used.keys() | freed[info.path].keys()
                },
                max=info.max,
                cap=info.cap,
            )
            for info in path
        ]
        if first_shortfall(loads, holder.shape) is None:
            return instant
    return None


def why_not(e: EngineContext, job: Job, holder: Job) -> str | None:
    """Why ``job``, waiting behind ``holder``'s reservation, does not backfill (N2); None
    when its leaf does not opt in (the reason is then N1's alone)."""
    info = e.state.tree.nodes.get(job.leaf) if job.leaf is not None else None
    if info is None or not info.backfill:
        return None
    if job.max_runtime_ms is None:
        return "it declares no maximum runtime, so it does not backfill"
    satisfied = satisfied_at(e, holder, starvation.reservations(e), counted=False)
    if satisfied is None:
        return (
            f"it does not backfill: the declared runtimes on {holder.key}'s path promise "
            "no instant its reservation is satisfied"
        )
    ends = e.state.now + job.max_runtime_ms
    if ends > satisfied:
        return (
            f"admitted now it would end by {format_moment(ends)}, after {format_moment(satisfied)} "
            f"when {holder.key}'s reservation can be satisfied, so it does not backfill"
        )
    return None


def with_why_not(e: EngineContext, reason: Reason, job: Job, holder: Job) -> Reason:
    """``reason`` (BehindReservation) with why ``job`` does not backfill, when it opts in."""
    extra = why_not(e, job, holder)
    if extra is None:
        return reason
    return reworded(reason, f"{reason.message}; {extra}")


def _declared_ends(e: EngineContext, on_path: set[QuotaPath]) -> Iterator[tuple[int, WorkloadKey]]:
    """(declared end, workload) of every admitted workload counted on a node of ``on_path``
    whose declared end is still ahead."""
    now = e.state.now
    for used_path, victims in e.leaf_admitted.items():
        if not any(node in on_path for node in path_nodes(used_path)):
            continue
        for victim in victims:
            job = e.state.jobs[victim[3]]
            if job.state != ADMITTED or job.max_runtime_ms is None:
                continue
            end = job.admitted_ms + job.max_runtime_ms
            if end > now:
                yield end, job.key


def _deadline(e: EngineContext, holders: list[Job]) -> tuple[int, Job] | None:
    """The earliest instant any reservation can be satisfied, and whose; None when one of
    them has no promised instant."""
    found: list[tuple[int, WorkloadKey, Job]] = []
    for holder in holders:
        at = satisfied_at(e, holder, holders, counted=True)
        if at is None:
            return None
        found.append((at, holder.key, holder))
    at, _, holder = min(found, key=lambda item: (item[0], item[1]))
    return at, holder


def _candidates(e: EngineContext, holders: list[Job]) -> list[Job]:
    """The waiting workloads that may backfill, highest in queue order first: of leaves that
    opt in, declaring a maximum runtime, offerable by this engine now; under a policy where
    a workload that stays pending closes its queue (Block), only each queue's first."""
    held = {job.key for job in holders}
    closes = e.policy.closes_queue
    found: list[Job] = []
    for leaf in e.state.tree.leaves:
        info = e.state.tree.nodes[leaf]
        queue = e.leaf_queues.get(leaf)
        if not info.backfill or queue is None:
            continue
        for _, _, key in queue.entries:
            job = e.state.jobs[key]
            if job.state != PENDING or not starvation.may_try(e, job):
                continue
            if key not in held and job.max_runtime_ms is not None:
                found.append(job)
            if closes:
                break  # Block: the first offerable workload of the queue, or nothing
    return sorted(found, key=lambda job: job.sort_key)


def _fits_beside_holds(e: EngineContext, job: Job, holders: list[Job]) -> bool:
    """Whether ``job`` fits its quota and zone with the holds of ``holders`` set aside."""
    starvation.release(e, holders)
    try:
        return e.fits(job)
    finally:
        starvation.hold_again(e, holders)
