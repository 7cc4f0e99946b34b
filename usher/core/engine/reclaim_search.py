"""Reclaim as the engine runs it: the victims that make room for a waiting workload (R5, R6).

What it does: over an engine's state, finds the minimal victim set for a candidate --
borrowers of other leaves nearest in the tree first (when the candidate asks within its
``min`` and, in its zone, within its ``zone-min``: Z4), then strictly lower-priority workloads
of its own leaf (``LowerPriority``); among candidates of one standing, those running in a burst
zone first (Z3); a leaf above its guarantee in the candidate's zone lends only its workloads
of that zone (Z4) --
skipping workloads within their minimum runtime or protected by R6; checks a reclaim decided
elsewhere against the same rules (``check_preemption``); and previews a reclaim without
deciding it (``reclaim_preview``). The predicates it shares with the ledger are in
``usher.core.rules.reclaim``.
What it must never do: leave usage changed when it answers "no" or only previews, decide
anything beyond the victim set (the pass evicts and admits), read a clock, or iterate an
unordered collection where the order could reach a decision.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Final

from schemas import Millis, Preempted, QueueName, QuotaPath, Reason, WorkloadKey, Zone
from usher.core.engine.refusals import (
    fits_once_stopped,
    preempts_own_leaf,
)
from usher.core.gates import chain as gates
from usher.core.model import reasons
from usher.core.model.reason_text import bound, in_zone, used_and_requested_over
from usher.core.rules.arbitration import earlier_preemption_refusal
from usher.core.rules.lending import may_reclaim_from
from usher.core.rules.preemption_policy import (
    lender_keeps_guarantee,
    may_preempt_beyond_guarantee,
    policy_refusal,
    preempts_in_leaf,
    takes_while_borrowing,
)
from usher.core.rules.readiness import requeued_preemption_refusal
from usher.core.rules.reclaim import borrowed_resource, victim_refusal
from usher.core.state.indexed import ADMITTED, PENDING, Job, Placement, QuotaNodeInfo, Shape
from usher.core.tree.zone_burst import burst_first
from usher.core.tree.zone_quota import within_zone_min, zone_borrowed_resource

if TYPE_CHECKING:
    from usher.core.engine.context import EngineContext


def _earlier_victims(e: EngineContext, job: Job) -> list[WorkloadKey]:
    """Victims of an earlier preemption by ``job``'s key not seen stopped yet (R7)."""
    group = e.state.stops.get(job.key)
    return [] if group is None else [v for v in group.victims if v != job.key]


def find_victims(e: EngineContext, job: Job) -> list[tuple[Job, Reason]] | None:
    """Victims that make room for ``job`` (section 5), already removed from usage."""
    assert job.leaf is not None
    plan = _search_plan(e, job)
    if plan is None:
        return None
    within, lower, memo = plan
    policy = e.state.tree.nodes[job.leaf].preemption

    def fits() -> bool:
        return e.fits(job)

    removed = None
    if not within and lower and policy.with_own_victims:
        removed = _joint_search(e, job)  # P1: its own victims may bring it within its min
    if removed is None:
        cross = _lent_to(e, job) if within else _taken_while_borrowing(e, job)
        kind = _RECLAIM if within else _WHILE_BORROWING
        same = _same_leaf_candidates(e, job) if lower else iter(())
        candidates = chain(((v, kind) for v in cross), ((v, _OWN) for v in same))
        removed = _remove_until_fits(e, job, candidates, fits)
        if removed is not None:
            removed = _put_back(e, removed, fits)
    if removed is None:
        e.state.reclaim_failed[memo] = e.state.version
    return removed


_ReclaimMemo = tuple[QuotaPath, Shape, int, Zone]


