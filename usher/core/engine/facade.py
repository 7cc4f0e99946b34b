"""The decision engine: folds events into state and runs decision passes (R1-R7, C1-C3).

What it does: ``Engine.apply(event, now)`` folds a cluster event or a decision made elsewhere
into the state; ``Engine.decide(now)`` runs one decision pass (cross-queue interleave,
Round/Block, reclaim, within-quota preemption, min runtime) and returns its decisions;
``Engine.preview_pass(now)`` says what a pass would decide without deciding it; the query
methods explain every workload's state and reason. The engine is a thin façade: it extends
``EngineContext`` (``context``: the durable state, the derived indexes and books, and the
folding, accounting, stops and offers over them, one module each) and hands it to the parts
of a pass -- ``decision_pass`` (one pass), ``reclaim_search`` (victims), ``starvation`` (N1),
``backfill`` (N2), ``budget_overrun`` (B2) -- and to ``queries`` (read-side answers).
What it must never do: read a clock, draw random numbers, perform I/O, or iterate an
unordered collection where the order could reach a decision. Time only comes in as ``now``.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import msgspec

from schemas import (
    Admitted,
    ClusterConnected,
    ClusterDisconnected,
    ClusterLost,
    Decision,
    Inadmissible,
    Millis,
    NodeHeld,
    NodeObserved,
    NodeRemoved,
    NodeResumed,
    PassRan,
    Pending,
    Preempted,
    PriorityClassDeleted,
    PriorityClassObserved,
    QueueName,
    QuotaPath,
    QuotaTreeApplied,
    QuotaTreeRejected,
    Reason,
    Released,
    Requeued,
    Retried,
    Unmapped,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    WorkloadProgress,
    WorkloadRejected,
    Zone,
    ZoneServed,
)
from schemas.envelope import LogEvent
from usher.core.engine import backfill, budget_overrun, reclaim_search, starvation
from usher.core.engine import queries as engine_queries
from usher.core.engine.context import EngineContext
from usher.core.engine.decision_pass import DecisionPass
from usher.core.engine.queries import JobView as JobView
from usher.core.engine.queries import QueueEntry as QueueEntry
from usher.core.rules import holds
from usher.core.state.durable import EngineState
from usher.core.state.indexed import (
    ADMITTED,
    PENDING,
    Job,
    QuotaNodeInfo,
)


class PassPreview(msgspec.Struct, frozen=True, kw_only=True):
    """What a pass would do, asked without running it (``Engine.preview_pass``)."""

    decisions: list[Decision]
    """The decisions, in the order ``decide`` would return them."""
    waiting: dict[WorkloadKey, JobView]
    """Every workload that waited before the pass, as the pass would leave it."""


_COPIED_ITEM_BY_ITEM: tuple[str, ...] = ("leaf_queues", "leaf_admitted")
"""Derived containers a pass writes whose items are mutable: copied item by item."""

_COPIED_FLAT: tuple[str, ...] = (
    "outside",
    "pod_fit_cache",
    "stopping",
    "pass_admitted",
    "shapes",
    "pod_lists",
    "names",
    "share_cache",
    "dirty",
    "low",
    "leaf_potential",
    "potential",
    "leaf_refusals",
    "needs_above",
    "open_leaves",
    "offer_keys",
    "admit_offers",
    "potential_offers",
    "timed_offers",
    "unready",
    "grown",
    "budget_stops",
    "budget_seen",
    "guard_heads",
)
"""Derived containers a pass writes whose items are immutable: a flat copy is a copy."""

DERIVED_WRITTEN_BY_A_PASS: tuple[str, ...] = (*_COPIED_ITEM_BY_ITEM, *_COPIED_FLAT)
"""Engine attributes besides ``state`` that a pass may write: what ``preview_pass`` sets
aside (with ``state`` itself and the tree's per-node usage)."""

READ_BY_A_PASS: tuple[str, ...] = (
    "config",
    "policy",
    "class_users",
    "zone_cap",
    "holds",
    "held_leaves",
)
"""Engine attributes besides ``state`` a pass only reads (the tests check every attribute
is classified)."""

_TrialKept = tuple[
    EngineState,
    dict[str, object],
    list[tuple[QuotaNodeInfo, dict[str, int], dict[str, int], dict[Zone, dict[str, int]]]],
]
"""What ``preview_pass`` set aside: the state, the derived attributes, each node's usage."""


class Engine(EngineContext):
    """Pure, deterministic admission and preemption core. Same inputs, same decisions."""

    def apply(self, event: LogEvent, now: Millis) -> list[Decision]:
        """Fold one event (or a decision made elsewhere) into the state.

        Returns only immediate decisions that need no pass (``Released`` of a finished or
        deleted admitted workload). Applying a decision the state already reflects is a no-op.
        """
        self.state.now = now
        if isinstance(event, Preempted | Requeued | Released):
            self.book_closed(event.workload)
        match event:
            case WorkloadObserved():
                self.fold_observed(event)
            case WorkloadFinished():
                return self.fold_finished(event)
            case WorkloadDeleted():
                return self.fold_deleted(event.workload)
            case QuotaTreeApplied():
                self.install_tree(event)
            case NodeObserved():
                self.observe_node(event)
            case NodeRemoved():
                self.remove_node(event)
            case PriorityClassObserved():
                self.set_priority_class(event.name, event.value)
            case PriorityClassDeleted():
                self.set_priority_class(event.name, None)
            case ZoneServed():
                self.fold_served(event.zone)
            case ClusterConnected() | ClusterDisconnected() | ClusterLost():
                return self.fold_cluster(event)
            case Admitted():
                self.apply_admitted(event)
                if self.state.tree.starvation_on:
                    # From the log too, so an engine that runs no pass (replay, explain,
                    # audit) and other zones' admissions start the clock as well (N1).
                    starvation.track(self, [event])
            case Preempted():
                self.apply_preempted(event)
            case Released():
                self.apply_released(event)
            case Requeued():
                self.apply_requeued(event)
            case Retried():
                self.apply_retried(event)
            case WorkloadRejected() | QuotaTreeRejected() | Pending() | Inadmissible() | Unmapped():
                # A rejected input changes nothing (the last valid state stays in force); the
                # other decisions carry no state change of their own.
                pass
            case PassRan():
                pass  # a record of a pass, for the audit (D4): it decides nothing
            case WorkloadProgress():
                self.fold_progress(event)
            case NodeHeld():
                self.state.holds[event.node] = holds.from_event(event)
                self.refresh_holds()
            case NodeResumed():
                if self.state.holds.pop(event.node, None) is not None:
                    self.refresh_holds()
        return []

    def check_preemption(
        self, preemptor: WorkloadKey, victims: Sequence[WorkloadKey], now: Millis
    ) -> Reason | None:
        """Whether evicting ``victims`` for ``preemptor`` follows section 5 on this state.

        ``None`` when it does (see ``reclaim_search.check_preemption``); the state is left
        exactly as it was. A workload that is its own preemptor is a drain's (R15).
        """
        if list(victims) == [preemptor]:
            return self.check_drain(preemptor, now)
        return reclaim_search.check_preemption(self, preemptor, victims, now)

    def reclaim_preview(self, key: WorkloadKey, now: Millis) -> tuple[str | None, list[Preempted]]:
        """Dry run of reclaim for a waiting workload: whom a pass at ``now`` would preempt.

        ``(None, victims)`` or ``(why not, [])`` (see ``reclaim_search.reclaim_preview``);
        nothing is decided.
        """
        return reclaim_search.reclaim_preview(self, key, now)

    def decide(self, now: Millis) -> list[Decision]:
        """Run one decision pass at ``now``; its decisions are already applied to the state."""
        self.state.now = now
        if self.state.last_pass_now is None or now != self.state.last_pass_now:
            # Time moved: min-runtime protections may have ended, so reclaim can differ.
            self.state.version += 1
        self.state.last_pass_now = now
        self.state.passes += 1
        decisions: list[Decision] = []
        if self.unready and self.state.tree.root is not None:
            # First, so that a workload out of attempts is announced inadmissible at once.
            self.requeue_unready(decisions)
        if self.state.failures:
            self.retry_failed(decisions)
        if self.holds:
            self.drain_due(decisions)
        if self.grown:
            self.stop_grown(decisions)
        self.refresh_budgets()
        decisions.extend(self.announcements())
        # A backoff may have ended since: the leaves whose first candidate depends on the
        # clock are looked at again (the pass refreshes dirty leaves first).
        self.dirty.update(self.timed_offers)
        if self.state.tree.root is not None:
            self._run_pass(decisions)
        return decisions

    def _run_pass(self, decisions: list[Decision]) -> None:
        """The pass proper; with the starvation guard on (N1), reserved workloads first and
        their holds counted while the others are tried."""
        if not self.state.tree.starvation_on:
            try:
                DecisionPass(self, decisions).run()
            finally:
                self.end_pass_admissions()
            return
        holders: list[Job] = []
        victims: list[Job] = []
        try:
            starvation.serve_first(self, decisions, holders, victims)
            DecisionPass(self, decisions, [job.key for job in holders], victims).run()
            backfill.run(self, decisions, holders)  # N2: opt-in, needs a declared runtime
        finally:
            starvation.release(self, holders)
            self.end_pass_admissions()
        starvation.track(self, decisions)

    def preview_pass(self, now: Millis) -> PassPreview:
        """What a pass at ``now`` would decide, and how it would leave each waiting workload.

        Nothing is decided: the pass runs on working copies of exactly what a pass writes
        (``PASS_WRITES``: the records of workloads, queues and stopping groups, the usage of
        every node and zone, counters and caches), one level deep -- shapes, reasons, the tree
        and the nodes are shared, never copied -- and the engine's own containers are put back
        afterwards, untouched. The answer is the one ``decide`` would give on this state.
        """
        waiting = sorted(key for key, job in self.state.jobs.items() if job.state == PENDING)
        kept = self._set_aside_for_trial()
        try:
            decisions = self.decide(now)
            after: dict[WorkloadKey, JobView] = {}
            for key in waiting:
                view = self.job_state(key)
                if view is not None:
                    after[key] = view
        finally:
            self._put_back_after_trial(kept)
        return PassPreview(decisions=decisions, waiting=after)

    def _set_aside_for_trial(self) -> _TrialKept:
        """Swap in working copies of what a pass writes; return the originals."""
        state = self.state
        derived = {name: getattr(self, name) for name in DERIVED_WRITTEN_BY_A_PASS}
        self.state = state.copy_for_trial()
        self.leaf_queues = {leaf: queue.copy() for leaf, queue in self.leaf_queues.items()}
        self.leaf_admitted = {path: list(keys) for path, keys in self.leaf_admitted.items()}
        for name in _COPIED_FLAT:
            setattr(self, name, getattr(self, name).copy())
        usage = [
            (info, info.used, info.residual, info.zone_used) for info in state.tree.nodes.values()
        ]
        for info, used, residual, zone_used in usage:
            info.used, info.residual = dict(used), dict(residual)
            info.zone_used = {zone: dict(amounts) for zone, amounts in zone_used.items()}
        return state, derived, usage

    def _put_back_after_trial(self, kept: _TrialKept) -> None:
        state, derived, usage = kept
        self.state = state
        for name, value in derived.items():
            setattr(self, name, value)
        for info, used, residual, zone_used in usage:
            info.used, info.residual, info.zone_used = used, residual, zone_used

    def next_wakeup(self) -> Millis | None:
        """The next instant a min-runtime protection ends, a ready deadline or a backoff
        runs out, a drain's grace is over (R15), a budget with work waiting below it resets
        or is used up by the running work (B1) or a reservation starts (N1): a pass should
        run then."""
        timed = [holds.next_drain(self.holds, self.state.now) if self.holds else None]
        timed.append(self.next_budget_change())
        if self.state.tree.overrun_leaves:
            timed.append(budget_overrun.next_release(self))
        if self.state.starving:
            timed.append(starvation.next_start(self))
        other = min((t for t in timed if t is not None), default=None)
        heap = self.state.wakeups
        while heap:
            end, seq, key = heap[0]
            if not self._wakeup_live(end, seq, key) or end <= self.state.now:
                heapq.heappop(heap)
                continue
            return Millis(end if other is None else min(end, other))
        return None if other is None else Millis(other)

    def _wakeup_live(self, end: int, seq: int, key: WorkloadKey) -> bool:
        """Whether a wakeup still waits for something: a min-runtime end (``seq`` > 0), a
        ready deadline (``-admit_seq``) or a requeue backoff's end (0) of that workload."""
        job = self.state.jobs.get(key)
        if job is None:
            return False
        if seq > 0:
            return job.state == ADMITTED and job.admit_seq == seq
        if seq < 0:
            return job.state == ADMITTED and job.admit_seq == -seq and key in self.unready
        record = job.readiness
        return job.state == PENDING and record is not None and record.not_before_ms == end

    def queues(self, head: int | None = None) -> dict[QueueName, list[QueueEntry]]:
        """Every queue with its pending workloads in order (the first ``head`` of each)."""
        return engine_queries.queues(self, head)

    def queue_counts(self) -> dict[QueueName, tuple[int, int]]:
        """``{queue: (pending, admitted)}`` in O(queues), without a view per workload."""
        return engine_queries.queue_counts(self)

    def job_state(self, key: WorkloadKey) -> JobView | None:
        """What the engine knows about one workload, or None if unknown (or deleted)."""
        return engine_queries.job_state(self, key)

    def zone_of(self, key: WorkloadKey) -> Zone | None:
        """Where a workload counts: the zone it was admitted into (Z2, Z3: maybe not its
        own), else its own; None when unknown."""
        job = self.state.jobs.get(key)
        return job.zone if job is not None else None

    def accepted_zones(self, key: WorkloadKey) -> tuple[Zone, ...]:
        """The zones a workload accepts in order: its own list (Z2) or its leaf's (Z3); empty:
        only its own zone, or unknown."""
        job = self.state.jobs.get(key)
        return job.zones if job is not None else ()

    def ready_timeout_ms(self, key: WorkloadKey) -> int:
        """The ready timeout (R10) in force for a workload where it is; 0 = off or unknown."""
        return engine_queries.ready_timeout_ms(self, key)

    def jobs(self) -> dict[WorkloadKey, JobView]:
        """Every known workload (deleted ones are gone), by key."""
        return engine_queries.jobs(self)

    def quota_used(self) -> dict[QuotaPath, dict[str, int]]:
        """Used amounts of every node of the tree in force (leaves and inner nodes)."""
        return engine_queries.quota_used(self)

    def burst_zones(self) -> frozenset[Zone]:
        """The zones the tree in force marks as burst (Z3); empty: none."""
        return self.state.tree.burst

    def quota_zones(self) -> dict[tuple[QuotaPath, Zone], tuple[dict[str, int], dict[str, int]]]:
        """Per node and zone it caps, what is used there and the cap (Z1); empty when no node
        of the tree in force caps a zone."""
        return {
            (path, zone): (dict(info.zone_used.get(zone, {})), dict(caps))
            for path, info in self.state.tree.nodes.items()
            for zone, caps in sorted(info.zone_max.items())
        }

    def quota_used_by_zone(self) -> dict[tuple[QuotaPath, Zone], dict[str, int]]:
        """``quota_used`` split by zone, for every node and every zone counted on it (reports;
        see ``engine_queries.quota_used_by_zone``)."""
        return engine_queries.quota_used_by_zone(self)

    def quota_zone_mins(self) -> dict[tuple[QuotaPath, Zone], dict[str, int]]:
        """Per node and zone it guarantees, the guarantee (Z4); empty when none does."""
        return engine_queries.quota_zone_mins(self)

    def quota_nodes(self) -> dict[QuotaPath, tuple[dict[str, int], dict[str, int]]]:
        """``(min, max)`` of every node of the tree in force, for reports."""
        return engine_queries.quota_nodes(self)

    def counted_requests(self, key: WorkloadKey) -> dict[str, int] | None:
        """What an admitted workload's admission counts; None when it is not admitted."""
        return engine_queries.counted_requests(self, key)

    def reason(self, key: WorkloadKey) -> Reason | None:
        """Why a workload is where it is now (None for admitted or finished ones)."""
        return engine_queries.reason(self, key)

    def reason_now(self, key: WorkloadKey) -> Reason | None:
        """Why a workload waits, worked out from the state as it is now (no pass needed)."""
        return engine_queries.reason_now(self, key)

    def reserved_from(self, key: WorkloadKey) -> Millis | None:
        """When the starvation guard (N1) starts reserving room for the pending ``key``,
        passed over by later admissions, while that is still ahead; else None."""
        return starvation.reserved_from(self, key)

    def admission_shortfall(
        self, key: WorkloadKey, quota: QuotaPath, requests: dict[str, int]
    ) -> Reason | None:
        """What stops ``requests`` on ``quota`` now, as the ledger checks it; None if they fit."""
        return engine_queries.admission_shortfall(self, key, quota, requests)
