"""No starvation (ADMISSION-RULES N1): a head passed over long enough gets capacity reserved.

What it does: after each decision pass and each ``Admitted`` applied from the log, notes
since when each head of a queue under a node with the guard on (``usher.io/starvation-seconds``)
has stayed pending while other workloads were admitted (``track``; so a replay of the log
alone knows it too). Once that wait reaches the threshold, the head has a *reservation*:
every pass tries it before anyone else and, if it still does not fit, counts its request on
every node of its path for the rest of the pass (``serve_first``, ``release``), for fit but
not against guarantees -- the way the residual of stopping victims counts (R7) -- so the
capacity that frees up is not taken by later, smaller workloads. Also the reasons that say
so (``Reserved``, ``BehindReservation``) and the instant the next reservation starts (a
wakeup, like a min-runtime end).
The guard is on unless a node sets the attribute to 0 (the default is the registry's).
What it must never do: read a clock (``now`` is the engine's), hold anything where the guard
is off (a tree off everywhere passes exactly as it did before N1), or keep a hold past
the pass that made it (between passes a reservation is only its record: since when).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from schemas import Admitted, Decision, Millis, QuotaPath, Reason, WorkloadKey
from usher.core.engine.context import EngineContext
from usher.core.engine.data import GuardHeads
from usher.core.engine.decision_pass import DecisionPass
from usher.core.gates import chain
from usher.core.model import reasons
from usher.core.rules.arbitration import Load, first_shortfall
from usher.core.state.indexed import PENDING, Job

WhyNot = Callable[[EngineContext, Reason, Job, Job], Reason]
"""Why a workload behind a reservation does not backfill, added to its reason (N2)."""


def threshold_ms(e: EngineContext, job: Job) -> int:
    """The starvation threshold in force for ``job``'s leaf; 0 = the guard is off there."""
    info = e.state.tree.nodes.get(job.leaf) if job.leaf is not None else None
    return info.starvation_ms if info is not None else 0


def reservations(e: EngineContext) -> list[Job]:
    """The pending workloads capacity is reserved for now, the longest starved first."""
    starving = e.state.starving
    least = e.state.tree.least_starvation_ms
    if not starving or not least or e.state.now < min(starving.values()) + least:
        return []  # nobody has waited the shortest threshold yet: no look at each head
    out: list[Job] = []
    for key, since in sorted(e.state.starving.items(), key=lambda item: (item[1], item[0])):
        job = e.state.jobs.get(key)
        if job is None or job.state != PENDING or job.leaf is None:
            continue
        limit = threshold_ms(e, job)
        if limit and e.state.now >= since + limit:
            out.append(job)
    return out


def next_start(e: EngineContext) -> Millis | None:
    """The next instant after now a reservation starts: a pass should run then (C1)."""
    starts = [
        since + limit
        for key, since in e.state.starving.items()
        if key in e.state.jobs and (limit := threshold_ms(e, e.state.jobs[key]))
    ]
    later = [start for start in starts if start > e.state.now]
    return Millis(min(later)) if later else None


def reserved_from(e: EngineContext, key: WorkloadKey) -> Millis | None:
    """When a reservation starts for the pending ``key``, a head passed over by later
    admissions, while that is still ahead (until then others may take the room it waits
    for); None: not passed over, reserved already, or the guard is off for it."""
    since = e.state.starving.get(key)
    job = e.state.jobs.get(key)
    if since is None or job is None or job.state != PENDING:
        return None
    limit = threshold_ms(e, job)
    start = since + limit
    return Millis(start) if limit and start > e.state.now else None


def serve_first(
    e: EngineContext, decisions: list[Decision], holders: list[Job], victims: list[Job]
) -> None:
    """Try every reserved workload before the pass; hold the path of each that still does
    not fit, adding it to ``holders`` (each must be ``release``d when the pass ends, also
    when the pass fails half-way: the caller owns the list). What their reclaims preempt is
    added to ``victims``: the rest of the pass does not offer them (R3)."""
    for job in reservations(e):
        if not may_try(e, job):
            continue
        first = DecisionPass(e, decisions)
        moved = first.try_candidate(job)
        victims.extend(first.victims)
        if moved:
            continue
        _hold(e, job, 1)
        holders.append(job)


def release(e: EngineContext, holders: list[Job]) -> None:
    """The pass is over: what was held for ``holders`` counts no more."""
    for job in reversed(holders):
        _hold(e, job, -1)


def hold_again(e: EngineContext, holders: list[Job]) -> None:
    """Count the holds of ``holders`` again after a ``release`` within the pass (N2 sets them
    aside to ask whether a backfill candidate fits beside everything else)."""
    for job in holders:
        _hold(e, job, 1)