def _search_plan(e: EngineContext, job: Job) -> tuple[bool, bool, _ReclaimMemo] | None:
    """What ``find_victims`` searches with (within its guarantee, in its own leaf; its memo
    key), or None where it answers "no victims" without a search."""
    assert job.leaf is not None
    leaf = e.state.tree.nodes[job.leaf]
    within = within_guarantee(e, job)
    lower = preempts_own_leaf(leaf, job.shape)
    borrowing = not within and leaf.preemption.while_borrowing is not None
    if not within and not lower and not borrowing:
        return None
    if requeued_preemption_refusal(job.key, job.requeues, leaf.readiness) is not None:
        return None  # R10: requeued for readiness, it takes only free room
    if earlier_preemption_refusal(job.key, _earlier_victims(e, job)) is not None:
        return None  # R7: one group per preemptor; its earlier victims are still stopping
    if not all(e.pod_fits_schedulable(job.zone, pod) for pod in job.pods):
        return None  # no eviction can make a too-large pod fit
    if job.topology is not None:
        return None  # TP1: a gang asking a topology domain takes free room only, never reclaims
    if e.state.stops and _fits_once_stopped(e, job):
        return None  # room is coming: preempting more would take what is not needed
    priority = lower or borrowing or _by_priority(leaf)
    memo = (job.leaf, job.shape, job.priority if priority else 0, job.zone)
    if e.state.reclaim_failed.get(memo) == e.state.version:
        return None  # failed at this very state
    return within, lower, memo


def refused_without_search(e: EngineContext, job: Job) -> bool:
    """Whether ``find_victims`` answers "no victims" for ``job`` now without searching (and
    so without changing anything, not even its memo)."""
    return _search_plan(e, job) is None


_RECLAIM: Final = "reclaim"
"""A candidate of another leaf, taken to restore ``job``'s guarantee (R5)."""
_WHILE_BORROWING: Final = "while-borrowing"
"""A candidate of another leaf, taken by ``job`` asking beyond its guarantee (P2)."""
_OWN: Final = "own"
"""A lower-priority candidate of ``job``'s own leaf (``LowerPriority``)."""


def _joint_search(e: EngineContext, job: Job) -> list[tuple[Job, Reason]] | None:
    """P1: one search over other leaves' borrowers (nearest first) and then ``job``'s own
    lower-priority work, a set found only when ``job`` fits and, its own victims set aside,
    asks within its guarantee -- the condition every borrower it takes needs (R5)."""

    def fits_within() -> bool:
        return e.fits(job) and within_guarantee(e, job)

    cross = ((v, _RECLAIM) for v in _lent_to(e, job))
    own = ((v, _OWN) for v in _same_leaf_candidates(e, job))
    removed = _remove_until_fits(e, job, chain(cross, own), fits_within)
    return None if removed is None else _put_back(e, removed, fits_within)


def _taken_while_borrowing(e: EngineContext, job: Job) -> Iterator[Job]:
    """P2: other leaves' borrowers, in reclaim order, that ``job`` asking beyond its guarantee
    may take; none where the tree does not allow preempting while borrowing."""
    assert job.leaf is not None
    policy = e.state.tree.nodes[job.leaf].preemption
    if policy.while_borrowing is None:
        return
    for victim in _lent_to(e, job):
        if takes_while_borrowing(policy, job.priority, victim.priority, lender_keeps=True):
            yield victim  # whether its leaf keeps its guarantee is judged as it is taken


def _by_priority(leaf: QuotaNodeInfo) -> bool:
    """Whether the leaf's reclaims depend on the preemptor's priority (L1 LowerPriority)."""
    return leaf.lending.reclaim == "LowerPriority"


def _lent_to(e: EngineContext, job: Job) -> Iterator[Job]:
    """Other leaves' borrowers (``_cross_leaf_candidates``) that ``job``'s leaf may take
    back under L1, for every search that takes them (R5, P1, P2)."""
    assert job.leaf is not None
    return _reclaimable(e.state.tree.nodes[job.leaf], job, _cross_leaf_candidates(e, job))


def _reclaimable(leaf: QuotaNodeInfo, job: Job, candidates: Iterator[Job]) -> Iterator[Job]:
    """The borrowers of other leaves L1 lets ``job`` take (``usher.io/reclaim-within`` of its
    leaf): all of them (Any), the strictly lower-priority ones, or none (Never)."""
    if leaf.lending.reclaim == "Any":
        return candidates
    return (v for v in candidates if may_reclaim_from(leaf.lending, job.priority, v.priority))


