"""Leaf offers and pruning: each waiting leaf's first candidate and what a pass may skip.

What it does: keeps the per-node lowest request and reclaim potential, each leaf's offer and its
interleave key, and the announcements a pass publishes.
What it must never do: admit or preempt (the pass does).
"""

from __future__ import annotations

import heapq
from bisect import insort

from schemas import (
    Decision,
    Inadmissible,
    QuotaPath,
    Unmapped,
    WorkloadKey,
)
from usher.core.engine.data import GuardHeads, LeafRefusal, OfferKey
from usher.core.engine.refusals import fits_once_stopped_at, may_search
from usher.core.engine.shortfall import Shortfalls
from usher.core.gates import chain
from usher.core.rules.preemption_policy import may_preempt_beyond_guarantee
from usher.core.state.indexed import (
    ADMITTED,
    INADMISSIBLE,
    UNMAPPED,
    Queue,
    QuotaNodeInfo,
    Shape,
)


class Offers(Shortfalls):
    """Leaf offers and pruning: each waiting leaf's first candidate and what a pass may skip."""

    def announcements(self) -> list[Decision]:
        out: list[Decision] = []
        for key in self.state.announce:
            job = self.state.jobs.get(key)
            if job is None or job.announced is None or not self.config.decides_for(job.zone):
                continue
            if job.state == UNMAPPED:
                out.append(Unmapped(workload=key, zone=job.zone, reason=job.announced))
            elif job.state == INADMISSIBLE and job.leaf is not None:
                out.append(
                    Inadmissible(
                        workload=key,
                        queue=self.state.tree.nodes[job.leaf].queue,
                        quota=job.leaf,
                        reason=job.announced,
                    )
                )
        self.state.announce = {}
        return out

    def refresh_pruning(self) -> list[QuotaPath]:
        """Bring the per-node pruning data (lowest request, reclaim potential) and the leaves'
        offers up to date; return the leaves that were refreshed (they had changed)."""
        if not self.dirty:
            return []
        stale_inner: set[QuotaPath] = set()
        refreshed = sorted(self.dirty)
        for leaf in refreshed:
            info = self.state.tree.nodes.get(leaf)
            queue = self.leaf_queues.get(leaf)
            if info is None or queue is None:
                self.offer_keys.pop(leaf, None)
                continue
            low = lowest(list(queue.shapes))
            if low != self.low.get(leaf):
                self.low[leaf] = low
                stale_inner.update(a.path for a in info.ancestors[:-1])
            potential = 1 if self._has_potential(info, queue) else 0
            delta = potential - self.leaf_potential.get(leaf, 0)
            if delta:
                self.leaf_potential[leaf] = potential
                for ancestor in info.ancestors:
                    self.potential[ancestor.path] = self.potential.get(ancestor.path, 0) + delta
            self._refresh_refusal(info, queue, potential)
            self._refresh_offer(info, queue, potential)
        self.dirty = set()
        # A head is its leaf's first candidate: the starvation guard looks at these again (N1).
        self.guard_heads.changed.update(refreshed)
        nodes = self.state.tree.nodes
        for path in sorted(stale_inner, key=lambda p: (-nodes[p].depth, p)):
            self.low[path] = combine_lowest([self.low.get(c) for c in nodes[path].children])
        self._compact_offers()
        return refreshed

    def reset_pruning(self) -> None:
        """Forget every leaf's pruning data and offers (a new tree, or indexes rebuilt): each
        leaf is refreshed at the next pass."""
        self.low = {}
        self.leaf_potential = {}
        self.potential = {}
        self.leaf_refusals = {}
        self.needs_above = {}
        self.open_leaves = set()
        self.offer_keys = {}
        self.admit_offers = []
        self.potential_offers = []
        self.timed_offers = set()
        self.dirty = set(self.state.tree.leaves)
        self.guard_heads = GuardHeads()

    def _refresh_refusal(self, info: QuotaNodeInfo, queue: Queue, potential: int) -> None:
        """Keep ``info``'s ``LeafRefusal`` (only a leaf that could preempt has one) and its
        counts in ``needs_above``/``open_leaves``."""
        old = self.leaf_refusals.pop(info.path, None)
        if old is not None:
            self._count_refusal(info, old, -1)
        if potential:
            new = self._leaf_refusal(info, queue)
            self.leaf_refusals[info.path] = new
            self._count_refusal(info, new, 1)

    @staticmethod
    def _leaf_refusal(info: QuotaNodeInfo, queue: Queue) -> LeafRefusal:
        if queue.scalables:
            return True, ()  # grouped by the least they start with: their request may search
        needs: list[Shape] = []
        for shape in queue.shapes:
            if not may_search(info, shape):
                continue
            if not fits_once_stopped_at(info, shape):
                return True, ()
            needs.append(shape)
        return False, tuple(needs)

    def _count_refusal(self, info: QuotaNodeInfo, refusal: LeafRefusal, sign: int) -> None:
        is_open, needs = refusal
        if is_open:
            if sign > 0:
                self.open_leaves.add(info.path)
            else:
                self.open_leaves.discard(info.path)
            return
        counts = self.needs_above
        for ancestor in info.ancestors[:-1]:
            for shape in needs:
                key = (ancestor.path, shape)
                left = counts.get(key, 0) + sign
                if left:
                    counts[key] = left
                else:
                    del counts[key]

    def _leaf_offer(self, info: QuotaNodeInfo, queue: Queue) -> tuple[WorkloadKey, OfferKey] | None:
        """The leaf's first workload this engine decides for and that is not backing off
        (R10), and its interleave key (R3: within-min first, lower dominant share, then queue
        order). A leaf where a backing-off workload was passed over is marked as depending on
        the clock (``timed_offers``): its offer is refreshed at every pass."""
        jobs = self.state.jobs
        self.timed_offers.discard(info.path)
        budgeted = self.budget_gated(info.path)
        if chain.clocked(self, info.path):
            # What a budget has left shrinks with the clock: a B2 hold may start any pass.
            self.timed_offers.add(info.path)
        gates = chain.passing_over(self, info.path)
        for entry in queue.entries:
            job = jobs[entry[2]]
            shut = chain.passed_over(self, job, gates)
            if shut is not None:
                if chain.opens_by_time(shut):
                    self.timed_offers.add(info.path)
                continue
            # A held preemptor's own hold is already counted in its leaf's usage.
            within = self.within_min(info, () if job.held else job.shape)
            tier = self.budget_tier(info.path, job, within) if budgeted else int(not within)
            if tier and self.config.half_life_ms is not None:
                # Decayed usage moves with the clock (F1), even from 0 (work admitted now).
                self.timed_offers.add(info.path)
            fair = self.fair_key(info, tier)
            return job.key, (tier, fair, self.share(info), job.sort_key)
        return None

    def superseded(self, key: OfferKey, leaf: QuotaPath) -> bool:
        """Whether a kept heap entry is stale: its leaf's offer has another key, or none."""
        offer = self.offer_keys.get(leaf)
        return offer is None or offer[1] != key

    def _refresh_offer(self, info: QuotaNodeInfo, queue: Queue, potential: int) -> None:
        offer = self._leaf_offer(info, queue)
        if offer is None:
            self.offer_keys.pop(info.path, None)
            return
        entry = (offer[0], offer[1], potential)
        if self.offer_keys.get(info.path) == entry:
            return  # its heap entry is still current
        self.offer_keys[info.path] = entry
        heap = self.potential_offers if potential else self.admit_offers
        heapq.heappush(heap, (offer[1], info.path))

    def _compact_offers(self) -> None:
        """Rebuild a heap once stale entries outnumber current ones (bounded memory); else
        drop the stale entries on top of each: a leaf's offer changes mostly as work is
        admitted there and its share grows, so the entry it leaves behind has a lower key and
        every pass, which pops from copies of the heaps, would pop it again."""
        current = len(self.offer_keys)
        if len(self.admit_offers) + len(self.potential_offers) <= 2 * current + 64:
            for heap in (self.admit_offers, self.potential_offers):
                while heap and self.superseded(*heap[0]):
                    heapq.heappop(heap)
            return
        admit: list[tuple[OfferKey, QuotaPath]] = []
        potential: list[tuple[OfferKey, QuotaPath]] = []
        for leaf, (_, key, can_preempt) in self.offer_keys.items():
            (potential if can_preempt else admit).append((key, leaf))
        heapq.heapify(admit)
        heapq.heapify(potential)
        self.admit_offers, self.potential_offers = admit, potential

    def _has_potential(self, info: QuotaNodeInfo, queue: Queue) -> bool:
        """Whether something in the queue might preempt (so it must be visited even if full)."""
        if not queue.entries:
            return False
        if chain.closes_leaf(self, info.path):
            # Held (R14, or a spent budget, B1): only a preemptor whose hold the ledger
            # already granted may move.
            return any(self.state.jobs[k].leaf == info.path for k in self.state.held)
        lower = info.within_quota == "LowerPriority" and info.path in self.leaf_admitted
        if may_preempt_beyond_guarantee(info.preemption, lower):
            return True
        if any(self.within_min(info, shape) for shape in queue.shapes):
            return True
        return any(self.state.jobs[k].leaf == info.path for k in self.state.held)

    def stale_offer_keys(self) -> list[QuotaPath]:
        """Leaves whose kept offer is missing, differs from a fresh one, or is not current in
        the heap its potential names. Always empty when the offers are kept right; a check
        for tests (a stale key would reorder the interleave, a missing one starve a queue).
        """
        stale: list[QuotaPath] = []
        heaps = (set(self.admit_offers), set(self.potential_offers))
        for leaf in self.state.tree.leaves:
            if leaf in self.dirty or leaf in self.timed_offers:
                continue  # refreshed before the next pass looks
            info, queue = self.state.tree.nodes[leaf], self.leaf_queues[leaf]
            fresh = self._leaf_offer(info, queue)
            kept = self.offer_keys.get(leaf)
            if fresh is None or kept is None:
                if (fresh is None) != (kept is None):
                    stale.append(leaf)
                continue
            potential = self.leaf_potential.get(leaf, 0)
            if (
                (kept[0], kept[1]) != fresh
                or kept[2] != potential
                or (kept[1], leaf) not in heaps[potential]
            ):
                stale.append(leaf)
        return stale

    def end_pass_admissions(self) -> None:
        """The pass is over: its admissions become reclaim candidates like any other."""
        for key in sorted(self.pass_admitted):
            job = self.state.jobs.get(key)
            if job is not None and job.state == ADMITTED and job.used_path is not None:
                insort(self.leaf_admitted.setdefault(job.used_path, []), job.victim_key)
        self.pass_admitted = set()


def lowest(shapes: list[Shape]) -> dict[str, int] | None:
    """Per resource, the least any shape needs (only resources every shape needs)."""
    if not shapes:
        return None
    low = dict(shapes[0])
    for shape in shapes[1:]:
        amounts = dict(shape)
        low = {r: min(a, amounts[r]) for r, a in low.items() if r in amounts}
    return low


def combine_lowest(lows: list[dict[str, int] | None]) -> dict[str, int] | None:
    present = [low for low in lows if low is not None]
    if not present:
        return None
    low = dict(present[0])
    for other in present[1:]:
        low = {r: min(a, other[r]) for r, a in low.items() if r in other}
    return low


def low_fits(low: dict[str, int] | None, room: dict[str, int]) -> bool:
    if low is None:
        return False
    for resource, amount in low.items():
        free = room.get(resource)
        if free is not None and amount > free:
            return False
    return True
