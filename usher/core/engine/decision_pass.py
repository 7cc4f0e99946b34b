"""One decision pass: queues offer candidates, the best is tried, until none is left (R3).

What it does: ``DecisionPass`` runs the cross-queue interleave of one pass over an engine's
state -- within-min first, lower dominant share, then queue order (beyond the guarantee, with
fair share on, lower decayed usage per weight before the share: F1) -- admitting what fits and
asking reclaim for the rest; the policy seam says whether a candidate that stays pending
closes its queue. It works on the ``EngineContext`` it is given (the pruning data and the
offers it starts from are kept there, in ``offers``). What it learns about a leaf while it
walks its queue is kept for the pass in a ``PassMemo``; a run of workloads that would each be
taken and fail with nothing changed is passed at once (``skip_failing``), exactly where taking
them one by one would leave the leaf's cursor.
What it must never do: keep anything beyond one pass, decide on its own what the policy
means (the seam does), read a clock, or iterate an unordered collection where the order
could reach a decision.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from typing import TYPE_CHECKING

from schemas import Admitted, Decision, Preempted, QueueName, QuotaPath, Reason, WorkloadKey
from usher.core.engine.data import OfferKey, Share
from usher.core.engine.pass_end import PassEnd, has_room_for
from usher.core.engine.pass_memo import PassMemo
from usher.core.engine.reclaim_search import find_victims, refused_without_search
from usher.core.gates import chain
from usher.core.model import reasons
from usher.core.rules.fairshare import FairKey
from usher.core.rules.preemption_policy import may_preempt_beyond_guarantee
from usher.core.state.indexed import Job, Placement, QuotaNodeInfo, Shape, SortKey, shape_with
from usher.core.tree.zone_fallback import passed_over, zone_choice

if TYPE_CHECKING:
    from usher.core.engine.context import EngineContext


class DecisionPass:
    """One decision pass: queues offer candidates, the best is tried, until none is left.

    Offers come from two places. The engine keeps, between passes, every waiting leaf's
    first candidate and key in two heaps (leaves that could preempt, and the others); a pass
    starts from copies of them, so it costs what changed, not how many leaves wait. Once a
    leaf has been looked at in this pass (popped, or offered again after a try or a
    preemption) its kept entries are dead for the pass (``touched``) and the pass's own heap
    carries it, with a stamp per offer (``live``) so a newer offer supersedes an older one.
    """

    def __init__(
        self,
        engine: EngineContext,
        decisions: list[Decision],
        skip: list[WorkloadKey] | None = None,
        victims: list[Job] | None = None,
    ) -> None:
        """``skip``: workloads not to try in this pass (already tried first, N1); ``victims``:
        workloads preempted earlier in this pass (by those tried first), which are not offered
        and, under Block, still stop their queues (``stand``)."""
        self.e = engine
        self.decisions = decisions
        self.heap: list[tuple[OfferKey, int, QuotaPath]] = []
        self.live: dict[QuotaPath, int] = {}
        self.offered: dict[QuotaPath, Job] = {}
        self.kept_admit: list[tuple[OfferKey, QuotaPath]] = []
        self.kept_potential: list[tuple[OfferKey, QuotaPath]] = []
        self.touched: set[QuotaPath] = set()
        self.cursor: dict[QuotaPath, SortKey] = {}
        self.closed: set[QuotaPath] = set()
        self.stands: dict[QuotaPath, SortKey] = {}
        """Under Block, per leaf, the first place of a workload preempted in this pass: it
        is not offered again, but it still counts as a head that failed, so nothing behind
        it in its queue is offered (section 4)."""
        self.tried: set[WorkloadKey] = set(skip or ())
        self.victims: list[Job] = []
        """The workloads this pass preempted, in order."""
        self.stamp = 0
        self.full_pruned = False
        self.policy = engine.policy
        self.memo = PassMemo(engine)
        self.end = PassEnd(engine, self.closed)
        tree = engine.state.tree
        self.root = tree.nodes[QuotaPath(tree.root.name)] if tree.root is not None else None
        for victim in victims or ():
            self.tried.add(victim.key)
            self.stand(victim)

    def run(self) -> None:
        self.seed()
        while not self.nothing_can_move():
            popped = self.pop()
            if popped is None:
                break
            leaf, job = popped
            # The candidate fitting its quota answers ``queue_viable`` too (its own shape is
            # one of the queue's, past the cursor): one quota walk instead of two.
            fits_quota = (
                not job.held
                and not self.memo.known_dead(leaf, job.shape)
                and self.e.fits_quota(leaf, job.shape)
            )
            # Offered once per pass, whatever follows: a candidate passed over below counts
            # as one that failed, so a preemption later in the pass does not bring it back.
            self.tried.add(job.key)
            if not fits_quota and not self.queue_viable(leaf):
                # Nothing left in it can fit or preempt until something changes: no try,
                # and the queue is offered again only if a preemption reopens it.
                self.cursor[leaf] = job.sort_key
                self.fail(leaf)
                self.end.failed(leaf, job.sort_key)
                continue
            # A candidate whose try could only fail, changing nothing, is not tried.
            hopeless = not fits_quota and self.memo.hopeless(self.e.state.tree.nodes[leaf], job)
            moved = not hopeless and self.try_candidate(job, fits_quota)
            self.cursor[leaf] = job.sort_key
            if not moved:
                self.fail(leaf)
                if not self.policy.closes_queue:
                    self.skip_failing(leaf)
                self.end.failed(leaf, self.cursor[leaf])
                if self.policy.closes_queue:
                    continue
            self.offer(leaf)
            if moved:
                self.end.moved()
                self.keep_only_potential_when_full()

    def fail(self, leaf: QuotaPath) -> None:
        """The leaf's candidate stays pending: under Block its queue offers nothing more."""
        if self.policy.closes_queue:
            self.closed.add(leaf)

    def seed(self) -> None:
        """Start from the engine's kept offers (brought up to date for what changed)."""
        self.e.refresh_pruning()
        self.kept_admit = self.e.admit_offers.copy()
        self.kept_potential = self.e.potential_offers.copy()
        self.full_pruned = False

    def pop(self) -> tuple[QuotaPath, Job] | None:
        """The best current offer across the pass's heap and the kept ones, taken out."""
        while True:
            kept = self.best_kept()
            if self.heap and (kept is None or self.heap[0][0] < kept[0][0]):
                _, stamp, leaf = heapq.heappop(self.heap)
                if self.live.get(leaf) == stamp:
                    del self.live[leaf]
                    return leaf, self.offered.pop(leaf)
                continue
            if kept is None:
                return None
            key, leaf = heapq.heappop(kept)
            if leaf in self.touched or leaf in self.closed:
                continue
            if self.e.superseded(key, leaf):
                continue  # superseded since it was kept
            job = self.next_untried(leaf)
            if job is None or job.key != self.e.offer_keys[leaf][0]:
                # The kept first workload is not this pass's to try (tried already, or not
                # to be offered now): offer what the pass would, from the pass's own heap.
                self.offer(leaf)
                continue
            self.touched.add(leaf)
            return leaf, job

    def best_kept(self) -> list[tuple[OfferKey, QuotaPath]] | None:
        """The kept heap whose first entry is lower, or None if both are empty."""
        potential, admit = self.kept_potential, self.kept_admit
        if not potential:
            return admit or None
        if not admit or potential[0][0] < admit[0][0]:
            return potential
        return admit

    def keep_only_potential_when_full(self) -> None:
        """Once the root has no room for any waiting shape, drop the offers of queues that
        could only admit (not preempt): none of them can move before a preemption, which
        offers them again. Dropping the kept heap is free; the pass's own is small."""
        if self.full_pruned or self.root is None or self.root_has_room():
            return
        # A recorded potential, like the lowest request, is only ever larger than the true
        # one within a pass: it keeps more offers, never drops one that could move.
        potential = self.e.leaf_potential
        self.kept_admit = []
        kept = [entry for entry in self.heap if potential.get(entry[2], 0)]
        for entry in self.heap:
            if not potential.get(entry[2], 0) and self.live.get(entry[2]) == entry[1]:
                del self.live[entry[2]]
                del self.offered[entry[2]]
        heapq.heapify(kept)
        self.heap = kept
        self.full_pruned = True

    def nothing_can_move(self) -> bool:
        """True when no pending shape fits (the root has no room for any, or every leaf where
        work waits is below a node without room for it) and nobody may preempt, or every
        candidate left would be refused reclaim without a search (``PassEnd``).

        Ends a pass early: once the cluster is full, the remaining candidates would all be
        tried and fail, which changes nothing.
        """
        root = self.root
        if root is None or (self.root_has_room() and not self.end.no_room_anywhere(root)):
            return False
        potential = self.e.potential.get(root.path, 0)
        return not potential or self.end.proven(self.cursor, potential)

    def root_has_room(self) -> bool:
        """Whether the root could take the lowest request of every waiting shape.

        The pruning data is not refreshed since the pass began, and need not be: admissions
        only take shapes out of queues and add usage, so the recorded lowest request can only
        be lower than the true one (answering yes more often, never wrongly no).
        """
        root = self.root
        assert root is not None
        return has_room_for(root, self.e.low.get(root.path))

    def offer(self, leaf: QuotaPath) -> None:
        """Push the queue's next untried workload; whether anything in the queue can still
        move is asked when it is popped (``queue_viable``): until then usage only grows, or
        a preemption offers it again, so asking twice would only cost."""
        self.touched.add(leaf)  # from now on the pass's own heap speaks for this leaf
        if leaf in self.closed:
            return
        job = self.next_untried(leaf)
        if job is None:
            return
        info = self.e.state.tree.nodes[leaf]
        # A held preemptor's own hold is already counted in its leaf's usage.
        within = self.e.within_min(info, ()) if job.held else self.memo.within(info, job.shape)
        key: OfferKey = (*self.key_prefix(leaf, info, job, within), job.sort_key)
        self.stamp += 1
        heapq.heappush(self.heap, (key, self.stamp, leaf))
        self.live[leaf] = self.stamp
        self.offered[leaf] = job

    def skip_failing(self, leaf: QuotaPath) -> None:
        """Round, after ``leaf``'s candidate stayed pending: move its cursor past the workloads
        the interleave would take from it next, one after another, each failing with nothing
        changed -- plain workloads that do not fit and that reclaim refuses without a search
        (``reclaim_search.refused_without_search``) -- as taking and failing each would.

        Nothing changes while they are passed, so each is the next taken exactly when its
        interleave key comes before every other offer (``next_key``), and the queue is still
        viable at each (``queue_viable``: a shape that fits or asks within the guarantee lies
        beyond the cursor). What is passed needs no ``tried`` mark: it lies behind the cursor.
        A workload a gate passes over, or tried earlier in the pass, may be passed too: a gate
        does not open during a pass, and it would not be offered either way.
        """
        e = self.e
        info = e.state.tree.nodes[leaf]
        queue = e.leaf_queues[leaf]
        cursor = self.cursor[leaf]
        bound = self.next_key()
        prefixes: dict[bool, tuple[int, FairKey, Share]] = {}
        fits: dict[Shape, bool] = {}
        last_live: SortKey | None = None
        entries, jobs = queue.entries, e.state.jobs
        index = bisect_right(entries, cursor)
        while index < len(entries):
            job = jobs[entries[index][2]]
            if job.held or job.scalable is not None:
                break
            within = self.memo.within(info, job.shape)
            if bound is not None:
                prefix = prefixes.get(within)
                if prefix is None:
                    prefix = prefixes[within] = self.key_prefix(leaf, info, job, within)
                if (*prefix, job.sort_key) >= bound:
                    break
            fit = fits.get(job.shape)
            if fit is None:
                fit = fits[job.shape] = e.fits_quota(leaf, job.shape)
            if fit or not refused_without_search(e, job):
                break
            if last_live is None:
                last_live = self.last_live(info)
            if last_live is None or cursor >= last_live:
                break  # taken, it would fail and its queue offer nothing more
            cursor = job.sort_key
            index += 1
        self.cursor[leaf] = cursor

    def last_live(self, info: QuotaNodeInfo) -> SortKey | None:
        """The last workload in ``info``'s queue of a shape that fits or asks within its
        guarantee (``queue_viable`` asks whether one lies beyond the cursor), or None."""
        shapes = self.e.leaf_queues[info.path].shapes
        live = [group[-1] for shape, group in shapes.items() if not self.memo.dead(info, shape)]
        return max(live) if live else None

    def next_key(self) -> OfferKey | None:
        """A key no later than the next offer the pass takes (stale entries included)."""
        kept = self.best_kept()
        keys = [entry[0] for entry in self.heap[:1]] + [entry[0] for entry in (kept or [])[:1]]
        return min(keys) if keys else None

    def key_prefix(
        self, leaf: QuotaPath, info: QuotaNodeInfo, job: Job, within: bool
    ) -> tuple[int, FairKey, Share]:
        """``job``'s interleave key but for its place in the queue (``offer``): below a spent
        lower-priority budget (B1) a last tier, elsewhere R3's two."""
        e = self.e
        tier = e.budget_tier(leaf, job, within) if leaf in e.budget_stops else int(not within)
        return tier, e.fair_key(info, tier), e.share(info)

    def next_untried(self, leaf: QuotaPath) -> Job | None:
        queue = self.e.leaf_queues[leaf]
        cursor = self.cursor.get(leaf)
        index = 0 if cursor is None else bisect_right(queue.entries, cursor)
        entries = queue.entries
        stand = self.stands.get(leaf)
        end = len(entries) if stand is None else bisect_right(entries, stand)
        jobs = self.e.state.jobs
        # The gates that may shut something in this leaf, asked in their one order; a
        # standing refusal (a victim still stopping, R7) is offered and fails in the try.
        gates = self.memo.gates(leaf)
        while index < end:
            key = entries[index][2]
            if key not in self.tried and chain.passed_over(self.e, jobs[key], gates) is None:
                return jobs[key]
            index += 1
        return None

    def queue_viable(self, leaf: QuotaPath) -> bool:
        """Whether some untried workload of the queue fits now or could preempt."""
        e = self.e
        queue = e.leaf_queues[leaf]
        info = e.state.tree.nodes[leaf]
        cursor = self.cursor.get(leaf)
        for shape, group in queue.shapes.items():
            if cursor is not None and group[-1] <= cursor:
                continue
            if not self.memo.dead(info, shape):
                return True
        if cursor is not None and (not queue.entries or queue.entries[-1] <= cursor):
            return False
        lower = info.within_quota == "LowerPriority" and leaf in e.leaf_admitted
        if may_preempt_beyond_guarantee(info.preemption, lower):
            return True
        return any(e.state.jobs[k].leaf == leaf for k in e.state.held)

    def try_candidate(self, job: Job, fits_quota: bool = False) -> bool:
        """Admit ``job`` if it fits, else after reclaim; False if it stays pending (True,
        proposing nothing, for a held preemptor that the ledger admits itself, R7).
        ``fits_quota``: its quota was just found to have room (only the zone is left)."""
        e = self.e
        if chain.stands_shut(e, job):
            return False  # preempted, not seen stopped yet (R7): the ledger would refuse it
        if job.held and job.key in e.state.stops:
            # A preemptor whose reclaim is on the log (decided by an earlier replica) while a
            # victim still stops: the capacity is its own already, and the ledger admits it
            # itself once the last victim stopped (R7), in the order they stop. Proposing it
            # would be answered "granted" with nothing on the log, and its Admitted would then
            # come out of this pass's order (D4). Its place is taken, as for the replica that
            # reclaimed: a Block queue goes on behind it, as ``reason_now`` says.
            return True
        if job.held:
            e.drop_hold(job)  # its own hold is what it may use now
            self.memo.forget()
        if job.zones:
            fell_back = self.try_accepted_zones(job, fits_quota)
            if fell_back is not None:
                return fell_back
        if e.fits_zone(job) if fits_quota else e.fits(job):
            self.admit(job)
            return True
        victims = find_victims(e, job)
        if victims is None:
            return job.scalable is not None and self.admit_partially(job)
        placements = self.preempt(job, victims)
        self.admit(job)
        e.state.preemptors[job.key] = None
        for victim, where in placements:
            e.begin_stop(job.key, victim, where)
        self.reopen(victims)
        return True

    def try_accepted_zones(self, job: Job, fits_quota: bool) -> bool | None:
        """Z2: admit a job accepting several zones into the first that fits now, when this
        engine decides for that zone (True); False when another zone's dequeuer will (or none
        fits and this one may not reclaim for it); None: none fits, reclaim in the first zone
        goes on as for any job (a fallback never preempts)."""
        e = self.e
        assert job.leaf is not None
        if fits_quota or e.fits_quota(job.leaf, job.shape):
            order = e.zone_order(job)  # burst zones last (Z3)
            chosen, passed = zone_choice(order, lambda zone: e.shortfall_in_zone(job, zone))
            if chosen is not None:
                if not e.decides(chosen):
                    return False  # the dequeuer of that zone admits it (or the ledger refuses)
                job.zone = chosen
                self.admit(job, fallback=passed_over(chosen, passed) if passed else None)
                return True
        return None if e.decides(job.zone) else False

    def admit(
        self,
        job: Job,
        partial: tuple[Shape, int, Reason] | None = None,
        fallback: Reason | None = None,
    ) -> None:
        """Admit ``job`` whole, or with ``partial``'s shape, pods and reason (R11)."""
        e = self.e
        assert job.leaf is not None
        leaf = job.leaf
        e.note_shapes(leaf, e.leaf_queues[leaf].remove(job))
        queue = e.state.tree.nodes[leaf].queue
        assert queue is not None
        shape, pods, reason = partial if partial is not None else (job.shape, None, fallback)
        counts = None
        if partial is not None and job.scalable is not None:
            counts = {job.scalable[0]: partial[1]}
            pods = job.pod_count - (job.scalable[2] - partial[1])
        pin = e.topology_choice(job, shape).pin  # the domain its fit found (TP1)
        e.admit(job, leaf, shape, in_pass=True, pods=pods, pin=pin)
        self.memo.admitted(leaf)
        self.decisions.append(
            Admitted(
                workload=job.key,
                queue=queue,
                quota=leaf,
                zone=job.zone,
                requests=dict(shape),
                priority=job.priority,
                pod_counts=counts,
                reason=reason,
                topology=pin,
            )
        )

    def admit_partially(self, job: Job) -> bool:
        """Admit ``job`` with as many pods of its scalable set as fit, at least its minimum
        (R11); False when not even that fits. Fit only drops as pods are added: a bisection."""
        e = self.e
        leaf, scalable = job.leaf, job.scalable
        assert leaf is not None and scalable is not None
        _, _, count, least = scalable

        def shape_for(pods: int) -> Shape:
            return e.intern(shape_with(job.shape, scalable, pods))

        def fits(pods: int) -> bool:
            shape = shape_for(pods)
            return e.fits_quota(leaf, shape) and e.fits_zone(job, shape)

        if not fits(least):
            return False
        low, high = least, count - 1
        while low < high:
            middle = (low + high + 1) // 2
            if fits(middle):
                low = middle
            else:
                high = middle - 1
        why = e.quota_shortfall(job) or e.zone_shortfall(job)
        reason = reasons.partial_admission(low, count, least, job.shape, why)
        self.admit(job, (shape_for(low), low, reason))
        return True

    def preempt(
        self, preemptor: Job, victims: list[tuple[Job, Reason]]
    ) -> list[tuple[WorkloadKey, Placement]]:
        """Evict ``victims``; where each counted (it keeps counting until seen stopped)."""
        e = self.e
        placements: list[tuple[WorkloadKey, Placement]] = []
        for victim, why in victims:
            quota = victim.used_path
            assert quota is not None
            placements.append((victim.key, (quota, victim.used_shape, victim.zone)))
            info = e.state.tree.nodes.get(quota)
            queue = info.queue if info is not None and info.queue is not None else QueueName("")
            # Usage was already removed by reclaim; restore it so _unadmit removes it once.
            e.account(quota, victim.used_shape, victim.zone)
            e.unadmit(victim)
            e.classify(victim)
            e.set_note(victim, why)
            self.tried.add(victim.key)  # not reconsidered before the next pass
            self.stand(victim)
            self.victims.append(victim)
            self.decisions.append(
                Preempted(
                    workload=victim.key,
                    queue=queue,
                    quota=quota,
                    preemptor=preemptor.key,
                    reason=why,
                )
            )
        return placements

    def stand(self, victim: Job) -> None:
        """Under Block, ``victim`` (preempted, back in its queue) still closes its queue
        from its place on for the rest of the pass, as a head that failed would."""
        leaf = victim.leaf
        if not self.policy.closes_queue or leaf is None:
            return
        place = self.stands.get(leaf)
        if place is None or victim.sort_key < place:
            self.stands[leaf] = victim.sort_key

    def reopen(self, victims: list[tuple[Job, Reason]]) -> None:
        """After a preemption: refresh the victims' queues and open any queue it unblocked."""
        self.memo.forget()  # usage went down: a shape that could not move may now
        for victim, _ in victims:
            leaf = victim.leaf
            if leaf is not None and leaf in self.live:
                self.offer(leaf)
        # Usage went down: every queue not offered now may move again. Those never looked at
        # are in the kept heaps (copied afresh, with what changed refreshed); the ones looked
        # at in this pass, or changed by it, are offered again from where they stand.
        changed = self.e.refresh_pruning()
        self.kept_admit = self.e.admit_offers.copy()
        self.kept_potential = self.e.potential_offers.copy()
        self.full_pruned = False
        again = self.touched.union(changed)
        for leaf in sorted(again):
            if leaf not in self.live and leaf in self.e.leaf_queues:
                self.offer(leaf)