def _remove_until_fits(
    e: EngineContext, job: Job, candidates: Iterator[tuple[Job, str]], fits: Callable[[], bool]
) -> list[tuple[Job, Reason]] | None:
    removed: list[tuple[Job, Reason]] = []
    deferred: list[tuple[Job, str]] = []
    for victim, kind in candidates:
        if _frees_no_capped_zone(e, job, victim):
            deferred.append((victim, kind))
        elif _remove_fits(e, job, victim, kind, removed) and fits():
            return removed
    for victim, kind in deferred:
        if _remove_fits(e, job, victim, kind, removed) and fits():
            return removed
    for victim, _ in reversed(removed):
        assert victim.used_path is not None
        e.account(victim.used_path, victim.used_shape, victim.zone)
    return None


def _remove_fits(
    e: EngineContext, job: Job, victim: Job, kind: str, removed: list[tuple[Job, Reason]]
) -> bool:
    """Take ``victim`` out of usage if it may be one (appended to ``removed``); whether it was
    taken (a borrower whose leaf no longer borrows is not)."""
    assert victim.used_path is not None
    assert job.leaf is not None
    if kind == _OWN:
        why = reasons.lower_priority(job.key, job.priority, victim.priority, job.leaf)
    else:
        reclaimed = borrowing_reason(e, job, victim.used_path, victim.zone)
        if reclaimed is None:
            return False  # its leaf is no longer borrowing: it keeps running
        if kind == _WHILE_BORROWING and not _lender_keeps(
            e, job, victim.used_path, victim.used_shape
        ):
            return False  # P2 BorrowersOnly: only what its leaf borrows beyond its guarantee
        why = reclaimed if kind == _RECLAIM else _while_borrowing_reason(job, victim, reclaimed)
    e.unaccount(victim.used_path, victim.used_shape, victim.zone)
    removed.append((victim, why))
    return True


def _lender_keeps(e: EngineContext, job: Job, path: QuotaPath, usage: Shape) -> bool:
    """P2 ``LowerPriorityBorrowersOnly``: whether the leaf at ``path`` keeps its guarantee on
    what ``job`` asks once a victim's ``usage`` there has left (True where ``job``'s leaf does
    not ask it; a vanished leaf guarantees nothing)."""
    assert job.leaf is not None
    borrowing = e.state.tree.nodes[job.leaf].preemption.while_borrowing
    info = e.state.tree.nodes.get(path)
    if info is None or borrowing is None or not borrowing.borrowers_only:
        return True
    claim = {r: info.used.get(r, 0) - info.residual.get(r, 0) for r, _ in job.shape}
    return lender_keeps_guarantee(claim, dict(usage), info.min, job.shape)


def _while_borrowing_reason(job: Job, victim: Job, reclaimed: Reason) -> Reason:
    """P2's wording of a borrower taken while borrowing, with the numbers of its reclaim."""
    assert job.leaf is not None and reclaimed.node is not None and reclaimed.resource is not None
    return reasons.reclaimed_while_borrowing(
        job.key,
        job.priority,
        job.leaf,
        victim.priority,
        reclaimed.node,
        reclaimed.resource,
        reclaimed.used or 0,
        reclaimed.limit or 0,
        reclaimed.requested or 0,
    )


def _frees_no_capped_zone(e: EngineContext, job: Job, victim: Job) -> bool:
    """Whether ``victim`` runs in another zone while ``job`` still exceeds a cap the tree sets
    in its own zone (Z1): evicting it cannot make room there, so it is deferred until the
    candidates of that zone are used up -- a reclaim restores the guarantee in the zone it
    was lent from. Once the zone has room, a deferred one may still be what frees the total."""
    return e.state.tree.zone_capped and victim.zone != job.zone and not e.fits_zone_quota(job)


def _put_back(
    e: EngineContext, removed: list[tuple[Job, Reason]], fits: Callable[[], bool]
) -> list[tuple[Job, Reason]]:
    """Minimal victim set: return, in reverse order, every victim ``fits`` still holds beside."""
    for index in range(len(removed) - 1, -1, -1):
        victim = removed[index][0]
        assert victim.used_path is not None
        e.account(victim.used_path, victim.used_shape, victim.zone)
        if fits():
            del removed[index]
        else:
            e.unaccount(victim.used_path, victim.used_shape, victim.zone)
    return removed