def track(e: EngineContext, decisions: list[Decision]) -> None:
    """After a pass or an applied ``Admitted`` (``decisions``): start the clock of each head
    passed over by an admission; forget every workload that is no longer a pending head of
    its queue (admitted, overtaken, gone).

    Only the leaves whose head may have changed since the last call are looked at (their
    offer was refreshed, is dirty or moves with the clock: a head is its leaf's first
    candidate, so these are the only leaves where it can change), and only the heads without
    a clock when something was admitted: the cost follows what changed, not the leaves.
    """
    watch = e.guard_heads
    leaves = e.state.tree.leaves if watch.whole else watch.changed | e.dirty | e.timed_offers
    dropped = _follow_heads(e, watch, leaves)
    starving = e.state.starving
    for key in dropped:
        if key not in watch.leaf_of:
            starving.pop(key, None)
    if watch.whole:
        for key in [key for key in starving if key not in watch.leaf_of]:
            del starving[key]
    for leaf in leaves:
        head = watch.of_leaf.get(leaf)
        if head is None or head in starving:
            watch.unclocked.discard(leaf)
        else:
            watch.unclocked.add(leaf)
    watch.changed = set()
    watch.whole = False
    admitted = {d.workload for d in decisions if isinstance(d, Admitted)}
    if not admitted or not watch.unclocked:
        return
    for leaf in sorted(watch.unclocked):
        head = watch.of_leaf[leaf]
        if head not in admitted:
            # Every admission passes it: all paths share the root (N1).
            starving[head] = e.state.now
    watch.unclocked = {leaf for leaf in watch.unclocked if watch.of_leaf[leaf] in admitted}


def guarded_head(e: EngineContext, leaf: QuotaPath) -> WorkloadKey | None:
    """The head of ``leaf`` if the guard follows it: on there, and the leaf is not held."""
    info = e.state.tree.nodes.get(leaf)
    if info is None or not info.starvation_ms or e.hold_over(leaf) is not None:
        return None
    return e.head(leaf)


def _follow_heads(
    e: EngineContext, watch: GuardHeads, leaves: Iterable[QuotaPath]
) -> list[WorkloadKey]:
    """Bring ``watch``'s heads of ``leaves`` up to date; return the heads some leaf lost."""
    if watch.whole:
        watch.of_leaf, watch.leaf_of, watch.unclocked = {}, {}, set()
    dropped: list[WorkloadKey] = []
    for leaf in leaves:
        head = guarded_head(e, leaf)
        old = watch.of_leaf.get(leaf)
        if head == old:
            continue
        if old is not None:
            del watch.of_leaf[leaf]
            if watch.leaf_of.get(old) == leaf:
                del watch.leaf_of[old]
            dropped.append(old)
        if head is not None:
            watch.of_leaf[leaf] = head
            watch.leaf_of[head] = leaf
    return dropped


def reason(e: EngineContext, job: Job, why_not: WhyNot) -> Reason | None:
    """``Reserved`` for a workload with a reservation that does not fit yet,
    ``BehindReservation`` for one that would fit but for somebody's reservation, with
    ``why_not`` (N2's ``backfill.with_why_not``: backfill builds on this module) added."""
    if not e.state.starving:
        return None
    held = reservations(e)
    if job in held:
        return _reserved(e, job)
    for holder in held:
        if not may_try(e, holder):
            continue  # the pass holds nothing for a workload the gates shut (serve_first)
        found = _behind(e, job, holder)
        if found is not None:
            return why_not(e, found, job, holder)  # N2
    return None


def may_try(e: EngineContext, job: Job) -> bool:
    """Whether this engine may offer ``job`` now: no admission gate shuts it (the gates a
    pass asks, ``usher.core.gates.chain``) and it is not a preemptor already holding."""
    return not job.held and chain.may_offer(e, job)


def _hold(e: EngineContext, job: Job, sign: int) -> None:
    assert job.leaf is not None
    amounts = dict(job.shape)
    for info in e.nodes_on_path(job.leaf):
        e.shift_node(info.path, amounts, sign)
    e.state.version += 1  # reclaim judged under the hold is not judged without it


def _reserved(e: EngineContext, job: Job) -> Reason | None:
    assert job.leaf is not None
    short = first_shortfall(e.nodes_on_path(job.leaf), job.shape)
    if short is None:
        return None  # fits now: the next pass admits it
    since = e.state.starving[job.key]
    holds = max(0, min(short.requested, short.cap - short.used))
    start = since + threshold_ms(e, job)
    return reasons.reserved(
        short.node, short.resource, holds, short.requested, start, e.state.now - since
    )


def _behind(e: EngineContext, job: Job, holder: Job) -> Reason | None:
    """BehindReservation when ``job`` fits without ``holder``'s reservation but not with it."""
    if holder is job or job.leaf is None or holder.leaf is None:
        return None
    path = e.nodes_on_path(job.leaf)
    if first_shortfall(path, job.shape) is not None:
        return None
    shared = {info.path for info in e.nodes_on_path(holder.leaf)}
    extra = dict(holder.shape)
    loads = [
        Load(
            path=info.path,
            used={r: info.used.get(r, 0) + extra.get(r, 0) for r in info.used.keys() | extra},
            max=info.max,
            cap=info.cap,
        )
        if info.path in shared
        else info
        for info in path
    ]
    short = first_shortfall(loads, job.shape)
    if short is None:
        return None
    free = short.cap - (short.used - extra.get(short.resource, 0))
    held = max(0, min(extra.get(short.resource, 0), free))
    return reasons.behind_reservation(
        short.node, short.resource, held, short.requested, short.cap, holder.key
    )