def _cross_leaf_candidates(e: EngineContext, job: Job) -> Iterator[Job]:
    """Other leaves' borrowers, nearest in the tree first, lazily (section 5).

    Level by level from the parent up to the root: the leaves whose deepest common
    ancestor with ``job``'s leaf is that node. Inside a level, the per-leaf lists (already
    in reclaim order) are merged, so a reclaim that needs one victim costs little.
    """
    assert job.leaf is not None
    nodes = e.state.tree.nodes
    path = nodes[job.leaf].ancestors
    vanished = _vanished_by_depth(e, job.leaf, len(path) - 1)
    for level in range(len(path) - 2, -1, -1):
        inner = set(e.state.tree.leaves_under.get(path[level + 1].path, ()))
        leaves = [
            leaf
            for leaf in e.state.tree.leaves_under.get(path[level].path, ())
            if leaf not in inner and leaf in e.leaf_admitted
        ]
        leaves.extend(vanished.get(level + 1, ()))
        yield from _burst_first(e, _merged_victims(e, job, leaves))


def _vanished_by_depth(
    e: EngineContext, leaf: QuotaPath, deepest: int
) -> dict[int, list[QuotaPath]]:
    """Admitted usage recorded on leaves that no longer exist, by common depth."""
    mine = leaf.split("/")
    out: dict[int, list[QuotaPath]] = {}
    for path in sorted(p for p in e.leaf_admitted if p not in e.state.tree.nodes):
        depth = min(_common_depth(mine, path.split("/")), deepest)
        out.setdefault(depth, []).append(path)
    return out


def _merged_victims(e: EngineContext, job: Job, leaves: list[QuotaPath]) -> Iterator[Job]:
    lists = []
    for leaf in leaves:
        if borrowing_reason(e, job, leaf, None) is not None:
            lists.append(e.leaf_admitted[leaf])
        elif _zone_borrowing_reason(e, job, leaf, job.zone) is not None:
            # Z4: above its guarantee in the preemptor's zone only, it lends that zone's work.
            lists.append([k for k in e.leaf_admitted[leaf] if e.state.jobs[k[3]].zone == job.zone])
    for victim_key in heapq.merge(*lists):
        victim = e.state.jobs[victim_key[3]]
        assert victim.used_path is not None
        if _protected(e, victim):
            continue
        if e.state.now - victim.admitted_ms >= e.min_runtime(victim.used_path):
            yield victim


def _burst_first(e: EngineContext, candidates: Iterator[Job]) -> Iterator[Job]:
    """Z3: candidates of one standing (one tree level, one priority) running in a burst zone
    come before the others; nothing moves when the tree marks no burst zone."""
    return burst_first(candidates, e.state.tree.burst, _zone_of, _priority_of)


def _zone_of(victim: Job) -> Zone:
    return victim.zone


def _priority_of(victim: Job) -> int:
    return victim.priority


def _same_leaf_candidates(e: EngineContext, job: Job) -> Iterator[Job]:
    """Strictly lower-priority workloads of ``job``'s own leaf, in reclaim order (Z3: of one
    priority, those in a burst zone first)."""
    return _burst_first(e, _lower_priority_of_leaf(e, job))


def _lower_priority_of_leaf(e: EngineContext, job: Job) -> Iterator[Job]:
    assert job.leaf is not None
    runtime = e.min_runtime(job.leaf)
    for victim_key in list(e.leaf_admitted.get(job.leaf, ())):
        if victim_key[0] >= job.priority:
            break  # sorted by priority: nothing further is lower
        victim = e.state.jobs[victim_key[3]]
        if not _protected(e, victim) and e.state.now - victim.admitted_ms >= runtime:
            yield victim


def _protected(e: EngineContext, victim: Job) -> bool:
    """Never a victim: admitted by this very pass (the ledger may yet refuse it), or a
    preemptor whose own victims still stop (the ledger holds it, it is not admitted).
    ADMISSION-RULES R6."""
    return victim.key in e.pass_admitted or victim.key in e.state.stops


def _fits_once_stopped(e: EngineContext, job: Job) -> bool:
    """Whether ``job`` fits on quota once every stopping victim has stopped."""
    assert job.leaf is not None
    return fits_once_stopped(e.state.tree.nodes[job.leaf], job.shape)


def within_guarantee(e: EngineContext, job: Job) -> bool:
    """Whether ``job`` asks within its leaf's guarantee (R5): within its total ``min`` and, in
    its zone, within its ``zone-min`` where the leaf declares one for that zone (Z4)."""
    assert job.leaf is not None
    info = e.state.tree.nodes[job.leaf]
    if not e.within_min(info, job.shape):
        return False
    return not e.state.tree.zone_guaranteed or within_zone_min(
        info.zone_min, info.zone_used, job.zone, job.shape
    )


def borrowing_reason(
    e: EngineContext, job: Job, path: QuotaPath, zone: Zone | None
) -> Reason | None:
    """Why the leaf at ``path`` counts as borrowing a resource ``job`` needs, or None: above its
    total ``min`` (R5), or, for a victim running in ``zone`` (None: whatever its zone), above
    its ``zone-min`` there when that is ``job``'s zone and ``job``'s leaf guarantees it (Z4)."""
    assert job.leaf is not None
    total = _total_borrowing_reason(e, job, path)
    if total is not None or zone is None:
        return total
    return _zone_borrowing_reason(e, job, path, zone)


def _zone_borrowing_reason(
    e: EngineContext, job: Job, path: QuotaPath, zone: Zone
) -> Reason | None:
    """Z4: the victim's leaf holds more in ``job``'s zone than it is guaranteed there, and
    ``job``'s leaf has a guarantee there to restore (a leaf with none there reclaims by its
    total ``min`` alone)."""
    assert job.leaf is not None
    if not e.state.tree.zone_guaranteed or zone != job.zone:
        return None
    info = e.state.tree.nodes.get(path)
    if info is None or zone not in e.state.tree.nodes[job.leaf].zone_min:
        return None
    resource = zone_borrowed_resource(info.zone_min, info.zone_used, zone, job.shape)
    if resource is None:
        return None
    used = info.zone_used.get(zone, {}).get(resource, 0)
    amount = dict(job.shape)[resource]
    minimum = info.zone_min[zone][resource]
    return reasons.zone_reclaimed(job.key, job.leaf, path, zone, resource, used, minimum, amount)


def _total_borrowing_reason(e: EngineContext, job: Job, path: QuotaPath) -> Reason | None:
    assert job.leaf is not None
    info = e.state.tree.nodes.get(path)
    if info is None and job.shape:
        # A vanished leaf has no guarantee left: all it holds is borrowed.
        resource, amount = job.shape[0]
        return reasons.reclaimed(job.key, job.leaf, path, resource, 0, 0, amount)
    if info is None:
        return None
    borrowed = borrowed_resource(info.used, info.residual, info.min, job.shape)
    if borrowed is None:
        return None
    resource = borrowed
    # The claim: victims already stopping do not make a leaf look borrowing again.
    claim = info.used.get(resource, 0) - info.residual.get(resource, 0)
    amount = dict(job.shape)[resource]
    return reasons.reclaimed(
        job.key, job.leaf, path, resource, claim, info.min.get(resource, 0), amount
    )


def check_preemption(
    e: EngineContext, preemptor: WorkloadKey, victims: Sequence[WorkloadKey], now: Millis
) -> Reason | None:
    """Whether evicting ``victims`` for ``preemptor`` follows section 5 on this state.

    ``None`` when it does: the preemptor waits, each victim is admitted, past its minimum
    runtime, and either on a borrowing leaf (the preemptor asking within its ``min``) or a
    strictly lower-priority workload of the preemptor's own leaf (``LowerPriority``), and
    the preemptor fits once they are gone. The state is left exactly as it was.
    """
    e.state.now = now
    job = e.state.jobs.get(preemptor)
    if job is not None and job.held:
        return None  # already accepted: a retry of a reclaim the log already carries
    if job is None or job.state != PENDING or job.leaf is None:
        return reasons.stale_view(preemptor, "the preemptor is not waiting in a queue")
    if not victims:
        return reasons.stale_view(preemptor, "no victims named")
    info = e.state.tree.nodes[job.leaf]
    if (requeued := requeued_preemption_refusal(job.key, job.requeues, info.readiness)) is not None:
        return requeued
    if (earlier := earlier_preemption_refusal(job.key, _earlier_victims(e, job))) is not None:
        return earlier
    within = _within_once_own_leave(e, job, victims)
    lower = info.within_quota == "LowerPriority"
    in_leaf = preempts_in_leaf(info.preemption, job.shape, info.min)
    removed: list[Placement] = []
    try:
        for key in victims:
            victim = e.state.jobs.get(key)
            refusal = _victim_refusal(
                e, job, victim, key, within=within, lower=lower, in_leaf=in_leaf
            )
            if refusal is not None:
                return refusal
            where = _victim_placement(e, victim, key)
            assert where is not None
            e.unaccount(*where)
            removed.append(where)
        if not e.fits(job):
            return reasons.stale_view(preemptor, "it would not fit without these victims")
        return None
    finally:
        for where in reversed(removed):
            e.account(*where)


def _within_once_own_leave(e: EngineContext, job: Job, victims: Sequence[WorkloadKey]) -> bool:
    """Whether ``job`` asks within its guarantee (R5); with P1 on its leaf, judged with the
    victims of its own leaf among ``victims`` set aside (the state is left as it was)."""
    assert job.leaf is not None
    if not e.state.tree.nodes[job.leaf].preemption.with_own_victims:
        return within_guarantee(e, job)
    own = [
        where
        for key in victims
        if (where := _victim_placement(e, e.state.jobs.get(key), key)) is not None
        and where[0] == job.leaf
    ]
    for where in own:
        e.unaccount(*where)
    try:
        return within_guarantee(e, job)
    finally:
        for where in reversed(own):
            e.account(*where)


def _victim_placement(e: EngineContext, victim: Job | None, key: WorkloadKey) -> Placement | None:
    """Where a victim's usage counts: admitted, or finished and not yet released by the
    ledger (which still holds it as admitted, R7); None if neither."""
    if victim is not None and victim.state == ADMITTED and victim.used_path is not None:
        return (victim.used_path, victim.used_shape, victim.zone)
    return e.state.lingering.get(key)


def _victim_refusal(
    e: EngineContext,
    job: Job,
    victim: Job | None,
    key: WorkloadKey,
    *,
    within: bool,
    lower: bool,
    in_leaf: bool,
) -> Reason | None:
    where = _victim_placement(e, victim, key)
    if where is None:
        return reasons.stale_view(job.key, f"{key} is not admitted", key)
    if key in e.state.stops:
        return reasons.stale_view(
            job.key, f"{key} is a preemptor whose victims have not stopped yet", key
        )
    path = where[0]
    assert job.leaf is not None
    policy = e.state.tree.nodes[job.leaf].preemption
    priority = None if victim is None else victim.priority
    keeps = path == job.leaf or _lender_keeps(e, job, path, where[1])
    refused = policy_refusal(
        job.key,
        job.leaf,
        job.priority,
        key,
        path,
        priority,
        policy=policy,
        within=within,
        in_leaf=in_leaf,
        lender_keeps=keeps,
    )
    if refused is not None:
        return refused
    may = within or takes_while_borrowing(policy, job.priority, priority, lender_keeps=keeps)
    return victim_refusal(
        job.key,
        job.leaf,
        job.priority,
        key,
        path,
        priority,
        ran_ms=None if victim is None else e.state.now - victim.admitted_ms,
        min_runtime_ms=e.min_runtime(path),
        lower_priority=lower,
        within=may,
        lending=e.state.tree.nodes[job.leaf].lending,
        borrowing=path != job.leaf and may and borrowing_reason(e, job, path, where[2]) is not None,
    )


def reclaim_preview(
    e: EngineContext, key: WorkloadKey, now: Millis
) -> tuple[str | None, list[Preempted]]:
    """Dry run of reclaim for a waiting workload: whom a pass at ``now`` would preempt.

    ``(None, victims)`` when reclaim would make room (the minimal victim set of section 5,
    as the ``Preempted`` decisions a pass would make), else ``(why not, [])``. Nothing is
    decided: usage, caches, the clock and the pruning data are put back exactly as they
    were.
    """
    job = e.state.jobs.get(key)
    if job is None or job.state != PENDING or job.leaf is None:
        return f"it is not waiting in a queue ({'unknown' if job is None else job.state})", []
    if job.held:
        return "capacity is already held for it: its victims are stopping", []
    e.refresh_budgets()
    shut = gates.refusal(e, job)  # the gates a pass asks: a workload not offered preempts nothing
    if shut is not None:
        return f"{shut.says}: it is not offered, so it preempts nothing", []
    if e.fits(job):
        return "it fits without preempting anything; the next decision pass admits it", []
    refusal = _reclaim_refusal(e, job)
    if refusal is not None:
        return refusal, []
    saved = (
        e.state.now,
        set(e.dirty),
        dict(e.share_cache),
        dict(e.state.reclaim_failed),
    )
    e.state.now = now
    try:
        removed = find_victims(e, job)
        if removed is None:
            return (
                "no set of borrowing workloads elsewhere (or lower-priority ones of its own "
                "leaf, with LowerPriority) would make room; workloads within their minimum "
                "runtime are protected",
                [],
            )
        victims = [_preview_victim(e, job, victim, why) for victim, why in removed]
        for victim, _ in removed:
            assert victim.used_path is not None
            e.account(victim.used_path, victim.used_shape, victim.zone)
        return None, victims
    finally:
        e.state.now, e.dirty, e.share_cache, e.state.reclaim_failed = saved


_ONLY_RESTORES: Final = "reclaim only restores a guarantee, and within-quota preemption is Never"
"""Why a leaf beyond its min cannot reclaim when within-quota preemption is Never."""


def _reclaim_refusal(e: EngineContext, job: Job) -> str | None:
    assert job.leaf is not None
    info = e.state.tree.nodes[job.leaf]
    if not all(e.pod_fits_schedulable(job.zone, pod) for pod in job.pods):
        return f"no schedulable node of zone {job.zone} can host one of its pods"
    lower = info.within_quota == "LowerPriority"
    in_leaf = preempts_in_leaf(info.preemption, job.shape, info.min)
    if info.lending.reclaim == "Never" and not lower:
        return f"{job.leaf} reclaims from no other leaf (usher.io/reclaim-within: Never, L1)"
    if within_guarantee(e, job) or may_preempt_beyond_guarantee(info.preemption, lower and in_leaf):
        return None
    if lower and not in_leaf:
        return (
            f"it asks more than the min of {job.leaf}, so it may not preempt in its leaf "
            "(usher.io/within-quota-request: WithinMin), and reclaim only restores a guarantee"
        )
    zone_min = info.zone_min.get(job.zone, {}) if e.within_min(info, job.shape) else {}
    for resource, amount in job.shape:
        if resource not in zone_min:
            continue
        used, minimum = info.zone_used.get(job.zone, {}).get(resource, 0), zone_min[resource]
        if used + amount > minimum:  # Z4: within its total min, beyond its zone's
            over = used_and_requested_over(resource, used, amount, bound("min", resource, minimum))
            return f"{in_zone(job.leaf, resource, job.zone)}: {over}: {_ONLY_RESTORES}"
    for resource, amount in job.shape:
        used, minimum = info.used.get(resource, 0), info.min.get(resource, 0)
        if used + amount > minimum:
            over = used_and_requested_over(resource, used, amount, bound("min", resource, minimum))
            return f"{job.leaf} {resource} {over}: {_ONLY_RESTORES}"
    return None


def _preview_victim(e: EngineContext, job: Job, victim: Job, why: Reason) -> Preempted:
    assert victim.used_path is not None
    info = e.state.tree.nodes.get(victim.used_path)
    queue = info.queue if info is not None and info.queue is not None else QueueName("")
    return Preempted(
        workload=victim.key, queue=queue, quota=victim.used_path, preemptor=job.key, reason=why
    )


def _common_depth(left: list[str], right: list[str]) -> int:
    depth = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        depth += 1
    return depth
