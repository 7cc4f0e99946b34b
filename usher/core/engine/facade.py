"""The decision engine: folds events into state and runs decision passes (R1-R7, C1-C3).

What it does: ``Engine.apply(event, now)`` folds a cluster event or a decision made elsewhere
into the state; ``Engine.decide(now)`` runs one decision pass (cross-queue interleave,
Round/Block, reclaim, within-quota preemption, min runtime) and returns its decisions;
``Engine.preview_pass(now)`` says what a pass would decide without deciding it; the query
methods explain every workload's state and reason. The engine is the façade over its parts:
``engine_state`` (the durable state, what a snapshot stores; ``rebuild_derived`` recomputes
the rest), ``decision_pass`` (one pass), ``policy`` (what Round and Block change),
``reclaim_search`` (victims) and ``engine_queries`` (read-side answers); it keeps the
accounting, the folding of inputs, and the derived indexes and caches.
What it must never do: read a clock, draw random numbers, perform I/O, or iterate an
unordered collection where the order could reach a decision. Time only comes in as ``now``.
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from math import gcd
from typing import TypeVar

import msgspec

from schemas import (
    Admitted,
    Decision,
    Inadmissible,
    Millis,
    NodeHeld,
    NodeName,
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
    ReleaseCause,
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
from usher.core.engine.decision_pass import (
    DecisionPass,
    LeafOffer,
    OfferKey,
    Share,
    combine_lowest,
    lowest,
)
from usher.core.engine.policy import seam_for
from usher.core.engine.queries import JobView as JobView
from usher.core.engine.queries import QueueEntry as QueueEntry
from usher.core.intake.workload import observed_errors
from usher.core.kinds.frozen import grew
from usher.core.model import reasons
from usher.core.model.config import EngineConfig, ReadinessPolicy
from usher.core.rules import budgets, fairshare, holds, readiness, retry
from usher.core.rules.arbitration import first_shortfall, quota_exceeded
from usher.core.rules.reclaim import within_guarantee
from usher.core.rules.retry import RetryLink, RetryPolicy
from usher.core.state.durable import EngineState, NodeCapacity
from usher.core.state.indexed import (
    ADMITTED,
    FINISHED,
    INADMISSIBLE,
    PENDING,
    UNMAPPED,
    Job,
    Placement,
    Queue,
    QuotaNodeInfo,
    Shape,
    SortKey,
    StopGroup,
    TreeIndex,
    VictimKey,
    remove_sorted,
    shape_of,
    shape_with,
    total_requests,
)
from usher.core.tree import budget_spec, zone_quota
from usher.core.tree.quota_tree import path_nodes, validate_tree
from usher.core.tree.zone_burst import tree_accepted, try_order
from usher.core.tree.zone_fallback import passed_over, zone_choice

_K = TypeVar("_K", QuotaPath, Zone)

_ZERO_SHARE: Share = (0, 0.0, 0, 1)
_INFINITE_SHARE: Share = (1, 0.0, 0, 1)


class PassPreview(msgspec.Struct, frozen=True, kw_only=True):
    """What a pass would do, asked without running it (``Engine.preview_pass``)."""

    decisions: list[Decision]
    """The decisions, in the order ``decide`` would return them."""
    waiting: dict[WorkloadKey, JobView]
    """Every workload that waited before the pass, as the pass would leave it."""


_COPIED_ITEM_BY_ITEM: tuple[str, ...] = ("_queues", "_leaf_admitted")
"""Derived containers a pass writes whose items are mutable: copied item by item."""

_COPIED_FLAT: tuple[str, ...] = (
    "_outside",
    "_pod_fit_cache",
    "_stopping",
    "_pass_admitted",
    "_shapes",
    "_pod_lists",
    "_names",
    "_share_cache",
    "_dirty",
    "_low",
    "_leaf_potential",
    "_potential",
    "_offer_keys",
    "_admit_offers",
    "_potential_offers",
    "_timed_offers",
    "_unready",
    "_grown",
    "_budget_stops",
    "_budget_seen",
)
"""Derived containers a pass writes whose items are immutable: a flat copy is a copy."""

DERIVED_WRITTEN_BY_A_PASS: tuple[str, ...] = (*_COPIED_ITEM_BY_ITEM, *_COPIED_FLAT)
"""Engine attributes besides ``state`` that a pass may write: what ``preview_pass`` sets
aside (with ``state`` itself and the tree's per-node usage)."""

READ_BY_A_PASS: tuple[str, ...] = (
    "config",
    "_policy",
    "_class_users",
    "_zone_cap",
    "_holds",
    "_held_leaves",
)
"""Engine attributes besides ``state`` a pass only reads (the tests check every attribute
is classified)."""

_TrialKept = tuple[
    EngineState,
    dict[str, object],
    list[tuple[QuotaNodeInfo, dict[str, int], dict[str, int], dict[Zone, dict[str, int]]]],
]
"""What ``preview_pass`` set aside: the state, the derived attributes, each node's usage."""


class Engine:
    """Pure, deterministic admission and preemption core. Same inputs, same decisions."""

    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config if config is not None else EngineConfig()
        self._policy = seam_for(self.config.policy)
        self.state = EngineState(self.config)
        """What a snapshot stores; everything below is derived from it (``rebuild_derived``)."""
        self._queues: dict[QuotaPath, Queue] = {}
        self._leaf_admitted: dict[QuotaPath, list[VictimKey]] = {}
        """Admitted workloads per recorded leaf path, sorted in reclaim order."""
        self._outside: dict[WorkloadKey, None] = {}
        """Unmapped and inadmissible workloads, re-examined when the tree or nodes change."""
        self._class_users: dict[str, dict[WorkloadKey, None]] = {}
        self._zone_cap: dict[Zone, dict[str, int]] = {}
        self._pod_fit_cache: dict[tuple[Zone, Shape], int] = {}
        self._stopping: dict[WorkloadKey, WorkloadKey] = {}
        """Each victim not yet seen stopped -> its preemptor."""
        self._pass_admitted: set[WorkloadKey] = set()
        """Admitted by the running pass: never offered as a victim in it (ADMISSION-RULES R6)."""
        self._shapes: dict[Shape, Shape] = {}
        self._pod_lists: dict[tuple[Shape, ...], tuple[Shape, ...]] = {}
        self._names: dict[str, str] = {}
        """One string object per namespace, zone and priority class name (per workload, each
        decoded event brings its own copy): memory per pending workload (issue 16)."""
        self._share_cache: dict[QuotaPath, Share] = {}
        self._dirty: set[QuotaPath] = set()
        self._low: dict[QuotaPath, dict[str, int] | None] = {}
        self._leaf_potential: dict[QuotaPath, int] = {}
        self._potential: dict[QuotaPath, int] = {}
        self._offer_keys: dict[QuotaPath, LeafOffer] = {}
        """Each waiting leaf's first candidate, its interleave key and whether the leaf could
        preempt, kept between passes and recomputed only for leaves that changed (dirty)."""
        self._admit_offers: list[tuple[OfferKey, QuotaPath]] = []
        self._potential_offers: list[tuple[OfferKey, QuotaPath]] = []
        self._timed_offers: set[QuotaPath] = set()
        """Heaps of the offers above, split by whether the leaf could preempt: a pass starts
        from copies of both instead of a key per waiting leaf, and drops the first once the
        root is full. An entry is current while ``_offer_keys`` holds its key (lazy removal)."""
        self._unready: dict[WorkloadKey, int] = {}
        """Admitted workloads whose ready deadline runs -> that deadline (R10)."""
        self._grown: dict[WorkloadKey, None] = {}
        """Admitted workloads seen asking more than their admission counts (R16)."""
        self._holds: dict[QuotaPath, holds.HoldRecord] = {}
        """The hold or drain governing each held node, whichever its source (R14/R15)."""
        self._held_leaves: dict[QuotaPath, holds.HoldRecord] = {}
        """Each leaf below a held node -> the hold nearest to it: it admits nothing new."""
        self._budget_stops: dict[QuotaPath, budgets.BudgetStatus] = {}
        """Each leaf below a spent budget -> the one governing it (``budgets.nearest_stop``),
        as of the last ``refresh_budgets`` (B1)."""
        self._budget_seen: dict[str, tuple[int, int]] = {}
        """``at``: the (now, version) ``_budget_stops`` was computed for; the same pair
        computes the same stops, so history queries asking per workload compute them once."""

    def rebuild_derived(self) -> None:
        """Recompute everything besides ``state`` from it (after a snapshot is restored).

        The queues, the per-leaf reclaim candidates, the outside set, the users of each
        priority class, zone capacity, each stopping victim's preemptor and every residual of
        the stop groups; shapes are interned again. The pruning data is recomputed lazily by
        the next pass, as after a new tree. ValueError if the state contradicts itself.
        """
        state = self.state
        tree = state.tree
        self._queues = {
            leaf: Queue(tree.nodes[leaf].queue or QueueName(leaf), leaf) for leaf in tree.leaves
        }
        self._rebuild_job_indexes()
        self._zone_cap = {zone: _zone_capacity(nodes) for zone, nodes in state.nodes.items()}
        for info in tree.nodes.values():
            info.residual = {}
        self._recount_zone_quota()
        self._stopping = {}
        for preemptor, group in state.stops.items():
            if not group.victims:
                raise ValueError(f"stop group of {preemptor} has no victims")
            for victim, (_, shape, _) in group.victims.items():
                self._stopping[victim] = preemptor
                self._intern(shape)
            if group.hold is not None:
                self._intern(group.hold[1])
            # ``used`` already counts the residuals: only their split is recomputed.
            group.residual = self._node_residual(group)
            group.zone_residual = self._zone_residual(group)
            for path, amounts in group.residual.items():
                _shift(tree.nodes[path].residual, amounts, 1)
        for _, shape, _ in state.lingering.values():
            self._intern(shape)
        for _, shape, _, _ in state.reclaim_failed:
            self._intern(shape)
        self._pod_fit_cache = {}
        self._pass_admitted = set()
        self._share_cache = {}
        self._low = {}
        self._leaf_potential = {}
        self._potential = {}
        self._offer_keys = {}
        self._admit_offers = []
        self._potential_offers = []
        self._timed_offers = set()
        self._dirty = set(tree.leaves)
        self._refresh_holds()
        # Every leaf is dirty already, and the version is the snapshot's: no refresh's bump.
        self._budget_stops = self._spent_budget_stops()
        self._budget_seen = {}
        self._unready = {
            key: job.readiness.deadline_ms
            for key, job in state.jobs.items()
            if job.state == ADMITTED and job.readiness is not None and job.readiness.deadline_ms
        }
        self._grown = {
            key: None for key, job in state.jobs.items() if job.state == ADMITTED and job.grown
        }

    def _rebuild_job_indexes(self) -> None:
        queues = self._queues
        pending: dict[QuotaPath, list[Job]] = {}
        admitted: dict[QuotaPath, list[VictimKey]] = {}
        class_users: dict[str, dict[WorkloadKey, None]] = {}
        outside: dict[WorkloadKey, None] = {}
        intern = self._intern
        for key, job in self.state.jobs.items():
            intern(job.shape)
            job.fit_shape = intern(job.fit_shape)
            intern(job.used_shape)
            for pod in job.pods:
                intern(pod)
            if job.priority_class is not None:
                class_users.setdefault(job.priority_class, {})[key] = None
            state = job.state
            if state == PENDING:
                if job.leaf is None or job.leaf not in queues:
                    raise ValueError(f"pending workload {key} has no queue ({job.leaf})")
                pending.setdefault(job.leaf, []).append(job)
            elif state in (UNMAPPED, INADMISSIBLE):
                outside[key] = None
            elif state == ADMITTED and job.used_path is not None:
                admitted.setdefault(job.used_path, []).append(job.victim_key)
        for leaf, members in pending.items():
            # One sort instead of an insort per workload: the same lists, in O(n log n).
            members.sort(key=_sort_key)
            queue = queues[leaf]
            queue.entries = [job.sort_key for job in members]
            groups = queue.shapes
            for job in members:
                group = groups.get(job.fit_shape)
                if group is None:
                    groups[job.fit_shape] = [job.sort_key]
                else:
                    group.append(job.sort_key)
        for keys in admitted.values():
            keys.sort()
        self._leaf_admitted = admitted
        self._class_users = class_users
        self._outside = outside

    @property
    def _tree(self) -> TreeIndex:
        """The tree in force: shorthand for ``state.tree`` (the quota shortfall reads it)."""
        return self.state.tree

    # ------------------------------------------------------------------ folding inputs

    def apply(self, event: LogEvent, now: Millis) -> list[Decision]:
        """Fold one event (or a decision made elsewhere) into the state.

        Returns only immediate decisions that need no pass (``Released`` of a finished or
        deleted admitted workload). Applying a decision the state already reflects is a no-op.
        """
        self.state.now = now
        if isinstance(event, Preempted | Requeued | Released):
            self._book_closed(event.workload)
        match event:
            case WorkloadObserved():
                self._observe(event)
            case WorkloadFinished():
                return self._finish(event)
            case WorkloadDeleted():
                return self._delete(event.workload)
            case QuotaTreeApplied():
                self._install_tree(event)
            case NodeObserved():
                self._observe_node(event)
            case NodeRemoved():
                self._remove_node(event)
            case PriorityClassObserved():
                self._set_priority_class(event.name, event.value)
            case PriorityClassDeleted():
                self._set_priority_class(event.name, None)
            case ZoneServed():
                self._serve(event.zone)
            case Admitted():
                self._apply_admitted(event)
                if self.state.tree.starvation_on:
                    # From the log too, so an engine that runs no pass (replay, explain,
                    # audit) and other zones' admissions start the clock as well (N1).
                    starvation.track(self, [event])
            case Preempted():
                self._apply_preempted(event)
            case Released():
                self._apply_released(event)
            case Requeued():
                self._apply_requeued(event)
            case Retried():
                self._apply_retried(event)
            case WorkloadRejected() | QuotaTreeRejected() | Pending() | Inadmissible() | Unmapped():
                # A rejected input changes nothing (the last valid state stays in force); the
                # other decisions carry no state change of their own.
                pass
            case PassRan():
                pass  # a record of a pass, for the audit (D4): it decides nothing
            case WorkloadProgress():
                self._progress(event)
            case NodeHeld():
                self.state.holds[event.node] = holds.from_event(event)
                self._refresh_holds()
            case NodeResumed():
                if self.state.holds.pop(event.node, None) is not None:
                    self._refresh_holds()
        return []

    def _observe(self, event: WorkloadObserved) -> None:
        if observed_errors(event):
            return  # forged: no manifest gives such values (the watcher refuses them)
        job = self.state.jobs.get(event.workload)
        if job is None:
            job = Job(event.workload, self._name(event.namespace), event.name)
            job.arrived_pass = self.state.passes
            self.state.jobs[job.key] = job
            self._fill(job, event)
            self._classify(job)
            return
        if job.state == PENDING or job.state in (UNMAPPED, INADMISSIBLE):
            # Re-observation of a waiting workload: take it out, update, put it back at the
            # place its (possibly new) priority gives it.
            self._unplace(job)
            self._fill(job, event)
            self._classify(job)
        else:
            # Admitted or finished: its usage stays as recorded; only metadata follows. An
            # admitted one keeps the size it was admitted with, which is what counts (R16).
            if job.state == ADMITTED and job.used_path is not None:
                self._forget_admitted(job)
                old_zone = job.zone
                # Sized only if never observed before (admitted from the log first).
                self._fill(job, event, sized=job.pod_count == 0)
                self._note_growth(job, event)
                if old_zone in job.zones:
                    job.zone = old_zone  # admitted into an accepted zone: it runs there (Z2)
                if job.zone != old_zone:
                    # Its pods run where they were admitted; usage follows the zone label so
                    # that the release later subtracts from the zone it was added to.
                    self._move_zone_usage(job.used_shape, old_zone, job.zone)
                    self._account_zone_quota(job.used_path, job.used_shape, old_zone, -1)
                    self._account_zone_quota(job.used_path, job.used_shape, job.zone)
                job.refresh_victim_key()
                insort(self._leaf_admitted.setdefault(job.used_path, []), job.victim_key)
            else:
                self._fill(job, event)

    def _note_growth(self, job: Job, event: WorkloadObserved) -> None:
        """An admitted job seen running while asking more than its admission counts: the
        next pass of its zone stops it (R16). Asking as much or less changes nothing (its
        admission keeps counting what it was admitted with); a suspended one is not running
        (or not yet unsuspended by its admission: a partial one's count is patched then)."""
        counted = dict(job.used_shape)
        observed = total_requests(event)
        grown = [] if event.suspended else grew(counted, observed)
        if grown:
            job.grown = reasons.grew_after_admission(grown, counted, observed)
            self._grown[job.key] = None
        else:
            job.grown = None
            self._grown.pop(job.key, None)

    def _fill(self, job: Job, event: WorkloadObserved, *, sized: bool = True) -> None:
        if job.priority_class is not None:
            self._class_users.get(job.priority_class, {}).pop(job.key, None)
        job.zone = Zone(self._name(event.zone))
        listed = tuple(Zone(self._name(zone)) for zone in event.zones)
        if not (job.state == ADMITTED and not job.listed and not listed):
            job.zones = listed  # else it keeps the tree's list it was admitted under (Z3)
        job.listed = listed
        job.priority_class = (
            None if event.priority_class is None else self._name(event.priority_class)
        )
        job.spec_priority = event.priority
        job.created_ms = event.created_ms
        job.quota_name = None if event.quota_name is None else self._name(event.quota_name)
        job.retry_ask = event.retry
        seconds = event.max_runtime_seconds
        job.max_runtime_ms = None if seconds is None else seconds * 1000
        link = self.state.retries.get(job.key)
        if link is not None:
            # A retry keeps its job's place: the first attempt's creation (R12).
            job.created_ms = Millis(link.first_created_ms)
        if sized:
            self._size(job, event)
        if job.priority_class is not None:
            self._class_users.setdefault(job.priority_class, {})[job.key] = None
        job.priority = self._resolve_priority(job)
        job.refresh_sort_key()

    def _size(self, job: Job, event: WorkloadObserved) -> None:
        """Its request, pods and partial-admission bounds (R11), as the event says."""
        pods: list[Shape] = []
        for pod_set in event.pod_sets:
            if pod_set.count > 0:
                pods.append(self._intern(shape_of(pod_set.requests)))
        job.shape = self._intern(shape_of(total_requests(event)))
        pod_list = tuple(sorted(set(pods)))
        job.pods = self._pod_lists.setdefault(pod_list, pod_list)
        job.pod_count = sum(p.count for p in event.pod_sets if p.count > 0)
        job.scalable = None
        for pod_set in event.pod_sets:
            least = pod_set.min_count
            if least is not None and 0 < least < pod_set.count:
                pod = self._intern(shape_of(pod_set.requests))
                job.scalable = (pod_set.name, pod, pod_set.count, least)
        job.fit_shape = (
            job.shape
            if job.scalable is None
            else self._intern(shape_with(job.shape, job.scalable, job.scalable[3]))
        )

    def _intern(self, shape: Shape) -> Shape:
        # One tuple object per distinct shape: 100k workloads share a handful of them.
        return self._shapes.setdefault(shape, shape)

    def _name(self, name: str) -> str:
        return self._names.setdefault(name, name)

    def _resolve_priority(self, job: Job) -> int:
        if job.priority_class is not None and job.priority_class in self.state.priority_values:
            return self.state.priority_values[job.priority_class]
        return job.spec_priority if job.spec_priority is not None else 0

    def _set_priority_class(self, name: str, value: int | None) -> None:
        if value is None:
            self.state.priority_values.pop(name, None)
        else:
            self.state.priority_values[name] = value
        for key in list(self._class_users.get(name, {})):
            job = self.state.jobs[key]
            priority = self._resolve_priority(job)
            if priority == job.priority:
                continue
            if job.state == PENDING and job.leaf is not None:
                queue = self._queues[job.leaf]
                self._note_shapes(job.leaf, queue.remove(job))
                job.priority = priority
                job.refresh_sort_key()
                self._note_shapes(job.leaf, queue.add(job))
            elif job.state == ADMITTED and job.used_path is not None:
                self._reprioritise_admitted(job, priority)
            else:
                job.priority = priority
                job.refresh_sort_key()
        self.state.version += 1

    def _finish(self, event: WorkloadFinished) -> list[Decision]:
        job = self.state.jobs.get(event.workload)
        if job is None or job.state == FINISHED:
            return []
        quota = job.used_path if job.state == ADMITTED else None
        ran_on = (quota, job.zone) if quota is not None else self._stopping_on(job.key)
        if not event.succeeded and ran_on is not None:
            self._note_failure(job, *ran_on, event)
        released = self._release(job, "Finished" if event.succeeded else "Failed")
        if not released:
            self._unplace(job)
        if quota is not None:
            job.leaf = quota  # a finished workload is shown in the queue it ran from
        job.state = FINISHED
        return released

    def _stopping_on(self, key: WorkloadKey) -> tuple[QuotaPath, Zone] | None:
        """Where a victim not seen stopped yet still runs (R7); None if it is no such victim.

        Its attempt was admitted and its pods run until they are seen stopped: one that fails
        meanwhile (OOM-killed while its preemption is on its way) failed an admitted attempt,
        and its job is over for Kubernetes, so it needs its ``Retried`` (R12) like any other.
        """
        preemptor = self._stopping.get(key)
        group = self.state.stops.get(preemptor) if preemptor is not None else None
        where = group.victims.get(key) if group is not None else None
        return (where[0], where[2]) if where is not None else None

    def _note_failure(
        self, job: Job, quota: QuotaPath, zone: Zone, event: WorkloadFinished
    ) -> None:
        """A failed admitted attempt of a job with retries waits for its ``Retried`` (R12)."""
        info = self.state.tree.nodes.get(quota)
        policy = info.retry if info is not None else RetryPolicy()
        queue = info.queue if info is not None and info.queue is not None else QueueName("")
        failure = retry.failure_of(
            self.state.retries.get(job.key),
            job.key,
            job.created_ms,
            (zone, queue, quota),
            policy,
            job.retry_ask,
            event.terminations,
        )
        if failure is not None:
            self.state.failures[job.key] = failure

    def _retry_failed(self, decisions: list[Decision]) -> None:
        """Decide what follows every failed attempt of this engine's zones (R12, R13)."""
        for key, failure in list(self.state.failures.items()):
            if not self._decides(failure.zone):
                continue
            decision = retry.retried(key, failure)
            self._apply_retried(decision)
            decisions.append(decision)

    def _apply_retried(self, decision: Retried) -> None:
        """The attempt ``decision.workload`` is answered; the next one it names is linked to
        its job's first attempt and keeps its place (R12). Only a ``Retried`` links: a job that
        merely carries the annotations gets no place of another."""
        failure = self.state.failures.pop(decision.workload, None)
        if decision.job is None or decision.job in self.state.retries:
            return
        # The failure before it (on the log before it) knows the first attempt's creation,
        # even if the failed job was deleted since.
        first_created = failure.first_created_ms if failure is not None else self.state.now
        self.state.retries[decision.job] = RetryLink(
            decision.first, first_created, decision.attempt + 1
        )
        self.state.version += 1

    def _delete(self, key: WorkloadKey) -> list[Decision]:
        job = self.state.jobs.get(key)
        if job is None:
            return []
        released = self._release(job, "Deleted")
        if not released and job.state != FINISHED:
            self._unplace(job)
        if job.priority_class is not None:
            self._class_users.get(job.priority_class, {}).pop(key, None)
        self.state.announce.pop(key, None)
        # A job created again under this name later is a new job: it gets no old place (R12).
        self.state.retries.pop(key, None)
        del self.state.jobs[key]
        return released

    def _release(self, job: Job, cause: ReleaseCause) -> list[Decision]:
        """Free what an admitted (or held) workload uses; the ``Released`` decision if any.

        In a running system the usage lingers until the ledger's ``Released`` is on the log
        (R7): the ledger frees it only once it has read the same event, and every engine must
        count what the ledger counts, or it judges borrowing and room on other numbers.
        """
        if job.held:
            if self.config.instant_release:
                self._drop_hold(job)
            else:
                self._linger(job)
        if job.state != ADMITTED or job.used_path is None:
            return []
        quota, shape = job.used_path, job.used_shape
        if self.config.instant_release:
            self._unadmit(job)
        else:
            self._linger(job)
        return [Released(workload=job.key, quota=quota, requests=dict(shape), cause=cause)]

    def _linger(self, job: Job) -> None:
        """Out of the workload, still counted: its usage waits for the ledger's ``Released``."""
        assert job.used_path is not None
        if job.state == ADMITTED:
            self._book_on_close(job)
            self._forget_admitted(job)
            job.state = UNMAPPED  # out of every place until the caller finishes or deletes it
        self.state.preemptors.pop(job.key, None)
        self.state.held.pop(job.key, None)
        self.state.lingering[job.key] = (job.used_path, job.used_shape, job.zone)
        self._unready.pop(job.key, None)
        self._grown.pop(job.key, None)
        job.grown = None
        job.used_path = None
        job.used_shape = ()
        self._back_to_first_zone(job)
        job.held = False  # a held workload stays where it waits; the caller takes it out
        self.state.version += 1

    def _end_linger(self, key: WorkloadKey) -> bool:
        where = self.state.lingering.pop(key, None)
        if where is None:
            return False
        self._unaccount(*where)
        self.state.version += 1
        return True

    # ------------------------------------------------------------------ readiness (R10)

    def _progress(self, event: WorkloadProgress) -> None:
        """Pod counts of an admitted workload; its deadline stops once all are ready."""
        job = self.state.jobs.get(event.workload)
        if job is None or job.state != ADMITTED or job.readiness is None:
            return
        job.readiness = readiness.progressed(job.readiness, event.ready, event.total)
        if not job.readiness.deadline_ms:
            self._unready.pop(job.key, None)

    def _requeue_unready(self, decisions: list[Decision]) -> None:
        """Requeue every admitted workload of this engine's zones past its ready deadline."""
        now = self.state.now
        due = sorted((end, key) for key, end in self._unready.items() if end <= now)
        for _, key in due:
            job = self.state.jobs[key]
            if not self._decides(job.zone):
                continue
            decision = self._requeue_decision(job)
            self._apply_requeued(decision)
            decisions.append(decision)

    def _drain_due(self, decisions: list[Decision]) -> None:
        """Preempt the admitted workloads of this engine's zones below every drain whose grace
        has run out (R15): each is its own preemptor, nobody is admitted in its stead."""
        due = holds.drains_due(self._holds, self.state.now)
        if not due:
            return
        for path in sorted(self._leaf_admitted):
            record = holds.hold_over(self._holds, path)
            if record is None or record.drain_at_ms is None or record.drain_at_ms > self.state.now:
                continue
            for victim_key in list(self._leaf_admitted.get(path, ())):
                job = self.state.jobs[victim_key[3]]
                if not self._decides(job.zone):
                    continue
                info = self.state.tree.nodes.get(path)
                queue = info.queue if info is not None and info.queue is not None else None
                decision = Preempted(
                    workload=job.key,
                    queue=queue or QueueName(""),
                    quota=path,
                    preemptor=job.key,
                    reason=record.drain_reason(),
                )
                self._apply_drained(decision)
                decisions.append(decision)

    def _stop_grown(self, decisions: list[Decision]) -> None:
        """Stop each admitted workload of this engine's zones that grew after its admission
        (R16): like a drain's preemption (R15) it is its own preemptor, counted until its
        pods are seen stopped, then it waits again at the size it now asks for."""
        for key in sorted(self._grown):
            job = self.state.jobs[key]
            if not self._decides(job.zone) or job.used_path is None or job.grown is None:
                continue
            info = self.state.tree.nodes.get(job.used_path)
            queue = info.queue if info is not None and info.queue is not None else None
            decision = Preempted(
                workload=job.key,
                queue=queue or QueueName(""),
                quota=job.used_path,
                preemptor=job.key,
                reason=job.grown,
            )
            self._apply_drained(decision)
            decisions.append(decision)

    def _requeue_decision(self, job: Job) -> Requeued:
        """The requeue of ``job`` now: which attempt it was and when it may be tried again."""
        assert job.used_path is not None and job.readiness is not None
        policy = self._readiness(job.used_path)
        record = job.readiness
        attempt = record.requeues + 1
        final = attempt >= policy.max_attempts
        wait = None if final else policy.backoff_ms(attempt)
        now = self.state.now
        info = self.state.tree.nodes.get(job.used_path)
        queue = info.queue if info is not None and info.queue is not None else QueueName("")
        return Requeued(
            workload=job.key,
            queue=queue,
            quota=job.used_path,
            zone=job.zone,
            requests=dict(job.used_shape),
            ready=record.ready,
            total=record.total,
            attempt=attempt,
            max_attempts=policy.max_attempts,
            retry_after_ms=None if wait is None else Millis(now + wait),
            reason=reasons.pods_not_ready(
                record.ready,
                record.total,
                now - record.started_ms,
                attempt,
                policy.max_attempts,
                wait,
            ),
        )

    def _apply_requeued(self, decision: Requeued) -> None:
        """Evict an admitted workload for readiness: it waits at its place again (R10).

        Its usage leaves at once in scenarios; in a running system it stops like a preempted
        victim that is its own preemptor (a stop group with no hold, R7) -- as the ledger
        holds it: counted, not claimed -- until the ledger's ``Released``, and the workload
        is not offered before that either.
        """
        job = self.state.jobs.get(decision.workload)
        if job is None or job.state != ADMITTED or job.used_path is None:
            return
        placement: Placement = (job.used_path, job.used_shape, job.zone)
        self._unadmit(job)
        self._begin_stop(job.key, job.key, placement)
        record = job.readiness if job.readiness is not None else readiness.Readiness()
        job.readiness = readiness.requeued(
            record, decision.attempt, decision.retry_after_ms, decision.reason
        )
        self._classify(job)
        if job.state == INADMISSIBLE and decision.retry_after_ms is None:
            # The last Requeued says it (and reaches the log through the ledger): a separate
            # Inadmissible from the dequeuer could reach the log before it.
            self.state.announce.pop(job.key, None)
        if job.state == PENDING and decision.retry_after_ms is not None:
            heapq.heappush(self.state.wakeups, (decision.retry_after_ms, 0, job.key))
        self.state.version += 1

    # ------------------------------------------------------------------ decisions made elsewhere

    def _apply_admitted(self, decision: Admitted) -> None:
        if decision.workload in self.state.lingering:
            # This engine admitted it and saw it end before the ledger's grant came back: the
            # lingering usage is that very allocation (one live allocation per workload, R8).
            return
        job = self.state.jobs.get(decision.workload)
        if job is None:
            namespace, _, name = decision.workload.partition("/")
            job = Job(decision.workload, namespace, name)
            job.zone = decision.zone
            job.priority = decision.priority
            job.created_ms = self.state.now
            job.shape = self._intern(shape_of(decision.requests))
            job.fit_shape = job.shape
            job.refresh_sort_key()
            job.arrived_pass = self.state.passes
            job.state = UNMAPPED  # placeholder: not in any queue yet
            self.state.jobs[job.key] = job
        elif job.state in (ADMITTED, FINISHED):
            if job.state == ADMITTED and job.readiness is not None:
                self._restart_ready_deadline(job)
            return
        else:
            self._unplace(job)
        if job.held:
            self._drop_hold(job)
        if decision.zone in job.zones:
            job.zone = decision.zone  # a fallback admission counts where it runs (Z2)
        shape = self._intern(shape_of(decision.requests))
        self._admit(job, decision.quota, shape, pods=self._admitted_pods(job, decision))

    def _admitted_pods(self, job: Job, decision: Admitted) -> int | None:
        """Pods of a partial admission (R11), for the readiness count; None: all of them."""
        if decision.pod_counts is None or job.scalable is None:
            return None
        name, _, count, _ = job.scalable
        pods = decision.pod_counts.get(name)
        return None if pods is None else job.pod_count - (count - pods)

    def _restart_ready_deadline(self, job: Job) -> None:
        """The ledger's grant of an admission this engine made: the ready deadline runs from
        it, as every engine replaying the log (and the audit) counts it (R10). A preemptor's
        grant comes once its last victim stopped."""
        record = job.readiness
        assert job.used_path is not None and record is not None
        timeout = self._readiness(job.used_path).timeout_ms
        if timeout <= 0 or (record.total and record.ready >= record.total):
            return
        deadline = self.state.now + timeout
        if job.key in self._unready and deadline <= record.deadline_ms:
            return
        job.readiness = readiness.restarted(record, self.state.now, timeout)
        self._unready[job.key] = deadline
        heapq.heappush(self.state.wakeups, (deadline, -job.admit_seq, job.key))

    def _apply_preempted(self, decision: Preempted) -> None:
        if decision.preemptor == decision.workload:
            self._apply_drained(decision)
            return
        if self._stopping.get(decision.workload) == decision.workload:
            # Requeued here, preempted by the ledger before it read that (R10): its usage
            # now counts as the preemptor's group's, as in the ledger.
            stopping = self.state.stops[decision.workload].victims[decision.workload]
            self._end_stop(decision.workload)
            self._hold_for(decision.preemptor)
            self._begin_stop(decision.preemptor, decision.workload, stopping)
            return
        lingering = self.state.lingering.pop(decision.workload, None)
        if lingering is not None:
            # It finished (or was deleted) before the ledger read that: the ledger preempted
            # what it still held. Its usage now counts as the group's, as in the ledger.
            self._unaccount(*lingering)
            self._hold_for(decision.preemptor)
            self._begin_stop(decision.preemptor, decision.workload, lingering)
            return
        job = self.state.jobs.get(decision.workload)
        if job is None or job.state != ADMITTED:
            return
        assert job.used_path is not None
        placement: Placement = (job.used_path, job.used_shape, job.zone)
        self._unadmit(job)
        self._classify(job)
        self._set_note(job, decision.reason)
        self._hold_for(decision.preemptor)
        self._begin_stop(decision.preemptor, job.key, placement)

    def _apply_drained(self, decision: Preempted) -> None:
        """Preempt an admitted workload for a drain (R15): it waits at its place again.

        Nobody is admitted in its stead, so it is its own preemptor: it stops like a workload
        requeued for readiness (a stop group with no hold, R7), counted until the ledger's
        ``Released``; its queue admits nothing before the drain is lifted anyway (R14).
        """
        job = self.state.jobs.get(decision.workload)
        if job is None or job.state != ADMITTED or job.used_path is None:
            return
        placement: Placement = (job.used_path, job.used_shape, job.zone)
        self._unadmit(job)
        self._classify(job)
        self._set_note(job, decision.reason)
        self._begin_stop(job.key, job.key, placement)
        self.state.version += 1

    def _hold_for(self, key: WorkloadKey) -> None:
        """A reclaim decided elsewhere: the freed capacity is held for its preemptor.

        The ledger holds it the same way until the preemptor's ``Admitted`` arrives, so no
        engine offers that capacity to anyone else meanwhile.
        """
        job = self.state.jobs.get(key)
        if job is None or job.held or job.state != PENDING or job.leaf is None:
            return
        job.used_path = job.leaf
        job.used_shape = job.shape
        job.held = True
        self.state.held[key] = None
        self._account(job.leaf, job.shape, job.zone)
        self.state.version += 1

    def _apply_released(self, decision: Released) -> None:
        # The ledger freed it (R7): a victim seen stopped, or a finished, deleted or
        # preempted workload whose usage lingered until now; a preemptor gone for good.
        requeued = self._stopping.get(decision.workload) == decision.workload
        self._end_stop(decision.workload)
        self._preemptor_gone(decision.workload)
        if requeued and decision.cause == "Deleted":
            # Requeued here (R10) and deleted: this very workload is gone. It is still known
            # only when the ledger's Admitted reached the log after its deletion (applied
            # again until this Released, R8): that admission ends, nothing waits in a queue.
            self._end_linger(decision.workload)
            job = self.state.jobs.get(decision.workload)
            if job is not None:
                if job.state == ADMITTED:
                    self._unadmit(job)
                self._delete(job.key)
            return
        if self._end_linger(decision.workload):
            return  # a workload of the same name may exist again: it is not this one
        job = self.state.jobs.get(decision.workload)
        if job is None or job.state != ADMITTED:
            return
        self._unadmit(job)
        if decision.cause == "Deleted":
            self._delete(job.key)
        elif decision.cause == "Preempted":
            self._classify(job)
        else:
            job.state = FINISHED

    def revert_admission(self, key: WorkloadKey, reason: Reason) -> None:
        """The ledger refused a reservation this engine made: the workload waits again.

        It keeps its place (its order key never changed). A preemptor keeps the capacity its
        victims freed as a hold until it is admitted, so nobody else takes it.
        """
        job = self.state.jobs.get(key)
        if job is None or job.state != ADMITTED:
            return
        if key in self.state.preemptors:
            self.state.preemptors.pop(key)
            self._forget_admitted(job)
            job.state = PENDING
            job.held = True
            self.state.held[key] = None
            self._place_pending_again(job)
        else:
            self._unadmit(job, held=False)
            self._classify(job)
        self._set_note(job, reason)

    def revert_preemption(
        self, preemptor: WorkloadKey, victims: Sequence[Preempted], reason: Reason
    ) -> None:
        """The preemptor or the ledger refused a reclaim this engine made: undo it.

        The victims are admitted again where they were (keeping their admission time, so the
        reclaim order and min-runtime stay as they were) and the preemptor waits again, with
        no hold: the reclaim did not happen. Exact because a pass never offers as a victim a
        workload it admitted itself (ADMISSION-RULES R6): every victim was admitted before it.
        """
        group = self.state.stops.get(preemptor)
        # What each victim was admitted with (a partial admission holds less than it asks).
        placed = {v: where[1] for v, where in group.victims.items()} if group else {}
        for decision in victims:
            self._end_stop(decision.workload)
        for decision in victims:
            victim = self.state.jobs.get(decision.workload)
            if victim is None or victim.state == ADMITTED or victim.state == FINISHED:
                continue
            if victim.held:
                self._drop_hold(victim)
            self._unplace(victim)
            admitted_ms, admit_seq = victim.admitted_ms, victim.admit_seq
            record = victim.readiness
            self._admit(victim, decision.quota, placed.get(victim.key, victim.shape))
            self._forget_admitted(victim)
            victim.admitted_ms, victim.admit_seq = admitted_ms, admit_seq
            # Admitted again as it was: its readiness deadline and counts too (R10).
            victim.readiness = record
            self._unready.pop(victim.key, None)
            if record is not None and record.deadline_ms:
                self._unready[victim.key] = record.deadline_ms
            victim.refresh_victim_key()
            insort(self._leaf_admitted.setdefault(decision.quota, []), victim.victim_key)
            victim.note = None
        job = self.state.jobs.get(preemptor)
        if job is None or job.state != ADMITTED:
            return
        self._unadmit(job)
        self._classify(job)
        self._set_note(job, reason)

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

    def check_drain(self, key: WorkloadKey, now: Millis) -> Reason | None:
        """Whether preempting ``key`` for a drain is justified at ``now`` (R15): it is
        admitted below a drained node whose grace has run out, or it grew after its
        admission (R16). None when it is."""
        job = self.state.jobs.get(key)
        if job is None or job.state != ADMITTED or job.used_path is None:
            state = "unknown" if job is None else job.state
            return reasons.stale_view(key, f"{key} is {state}, not admitted")
        if job.grown is not None:
            return None
        record = holds.hold_over(self._holds, job.used_path)
        if record is None or record.drain_at_ms is None:
            return reasons.stale_view(key, f"no drain is in force over {job.used_path}")
        if record.drain_at_ms > now:
            until = reasons.format_moment(record.drain_at_ms)
            return reasons.stale_view(key, f"the drain of {record.node} has grace until {until}")
        return None

    def reclaim_preview(self, key: WorkloadKey, now: Millis) -> tuple[str | None, list[Preempted]]:
        """Dry run of reclaim for a waiting workload: whom a pass at ``now`` would preempt.

        ``(None, victims)`` or ``(why not, [])`` (see ``reclaim_search.reclaim_preview``);
        nothing is decided.
        """
        return reclaim_search.reclaim_preview(self, key, now)

    def _place_pending_again(self, job: Job) -> None:
        """Put a held preemptor back in its queue (its usage stays counted as the hold)."""
        job.state = UNMAPPED  # so that _classify sees it out of every place
        self._classify(job)
        if job.state != PENDING:
            self._drop_hold(job)
        elif job.leaf is not None:
            self._dirty.add(job.leaf)

    def _drop_hold(self, job: Job) -> None:
        if job.used_path is not None:
            self._unaccount(job.used_path, job.used_shape, job.zone)
        job.used_path = None
        job.held = False
        self.state.held.pop(job.key, None)
        self.state.version += 1

    def _set_note(self, job: Job, reason: Reason) -> None:
        # A note explains the workload until the next pass looks at it again.
        job.note = reason
        job.note_pass = self.state.passes

    # ------------------------------------------------------------------ tree and nodes

    def _install_tree(self, event: QuotaTreeApplied) -> None:
        """A new valid tree: never evicts; waiting workloads are mapped again. A tree that T1
        refuses (published on the log without the watcher's validation) changes nothing: the
        tree in force stays, on every replica alike."""
        if validate_tree(event.root):
            return
        self.state.tree = TreeIndex(event.root, self.config)
        self._queues = {
            leaf: Queue(self.state.tree.nodes[leaf].queue or QueueName(leaf), leaf)
            for leaf in self.state.tree.leaves
        }
        self._low = {}
        self._leaf_potential = {}
        self._potential = {}
        self._share_cache = {}
        self._offer_keys = {}
        self._admit_offers = []
        self._potential_offers = []
        self._timed_offers = set()
        self._dirty = set(self.state.tree.leaves)
        self.state.tree_holds = holds.tree_holds(event.root, self.state.tree_holds, self.state.now)
        self._refresh_holds()
        for job in self.state.jobs.values():
            if job.used_path is not None:
                # Admitted (or held) usage keeps counting on the nodes of its recorded path
                # that still exist.
                self._account_quota(job.used_path, job.used_shape)
        for path, shape, _ in self.state.lingering.values():
            self._account_quota(path, shape)
        self._recount_zone_quota()
        for group in self.state.stops.values():
            # Stopping victims keep counting on the nodes of their paths that still exist.
            group.residual = {}
            self._account_residual(group, self._node_residual(group), group.zone_residual)
        for job in list(self.state.jobs.values()):
            if job.state in (PENDING, UNMAPPED, INADMISSIBLE):
                job.state = UNMAPPED
                self._outside.pop(job.key, None)
                self._classify(job)
                if job.held and job.state != PENDING:
                    self._drop_hold(job)
        self.state.version += 1

    def _refresh_holds(self) -> None:
        """Recompute which nodes and leaves are held (R14) after an order or a new tree; a
        leaf whose hold changed offers anew, and reclaim's memo is stale (R15 may preempt)."""
        in_force = holds.in_force(self.state.holds, self.state.tree_holds)
        leaves = holds.held_leaves(in_force, self.state.tree.leaves)
        changed = {
            leaf
            for leaf in self._held_leaves.keys() | leaves.keys()
            if self._held_leaves.get(leaf) != leaves.get(leaf)
        }
        if in_force != self._holds or changed:
            self.state.version += 1
        self._holds, self._held_leaves = in_force, leaves
        self._dirty.update(changed)

    def holds_in_force(self) -> dict[QuotaPath, holds.HoldRecord]:
        """The hold or drain governing each held node (R14/R15), by path."""
        return dict(self._holds)

    def hold_over(self, leaf: QuotaPath) -> holds.HoldRecord | None:
        """The hold nearest to ``leaf`` that stops its admissions, or None (R14)."""
        return self._held_leaves.get(leaf)

    # ------------------------------------------------------------------ fair share (F1)

    def _book_on_close(self, job: Job) -> None:
        """A finished or deleted workload stops counting as admitted before the ledger's
        ``Released`` (R7): its allocation interval (U1) stays open until the ledger's decision
        closes it (``_book_closed``), so the books count what usage counts."""
        assert job.used_path is not None
        self.state.closing[job.key] = budgets.Running(
            job.used_path, dict(job.used_shape), job.admitted_ms
        )

    def _book_closed(self, key: WorkloadKey) -> None:
        """The ledger's ``Preempted``, ``Requeued`` or ``Released`` closes ``key``'s interval
        now (U1): the budgets on its path and its leaf's fair book book it (B1, F1)."""
        interval = self.state.closing.pop(key, None)
        if interval is None:
            return
        found = self.state.tree.budgets
        on_path = [b for node in path_nodes(interval.path) for b in found.get(node, ())]
        if on_path:
            self.state.budget_book.close(
                on_path, interval.shape, interval.admitted_ms, self.state.now
            )
        half_life = self.config.half_life_ms
        if half_life is not None:
            self.state.fair_book.close(
                interval.path,
                dict(interval.shape),
                interval.admitted_ms,
                self.state.now,
                half_life,
            )

    def _book_fair(self, job: Job) -> None:
        """An admitted workload stops counting as admitted: its leaf's fair book folds the
        interval, decayed (F1). Nothing is kept with fair share off."""
        half_life = self.config.half_life_ms
        if half_life is None or job.used_path is None:
            return
        self.state.fair_book.close(
            job.used_path, dict(job.used_shape), job.admitted_ms, self.state.now, half_life
        )

    def decayed_usage(self, leaf: QuotaPath) -> dict[str, Decimal]:
        """``leaf``'s usage decayed to ``state.now`` (F1): its closed intervals from the fair
        book and its admitted workloads up to now; empty with fair share off."""
        half_life = self.config.half_life_ms
        if half_life is None:
            return {}
        running = [
            fairshare.Running(job.used_path, dict(job.used_shape), job.admitted_ms)
            for victim in self._leaf_admitted.get(leaf, ())
            if (job := self.state.jobs.get(victim[3])) is not None
            and job.state == ADMITTED
            and job.used_path is not None
        ] + [
            fairshare.Running(*interval)
            for interval in self.state.closing.values()
            if interval.path == leaf
        ]
        return fairshare.decayed_usage(
            self.state.fair_book, leaf, running, self.state.now, half_life
        )

    def fair_key(self, info: QuotaNodeInfo, tier: int) -> fairshare.FairKey:
        """The interleave key's fair-share element (F1): within the guarantee (tier 0), or
        with fair share off, 0 (R3's order); beyond it, the leaf's dominant decayed usage per
        weight. The running pass's own admissions started now: they add nothing yet."""
        if tier == 0 or self.config.half_life_ms is None:
            return 0
        tree = self.state.tree
        root = next(iter(tree.nodes.values()))  # the index is in pre-order: root first
        return fairshare.fair_key(
            self.decayed_usage(info.path),
            fairshare.root_capacity(root.max, root.min),
            tree.fair_weights.get(info.path, fairshare.DEFAULT_WEIGHT),
        )

    # ------------------------------------------------------------------ budgets (B1)

    def _book_budgets(self, job: Job) -> None:
        """An admitted workload stops counting as admitted: its interval closes now, and
        every budget on its path books what it accrued in the current window (U1, B1)."""
        found = self.state.tree.budgets
        if not found or job.used_path is None:
            return
        on_path = [b for node in path_nodes(job.used_path) for b in found.get(node, ())]
        if on_path:
            self.state.budget_book.close(
                on_path, dict(job.used_shape), job.admitted_ms, self.state.now
            )

    def _running(self) -> Iterator[budgets.Running]:
        """The admitted workloads below some budget: the per-leaf reclaim lists (a vanished
        leaf's too, C2) and the running pass's own admissions, not every job."""
        found = self.state.tree.budgets
        keys = {
            victim[3]
            for path, victims in self._leaf_admitted.items()
            if any(node in found for node in path_nodes(path))
            for victim in victims
        }
        keys.update(self._pass_admitted)
        for key in keys:
            job = self.state.jobs.get(key)
            if job is not None and job.state == ADMITTED and job.used_path is not None:
                yield budgets.Running(job.used_path, dict(job.used_shape), job.admitted_ms)
        yield from self.state.closing.values()  # finished, not yet released: still held (U1)

    def budget_statuses(
        self, now: Millis | None = None
    ) -> dict[budget_spec.BudgetKey, budgets.BudgetStatus]:
        """Every budget of the tree in force at ``now`` (default ``state.now``; a later one
        lets the running work accrue up to it): spent, left, window (B1)."""
        found = self.state.tree.budgets
        if not found:
            return {}
        at = self.state.now if now is None else max(now, self.state.now)
        return budgets.statuses(found, self.state.budget_book, self._running(), at)

    def refresh_budgets(self) -> None:
        """Recompute which leaves a spent budget stops, at ``state.now`` (a pass does it first;
        so do history queries, which run no pass). A leaf whose stop changed offers anew."""
        if self._budget_seen.get("at") == (self.state.now, self.state.version):
            return
        stops = self._spent_budget_stops()
        changed = {
            leaf
            for leaf in self._budget_stops.keys() | stops.keys()
            if _stop_id(self._budget_stops.get(leaf)) != _stop_id(stops.get(leaf))
        }
        if changed:
            self.state.version += 1
            self._dirty.update(changed)
        self._budget_stops = stops
        self._budget_seen["at"] = (self.state.now, self.state.version)

    def _spent_budget_stops(self) -> dict[QuotaPath, budgets.BudgetStatus]:
        """Each leaf below a spent budget at ``state.now`` -> the one governing it."""
        found = self.budget_statuses()
        stops: dict[QuotaPath, budgets.BudgetStatus] = {}
        if any(status.exhausted for status in found.values()):
            for leaf in self.state.tree.leaves:
                status = budgets.nearest_stop(found, leaf)
                if status is not None:
                    stops[leaf] = status
        return stops

    def budget_stop(self, job: Job) -> Reason | None:
        """Why a spent budget on ``job``'s path keeps it from being admitted now, or None
        (B1): ``hold`` stops everything new, ``min-only`` whatever would borrow beyond its
        leaf's ``min`` (``lower-priority`` stops nothing: it only orders, ``budget_tier``).
        A preemptor the ledger already holds capacity for goes on (R8)."""
        if job.leaf is None or job.held:
            return None
        status = self._budget_stops.get(job.leaf)
        if status is None or status.budget.action == budget_spec.BudgetAction.LOWER_PRIORITY:
            return self._overrun_stop(job)
        if status.budget.action == budget_spec.BudgetAction.HOLD:
            return status.pending_reason(self.state.now)
        info = self.state.tree.nodes[job.leaf]
        if self._within_min(info, job.shape):
            return self._overrun_stop(job)
        return status.pending_reason(
            self.state.now, f"min-only: {info.path} admits within min only"
        )

    def _overrun_stop(self, job: Job) -> Reason | None:
        """B2: held when its declared runtime would overrun an opted-in budget's remainder."""
        if job.leaf not in self.state.tree.overrun_leaves:
            return None
        return budget_overrun.stop(self, job)

    def budget_gated(self, leaf: QuotaPath) -> bool:
        """Whether ``budget_stop`` may stop a workload of ``leaf``: a spent budget governs it
        (B1) or an opted-in budget may hold a declared runtime (B2). Callers skip it otherwise."""
        return leaf in self._budget_stops or leaf in self.state.tree.overrun_leaves

    def budget_tier(self, leaf: QuotaPath, job: Job, within: bool) -> int:
        """The first element of an interleave key (R3, B1): 0 within min, 1 borrowing, and 2
        below a spent ``lower-priority`` budget, whatever the rest (a held preemptor aside)."""
        status = self._budget_stops.get(leaf)
        if (
            status is not None
            and not job.held
            and status.budget.action == budget_spec.BudgetAction.LOWER_PRIORITY
        ):
            return 2
        return 0 if within else 1

    def budget_holds(self, leaf: QuotaPath) -> bool:
        """Whether a spent budget with action ``hold`` stops every new admission of ``leaf``."""
        status = self._budget_stops.get(leaf)
        return status is not None and status.budget.action == budget_spec.BudgetAction.HOLD

    def _next_budget_change(self) -> Millis | None:
        """When a budget with work waiting below it resets or is used up (B1), or None."""
        if not self.state.tree.budgets:
            return None
        tree = self.state.tree
        waiting = {
            node
            for leaf, queue in self._queues.items()
            if queue.entries
            for node in path_nodes(leaf)
            if node in tree.budgets
        }
        if not waiting:
            return None
        found = [s for s in self.budget_statuses().values() if s.budget.node in waiting]
        at = budgets.next_change(found, self.state.now)
        return None if at is None else Millis(at)

    def _observe_node(self, event: NodeObserved) -> None:
        record = NodeCapacity(dict(event.allocatable), event.unschedulable)
        nodes = self.state.nodes.setdefault(event.zone, {})
        if nodes.get(event.node) == record:
            return
        nodes[event.node] = record
        self._nodes_changed(event.zone)

    def _remove_node(self, event: NodeRemoved) -> None:
        nodes = self.state.nodes.get(event.zone, {})
        if event.node not in nodes:
            return
        del nodes[event.node]
        if not nodes:
            del self.state.nodes[event.zone]
        self._nodes_changed(event.zone)

    def _serve(self, zone: Zone) -> None:
        if self.state.served is None:
            self.state.served = {}
        if zone not in self.state.served:
            self.state.served[zone] = None
            self.state.version += 1  # its workloads may be decided (and reclaim for) from now on
            # A queue's first candidate may be one of that zone's from now on.
            self._dirty.update(self.state.tree.leaves)

    def _serves(self, zone: Zone) -> bool:
        """Whether some dequeuer decides for ``zone``: announced, or one of this engine's own
        (a dequeuer serves its zone before its own announcement is back from the log)."""
        if self.state.served is None or zone in self.state.served:
            return True
        return self.config.zones is not None and zone in self.config.zones

    def _decides(self, zone: Zone) -> bool:
        """Whether a pass of this engine decides for ``zone``: one of its zones, and served
        (an engine deciding for every zone, as people's views do, skips unserved ones)."""
        return self.config.decides_for(zone) and self._serves(zone)

    def served_zones(self) -> list[Zone]:
        """The zones dequeuers announced, sorted (empty when none ever did)."""
        return sorted(self.state.served or {})

    def _not_served(self, job: Job) -> Reason | None:
        if self._serves(job.zone):
            return None
        return reasons.zone_not_served(job.zone, self.served_zones())

    def _nodes_changed(self, zone: Zone) -> None:
        self._zone_cap[zone] = _zone_capacity(self.state.nodes.get(zone, {}))
        self._pod_fit_cache = {k: v for k, v in self._pod_fit_cache.items() if k[0] != zone}
        # Inadmissibility depends on the nodes: examine this zone's waiting workloads again.
        for job in list(self.state.jobs.values()):
            if job.zone == zone and job.state in (PENDING, INADMISSIBLE):
                self._unplace(job)
                self._classify(job)
        self._dirty.update(self.state.tree.leaves)
        self.state.version += 1

    # ------------------------------------------------------------------ placing workloads

    def _unplace(self, job: Job) -> None:
        """Take a waiting workload out of its queue or the outside set."""
        if job.state == PENDING and job.leaf is not None and job.leaf in self._queues:
            self._note_shapes(job.leaf, self._queues[job.leaf].remove(job))
        self._outside.pop(job.key, None)

    def _classify(self, job: Job) -> None:
        """Map a waiting workload to its leaf and decide pending / inadmissible / unmapped."""
        leaf, unmapped = self._map(job)
        if leaf is None:
            assert unmapped is not None
            job.leaf = None
            self._accept_tree_zones(job, None)
            job.state = UNMAPPED
            self._outside[job.key] = None
            self._announce_if_new(job, unmapped)
            return
        job.leaf = leaf
        self._accept_tree_zones(job, leaf)
        never = self._never_fits(job, self.state.tree.nodes[leaf])
        if never is None and job.readiness is not None and job.readiness.exhausted:
            never = job.readiness.last  # its last attempt timed out (R10)
        if never is not None:
            job.state = INADMISSIBLE
            self._outside[job.key] = None
            self._announce_if_new(job, never)
            return
        job.state = PENDING
        job.announced = None
        self._note_shapes(leaf, self._queues[leaf].add(job))

    def _accept_tree_zones(self, job: Job, leaf: QuotaPath | None) -> None:
        """Z3: a waiting job listing no zones of its own accepts those its leaf's
        ``usher.io/zones`` lists from its own zone on (none outside the tree)."""
        if job.listed:
            return
        default = self.state.tree.nodes[leaf].default_zones if leaf is not None else ()
        job.zones = tree_accepted(default, job.zone) if default else ()

    def _zone_order(self, job: Job) -> Sequence[Zone]:
        """The order ``job``'s accepted zones are tried in: burst zones last (Z3)."""
        return try_order(job.zones, self.state.tree.burst)

    def _note_shapes(self, leaf: QuotaPath, changed: bool) -> None:
        # The shape groups of a leaf feed the pass's pruning; any change makes it stale.
        self._dirty.add(leaf)

    def _map(self, job: Job) -> tuple[QuotaPath | None, Reason | None]:
        if self.state.tree.root is None:
            return None, reasons.no_tree()
        if job.quota_name is not None:
            path = self.state.tree.by_name.get(job.quota_name)
            if path is None or not self.state.tree.nodes[path].is_leaf:
                return None, reasons.unknown_quota(job.quota_name)
            return path, None
        leaf = self.state.tree.leaf_of_namespace.get(job.namespace)
        if leaf is None:
            return None, reasons.no_leaf(job.namespace)
        return leaf, None

    def _announce_if_new(self, job: Job, reason: Reason) -> None:
        if job.announced is None or (job.announced.code, job.announced.message) != (
            reason.code,
            reason.message,
        ):
            self.state.announce[job.key] = None
        job.announced = reason

    def _never_fits(self, job: Job, leaf: QuotaNodeInfo) -> Reason | None:
        """Why ``job`` could not fit even in an empty cluster, or None (section 3): not even
        with the fewest pods it may start with (R11)."""
        rate = self.config.oversell_rate
        for info in reversed(leaf.ancestors):
            for resource, amount in job.fit_shape:
                cap = info.cap.get(resource)
                if cap is not None and amount > cap:
                    return reasons.exceeds_max(
                        info.path, resource, amount, info.max[resource], cap, rate
                    )
        first = self._never_fits_nodes(job)
        if first is None or not job.zones:
            return first
        # Z2: inadmissible only when no accepted zone's nodes could ever hold it.
        for zone in job.zones[1:]:
            home, job.zone = job.zone, zone
            try:
                elsewhere = self._never_fits_nodes(job)
            finally:
                job.zone = home
            if elsewhere is None:
                return None
        return first

    def _never_fits_nodes(self, job: Job) -> Reason | None:
        """Why no set of ``job``'s zone's nodes could ever hold it, or None (section 3)."""
        nodes = self.state.nodes.get(job.zone)
        if not nodes:
            return None
        for pod in job.pods:
            if not any(_pod_fits(pod, nodes[n].allocatable) for n in sorted(nodes)):
                return self._pod_too_large(job, pod, nodes)
        totals: dict[str, int] = {}
        for name in sorted(nodes):
            for resource, amount in nodes[name].allocatable.items():
                totals[resource] = totals.get(resource, 0) + amount
        for resource, amount in job.fit_shape:
            if amount > totals.get(resource, 0):
                return reasons.zone_total_exceeded(
                    job.zone, resource, amount, totals.get(resource, 0)
                )
        return None

    def _pod_too_large(self, job: Job, pod: Shape, nodes: dict[NodeName, NodeCapacity]) -> Reason:
        for resource, amount in pod:
            largest = max(nodes[n].allocatable.get(resource, 0) for n in sorted(nodes))
            if amount > largest:
                return reasons.pod_too_large(job.zone, resource, amount, largest)
        # Every resource fits some node, but no single node has all of them at once.
        return reasons.pod_too_large(job.zone, pod[0][0], pod[0][1], 0)

    # ------------------------------------------------------------------ accounting

    def _path_nodes(self, path: QuotaPath) -> tuple[QuotaNodeInfo, ...]:
        info = self.state.tree.nodes.get(path)
        if info is not None:
            return info.ancestors
        # A vanished leaf: its usage counts on the prefixes of its path that still exist.
        parts = path.split("/")
        found = []
        for depth in range(1, len(parts) + 1):
            node = self.state.tree.nodes.get(QuotaPath("/".join(parts[:depth])))
            if node is not None:
                found.append(node)
        return tuple(found)

    def _account_quota(self, path: QuotaPath, shape: Shape, sign: int = 1) -> None:
        for info in self._path_nodes(path):
            used = info.used
            for resource, amount in shape:
                used[resource] = used.get(resource, 0) + sign * amount
            self._share_cache.pop(info.path, None)
        if path in self.state.tree.nodes:
            self._dirty.add(path)

    def _account(self, path: QuotaPath, shape: Shape, zone: Zone) -> None:
        self._account_quota(path, shape)
        self._account_zone_quota(path, shape, zone)
        zone_used = self.state.zone_used.setdefault(zone, {})
        for resource, amount in shape:
            zone_used[resource] = zone_used.get(resource, 0) + amount

    def _move_zone_usage(self, shape: Shape, source: Zone, target: Zone) -> None:
        before = self.state.zone_used.setdefault(source, {})
        after = self.state.zone_used.setdefault(target, {})
        for resource, amount in shape:
            before[resource] = before.get(resource, 0) - amount
            after[resource] = after.get(resource, 0) + amount
        self.state.version += 1

    def _account_zone_quota(self, path: QuotaPath, shape: Shape, zone: Zone, sign: int = 1) -> None:
        """Count ``shape`` in ``zone`` on the nodes of ``path`` that cap (Z1) or guarantee
        (Z4) that zone."""
        if self.state.tree.zone_counted:
            zone_quota.count_in_counted_zone(self._path_nodes(path), zone, shape, sign)

    def _recount_zone_quota(self) -> None:
        """Per-zone usage from scratch (a snapshot stores none): every admission, hold and
        lingering usage counts in its zone on its path's capping or guaranteeing nodes (Z1,
        Z4)."""
        for info in self.state.tree.nodes.values():
            info.zone_used = {}
        for job in self.state.jobs.values():
            if job.used_path is not None:
                self._account_zone_quota(job.used_path, job.used_shape, job.zone)
        for path, shape, zone in self.state.lingering.values():
            self._account_zone_quota(path, shape, zone)

    def _unaccount(self, path: QuotaPath, shape: Shape, zone: Zone) -> None:
        self._account_quota(path, shape, -1)
        self._account_zone_quota(path, shape, zone, -1)
        zone_used = self.state.zone_used.setdefault(zone, {})
        for resource, amount in shape:
            zone_used[resource] = zone_used.get(resource, 0) - amount

    def _admit(
        self,
        job: Job,
        quota: QuotaPath,
        shape: Shape,
        *,
        in_pass: bool = False,
        pods: int | None = None,
    ) -> None:
        """Record ``job`` as admitted on ``quota`` (counts as used at once).

        ``pods``: a partial admission's pods (R11), all of them when None.

        ``in_pass``: admitted by the running pass, so not a reclaim candidate before it ends
        (R6); it joins its leaf's candidate list then, and no reclaim walks past it meanwhile.
        """
        self.state.seq += 1
        job.state = ADMITTED
        job.admitted_ms = self.state.now
        job.admit_seq = self.state.seq
        job.used_path = quota
        job.used_shape = shape
        job.announced = None
        self._account(quota, shape, job.zone)
        job.refresh_victim_key()
        if in_pass:
            self._pass_admitted.add(job.key)
        else:
            insort(self._leaf_admitted.setdefault(quota, []), job.victim_key)
        runtime = self._min_runtime(quota)
        if runtime > 0:
            heapq.heappush(self.state.wakeups, (job.admitted_ms + runtime, job.admit_seq, job.key))
        # A pass's own admission is only proposed: its deadline runs from the ledger's grant
        # on the log (before it, the watcher has not even started the pods). Scenarios have
        # no ledger: there the admission is the grant.
        granted = not in_pass or self.config.instant_release
        self._arm_readiness(job, self._readiness(quota), pods, granted=granted)
        self.state.version += 1

    def _arm_readiness(
        self, job: Job, policy: ReadinessPolicy, pods: int | None, *, granted: bool
    ) -> None:
        """A new admission: with a ready timeout, its deadline starts now if ``granted``, else
        at the ledger's ``Admitted`` (``_restart_ready_deadline``) (R10).

        The wakeup carries ``-admit_seq`` (min-runtime ones carry ``admit_seq``, backoff ends
        0), so ``next_wakeup`` tells which condition each entry waits for.
        """
        if policy.timeout_ms <= 0:
            if job.readiness is not None:
                job.readiness = msgspec.structs.replace(
                    job.readiness, deadline_ms=0, not_before_ms=0
                )
            return
        job.readiness = readiness.armed(
            job.readiness,
            job.admitted_ms,
            policy.timeout_ms,
            job.pod_count if pods is None else pods,
        )
        if not granted:
            job.readiness = msgspec.structs.replace(job.readiness, deadline_ms=0)
            return
        deadline = job.readiness.deadline_ms
        self._unready[job.key] = deadline
        heapq.heappush(self.state.wakeups, (deadline, -job.admit_seq, job.key))

    def _readiness(self, path: QuotaPath) -> ReadinessPolicy:
        info = self.state.tree.nodes.get(path)
        return info.readiness if info is not None else self.config.readiness

    def _unadmit(self, job: Job, *, held: bool = True) -> None:
        """Free an admitted workload's usage; the caller decides where it goes next.

        ``held`` False: the admission was only proposed (the ledger refused it), so it held
        nothing and no budget books it (B1)."""
        assert job.used_path is not None
        if held:
            self._book_budgets(job)
            self._book_fair(job)
        self._unaccount(job.used_path, job.used_shape, job.zone)
        self._forget_admitted(job)
        self.state.preemptors.pop(job.key, None)
        self._unready.pop(job.key, None)
        self._grown.pop(job.key, None)
        job.grown = None
        job.used_path = None
        job.used_shape = ()
        self._back_to_first_zone(job)
        job.state = UNMAPPED  # out of every place until the caller classifies or finishes it
        self.state.version += 1

    @staticmethod
    def _back_to_first_zone(job: Job) -> None:
        """Out of its admission: a job accepting several zones waits in its first again, whose
        dequeuer owns it (Z2); the fallback is chosen afresh at its next admission."""
        if job.zones:
            job.zone = job.zones[0]

    def _decides_some_zone(self, job: Job) -> bool:
        """Whether a pass of this engine decides for the job: its zone, or, while it waits,
        one of the zones it accepts (each accepted zone's dequeuer offers it, Z2)."""
        if self._decides(job.zone):
            return True
        return job.state != ADMITTED and any(self._decides(zone) for zone in job.zones)

    def _forget_admitted(self, job: Job) -> None:
        assert job.used_path is not None
        self._pass_admitted.discard(job.key)
        admitted = self._leaf_admitted.get(job.used_path)
        if admitted is not None:
            remove_sorted(admitted, job.victim_key)
            if not admitted:
                del self._leaf_admitted[job.used_path]

    def _reprioritise_admitted(self, job: Job, priority: int) -> None:
        """An admitted workload's priority changed: keep the reclaim order right."""
        self._forget_admitted(job)
        job.priority = priority
        job.refresh_sort_key()
        job.refresh_victim_key()
        assert job.used_path is not None
        insort(self._leaf_admitted.setdefault(job.used_path, []), job.victim_key)

    def _min_runtime(self, path: QuotaPath) -> int:
        info = self.state.tree.nodes.get(path)
        return info.min_runtime_ms if info is not None else self.config.min_runtime_ms

    # ------------------------------------------------------------------ fit

    def _fits_quota(self, leaf: QuotaPath, shape: Shape) -> bool:
        for info in self.state.tree.nodes[leaf].ancestors:
            cap = info.cap
            used = info.used
            for resource, amount in shape:
                limit = cap.get(resource)
                if limit is not None and used.get(resource, 0) + amount > limit:
                    return False
        return True

    def _fits_zone(self, job: Job, shape: Shape | None = None) -> bool:
        """Whether the zone has room for ``shape`` (the whole request when None): within every
        cap the tree sets in that zone (Z1) and within its nodes' capacity."""
        if self.state.tree.zone_capped and not self._fits_zone_quota(job, shape):
            return False
        if job.zone not in self.state.nodes:
            return True
        cap = self._zone_cap.get(job.zone, {})
        used = self.state.zone_used.get(job.zone, {})
        for resource, amount in job.shape if shape is None else shape:
            if used.get(resource, 0) + amount > cap.get(resource, 0):
                return False
        return all(self._pod_fits_schedulable(job.zone, pod) for pod in job.pods)

    def _fits_zone_quota(self, job: Job, shape: Shape | None = None) -> bool:
        assert job.leaf is not None
        request = job.shape if shape is None else shape
        return zone_quota.fits_zone_caps(self._path_nodes(job.leaf), job.zone, request)

    def _pod_fits_schedulable(self, zone: Zone, pod: Shape) -> bool:
        if zone not in self.state.nodes:
            return True  # nodes of the zone unknown: no node constraint (section 3)
        cached = self._pod_fit_cache.get((zone, pod))
        if cached is None:
            nodes = self.state.nodes[zone]
            cached = int(
                any(
                    not nodes[n].unschedulable and _pod_fits(pod, nodes[n].allocatable)
                    for n in sorted(nodes)
                )
            )
            self._pod_fit_cache[(zone, pod)] = cached
        return cached == 1

    def _fits(self, job: Job) -> bool:
        assert job.leaf is not None
        return self._fits_quota(job.leaf, job.shape) and self._fits_zone(job)

    @staticmethod
    def _within_min(info: QuotaNodeInfo, shape: Shape) -> bool:
        # Against the claim (used minus stopping victims' residual): R7.
        return within_guarantee(info.used, info.residual, info.min, shape)

    def _share(self, info: QuotaNodeInfo) -> Share:
        """Dominant share now: max over resources of used/min (section 4, criterion 2)."""
        cached = self._share_cache.get(info.path)
        if cached is not None:
            return cached
        share = _ZERO_SHARE
        # The largest used/min, compared exactly by cross-multiplying (integers are faster
        # than Fractions here, on the pass's hot path), kept as a reduced fraction.
        best_used, best_min = 0, 1
        for resource in sorted(info.used):
            used = info.used[resource]
            if used <= 0:
                continue
            minimum = info.min.get(resource, 0)
            if minimum <= 0:
                share = _INFINITE_SHARE
                break
            if used * best_min > best_used * minimum:
                best_used, best_min = used, minimum
                common = gcd(used, minimum)
                share = (0, used / minimum, used // common, minimum // common)
        self._share_cache[info.path] = share
        return share

    # ------------------------------------------------------------------ the decision pass

    def decide(self, now: Millis) -> list[Decision]:
        """Run one decision pass at ``now``; its decisions are already applied to the state."""
        self.state.now = now
        if self.state.last_pass_now is None or now != self.state.last_pass_now:
            # Time moved: min-runtime protections may have ended, so reclaim can differ.
            self.state.version += 1
        self.state.last_pass_now = now
        self.state.passes += 1
        decisions: list[Decision] = []
        if self._unready and self.state.tree.root is not None:
            # First, so that a workload out of attempts is announced inadmissible at once.
            self._requeue_unready(decisions)
        if self.state.failures:
            self._retry_failed(decisions)
        if self._holds:
            self._drain_due(decisions)
        if self._grown:
            self._stop_grown(decisions)
        self.refresh_budgets()
        decisions.extend(self._announcements())
        # A backoff may have ended since: the leaves whose first candidate depends on the
        # clock are looked at again (the pass refreshes dirty leaves first).
        self._dirty.update(self._timed_offers)
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
                self._end_pass_admissions()
            return
        holders: list[Job] = []
        victims: list[Job] = []
        try:
            starvation.serve_first(self, decisions, holders, victims)
            DecisionPass(self, decisions, [job.key for job in holders], victims).run()
            backfill.run(self, decisions, holders)  # N2: opt-in, needs a declared runtime
        finally:
            starvation.release(self, holders)
            self._end_pass_admissions()
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
        self._queues = {leaf: queue.copy() for leaf, queue in self._queues.items()}
        self._leaf_admitted = {path: list(keys) for path, keys in self._leaf_admitted.items()}
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

    def _announcements(self) -> list[Decision]:
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

    def _refresh_pruning(self) -> list[QuotaPath]:
        """Bring the per-node pruning data (lowest request, reclaim potential) and the leaves'
        offers up to date; return the leaves that were refreshed (they had changed)."""
        if not self._dirty:
            return []
        stale_inner: set[QuotaPath] = set()
        refreshed = sorted(self._dirty)
        for leaf in refreshed:
            info = self.state.tree.nodes.get(leaf)
            queue = self._queues.get(leaf)
            if info is None or queue is None:
                self._offer_keys.pop(leaf, None)
                continue
            low = lowest(list(queue.shapes))
            if low != self._low.get(leaf):
                self._low[leaf] = low
                stale_inner.update(a.path for a in info.ancestors[:-1])
            potential = 1 if self._has_potential(info, queue) else 0
            delta = potential - self._leaf_potential.get(leaf, 0)
            if delta:
                self._leaf_potential[leaf] = potential
                for ancestor in info.ancestors:
                    self._potential[ancestor.path] = self._potential.get(ancestor.path, 0) + delta
            self._refresh_offer(info, queue, potential)
        self._dirty = set()
        nodes = self.state.tree.nodes
        for path in sorted(stale_inner, key=lambda p: (-nodes[p].depth, p)):
            self._low[path] = combine_lowest([self._low.get(c) for c in nodes[path].children])
        self._compact_offers()
        return refreshed

    def _leaf_offer(self, info: QuotaNodeInfo, queue: Queue) -> tuple[WorkloadKey, OfferKey] | None:
        """The leaf's first workload this engine decides for and that is not backing off
        (R10), and its interleave key (R3: within-min first, lower dominant share, then queue
        order). A leaf where a backing-off workload was passed over is marked as depending on
        the clock (``_timed_offers``): its offer is refreshed at every pass."""
        jobs = self.state.jobs
        self._timed_offers.discard(info.path)
        held = info.path in self._held_leaves
        budgeted = self.budget_gated(info.path)
        if info.path in self.state.tree.overrun_leaves:
            # What a budget has left shrinks with the clock: a B2 hold may start any pass.
            self._timed_offers.add(info.path)
        for entry in queue.entries:
            job = jobs[entry[2]]
            if not self._decides_some_zone(job) or (held and not job.held):
                continue
            if budgeted and self.budget_stop(job) is not None:
                continue
            if job.readiness is not None and self.backing_off(job):
                self._timed_offers.add(info.path)
                continue
            # A held preemptor's own hold is already counted in its leaf's usage.
            within = self._within_min(info, () if job.held else job.shape)
            tier = self.budget_tier(info.path, job, within) if budgeted else int(not within)
            if tier and self.config.half_life_ms is not None:
                # Decayed usage moves with the clock (F1), even from 0 (work admitted now).
                self._timed_offers.add(info.path)
            fair = self.fair_key(info, tier)
            return job.key, (tier, fair, self._share(info), job.sort_key)
        return None

    def _refresh_offer(self, info: QuotaNodeInfo, queue: Queue, potential: int) -> None:
        offer = self._leaf_offer(info, queue)
        if offer is None:
            self._offer_keys.pop(info.path, None)
            return
        entry = (offer[0], offer[1], potential)
        if self._offer_keys.get(info.path) == entry:
            return  # its heap entry is still current
        self._offer_keys[info.path] = entry
        heap = self._potential_offers if potential else self._admit_offers
        heapq.heappush(heap, (offer[1], info.path))

    def _compact_offers(self) -> None:
        """Rebuild a heap once stale entries outnumber current ones (bounded memory)."""
        current = len(self._offer_keys)
        if len(self._admit_offers) + len(self._potential_offers) <= 2 * current + 64:
            return
        admit: list[tuple[OfferKey, QuotaPath]] = []
        potential: list[tuple[OfferKey, QuotaPath]] = []
        for leaf, (_, key, can_preempt) in self._offer_keys.items():
            (potential if can_preempt else admit).append((key, leaf))
        heapq.heapify(admit)
        heapq.heapify(potential)
        self._admit_offers, self._potential_offers = admit, potential

    def _has_potential(self, info: QuotaNodeInfo, queue: Queue) -> bool:
        """Whether something in the queue might preempt (so it must be visited even if full)."""
        if not queue.entries:
            return False
        if info.path in self._held_leaves or self.budget_holds(info.path):
            # Held (R14, or a spent budget, B1): only a preemptor whose hold the ledger
            # already granted may move.
            return any(self.state.jobs[k].leaf == info.path for k in self.state.held)
        if info.within_quota == "LowerPriority" and info.path in self._leaf_admitted:
            return True
        if any(self._within_min(info, shape) for shape in queue.shapes):
            return True
        return any(self.state.jobs[k].leaf == info.path for k in self.state.held)

    def stale_offer_keys(self) -> list[QuotaPath]:
        """Leaves whose kept offer is missing, differs from a fresh one, or is not current in
        the heap its potential names. Always empty when the offers are kept right; a check
        for tests (a stale key would reorder the interleave, a missing one starve a queue).
        """
        stale: list[QuotaPath] = []
        heaps = (set(self._admit_offers), set(self._potential_offers))
        for leaf in self.state.tree.leaves:
            if leaf in self._dirty or leaf in self._timed_offers:
                continue  # refreshed before the next pass looks
            info, queue = self.state.tree.nodes[leaf], self._queues[leaf]
            fresh = self._leaf_offer(info, queue)
            kept = self._offer_keys.get(leaf)
            if fresh is None or kept is None:
                if (fresh is None) != (kept is None):
                    stale.append(leaf)
                continue
            potential = self._leaf_potential.get(leaf, 0)
            if (
                (kept[0], kept[1]) != fresh
                or kept[2] != potential
                or (kept[1], leaf) not in heaps[potential]
            ):
                stale.append(leaf)
        return stale

    def _end_pass_admissions(self) -> None:
        """The pass is over: its admissions become reclaim candidates like any other."""
        for key in sorted(self._pass_admitted):
            job = self.state.jobs.get(key)
            if job is not None and job.state == ADMITTED and job.used_path is not None:
                insort(self._leaf_admitted.setdefault(job.used_path, []), job.victim_key)
        self._pass_admitted = set()

    # ------------------------------------------------------------------ stopping victims

    def _begin_stop(self, preemptor: WorkloadKey, victim: WorkloadKey, where: Placement) -> None:
        """``victim`` was preempted for ``preemptor``: its usage counts until it is seen
        stopped, with the preemptor's hold carved out of it (ADMISSION-RULES R7)."""
        if self.config.instant_release:
            return
        self._end_stop(victim)  # one group per victim, whatever a log says (hostile input)
        group = self.state.stops.get(preemptor)
        if group is None:
            holder = self.state.jobs.get(preemptor)
            hold: Placement | None = None
            if holder is not None and holder.used_path is not None:
                hold = (holder.used_path, holder.used_shape, holder.zone)
            group = self.state.stops[preemptor] = StopGroup(preemptor, hold)
        self._stopping[victim] = preemptor
        self._regroup(group, lambda: group.victims.__setitem__(victim, where))

    def _end_stop(self, victim: WorkloadKey) -> None:
        """``victim`` was seen stopped (or its preemption undone): its residual leaves."""
        preemptor = self._stopping.pop(victim, None)
        if preemptor is None:
            return
        group = self.state.stops[preemptor]
        self._regroup(group, lambda: group.victims.pop(victim, None))

    def _preemptor_gone(self, preemptor: WorkloadKey) -> None:
        """The preemptor finished or was deleted: its victims count whole until they stop."""
        group = self.state.stops.get(preemptor)
        if group is not None and group.hold is not None:

            def drop() -> None:
                group.hold = None

            self._regroup(group, drop)

    def _regroup(self, group: StopGroup, change: Callable[[], object]) -> None:
        """Apply ``change`` to a group, moving its residual from the old to the new value."""
        self._account_residual(group, {}, {})
        change()
        if not group.victims:
            del self.state.stops[group.preemptor]
            return
        self._account_residual(group, self._node_residual(group), self._zone_residual(group))

    def _node_residual(self, group: StopGroup) -> dict[QuotaPath, dict[str, int]]:
        victims: dict[QuotaPath, dict[str, int]] = {}
        for key in sorted(group.victims):
            path, shape, _ = group.victims[key]
            for info in self._path_nodes(path):
                _add_shape(victims.setdefault(info.path, {}), shape)
        hold: dict[QuotaPath, dict[str, int]] = {}
        if group.hold is not None:
            for info in self._path_nodes(group.hold[0]):
                _add_shape(hold.setdefault(info.path, {}), group.hold[1])
        return _excess(victims, hold)

    def _zone_residual(self, group: StopGroup) -> dict[Zone, dict[str, int]]:
        victims: dict[Zone, dict[str, int]] = {}
        for key in sorted(group.victims):
            _, shape, zone = group.victims[key]
            _add_shape(victims.setdefault(zone, {}), shape)
        hold: dict[Zone, dict[str, int]] = {}
        if group.hold is not None:
            _add_shape(hold.setdefault(group.hold[2], {}), group.hold[1])
        return _excess(victims, hold)

    def _account_residual(
        self,
        group: StopGroup,
        nodes: dict[QuotaPath, dict[str, int]],
        zones: dict[Zone, dict[str, int]],
    ) -> None:
        """Replace what ``group`` counts beyond its hold by ``nodes`` and ``zones``."""
        for path, amounts in group.residual.items():
            self._shift_node(path, amounts, -1)
        for zone, amounts in group.zone_residual.items():
            _shift(self.state.zone_used.setdefault(zone, {}), amounts, -1)
        group.residual, group.zone_residual = nodes, zones
        for path, amounts in nodes.items():
            self._shift_node(path, amounts, 1)
        for zone, amounts in zones.items():
            _shift(self.state.zone_used.setdefault(zone, {}), amounts, 1)
        self.state.version += 1

    def _shift_node(self, path: QuotaPath, amounts: dict[str, int], sign: int) -> None:
        info = self.state.tree.nodes.get(path)
        if info is None:
            return  # the node vanished with a tree change: its usage went with it
        _shift(info.used, amounts, sign)
        _shift(info.residual, amounts, sign)
        self._share_cache.pop(path, None)
        if info.is_leaf:
            self._dirty.add(path)

    # ------------------------------------------------------------------ time

    def next_wakeup(self) -> Millis | None:
        """The next instant a min-runtime protection ends, a ready deadline or a backoff
        runs out, a drain's grace is over (R15), a budget with work waiting below it resets
        or is used up by the running work (B1) or a reservation starts (N1): a pass should
        run then."""
        timed = [holds.next_drain(self._holds, self.state.now) if self._holds else None]
        timed.append(self._next_budget_change())
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
            return job.state == ADMITTED and job.admit_seq == -seq and key in self._unready
        record = job.readiness
        return job.state == PENDING and record is not None and record.not_before_ms == end

    # ------------------------------------------------------------------ queries
    # Read-side questions (``engine_queries`` answers them over the state; the pass's
    # shortfall helpers below are shared with it).

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

    def _head(self, queue: Queue) -> WorkloadKey | None:
        for _, _, key in queue.entries:
            job = self.state.jobs[key]
            if self._decides_some_zone(job) and not self.backing_off(job):
                return key
        return None

    def backing_off(self, job: Job) -> bool:
        """Requeued for readiness and not to be offered yet (R10): its backoff runs, or its
        earlier admission's usage still lingers until the ledger releases it (R7)."""
        record = job.readiness
        if record is None or not record.requeues:
            return False
        return record.not_before_ms > self.state.now or job.key in self._stopping

    def _quota_shortfall(self, job: Job) -> Reason | None:
        assert job.leaf is not None
        # Nearest node first: the leaf or department a person can act on.
        short = first_shortfall(self._tree.nodes[job.leaf].ancestors, job.shape)
        if short is None:
            return None
        numbers = (short.node, short.resource, short.used, short.requested, short.cap)
        holder = self._holder_on(short.node, job.key)
        if holder is not None:
            return reasons.held_for_preemptor(*numbers, holder)
        # Full only until victims already chosen have stopped: say so, not "exceeded".
        stopping = self._tree.nodes[short.node].residual.get(short.resource, 0)
        if stopping > 0 and short.used - stopping + short.requested <= short.cap:
            return reasons.victims_still_stopping(*numbers, stopping)
        return quota_exceeded(short, self.config.oversell_rate)

    def _holder_on(self, path: QuotaPath, asking: WorkloadKey) -> WorkloadKey | None:
        for key in sorted(self.state.held):
            holder = self.state.jobs[key]
            if (
                key != asking
                and holder.used_path is not None
                and any(n.path == path for n in self._path_nodes(holder.used_path))
            ):
                return key
        return None

    def _zone_shortfall(self, job: Job) -> Reason | None:
        """What the zone lacks for the whole request; for a waiting job accepting several
        zones, what each of them lacks (none: the first that fits admits it, Z2)."""
        if not job.zones or job.state == ADMITTED:
            return self._shortfall_here(job)
        order = self._zone_order(job)
        chosen, passed = zone_choice(order, lambda zone: self._shortfall_in_zone(job, zone))
        return None if chosen is not None else passed_over(None, passed)

    def _shortfall_in_zone(self, job: Job, zone: Zone) -> Reason | None:
        """What ``zone`` lacks for ``job`` as if it waited there (Z2)."""
        home, job.zone = job.zone, zone
        try:
            return self._shortfall_here(job)
        finally:
            job.zone = home

    def _shortfall_here(self, job: Job) -> Reason | None:
        if self.state.tree.zone_capped:
            assert job.leaf is not None
            nodes = self._path_nodes(job.leaf)
            short = zone_quota.zone_shortfall(nodes, job.zone, job.shape)
            if short is not None:
                return zone_quota.zone_quota_exceeded(short)  # Z1
        if job.zone not in self.state.nodes:
            return None
        cap = self._zone_cap.get(job.zone, {})
        used = self.state.zone_used.get(job.zone, {})
        for resource, amount in job.shape:
            have = used.get(resource, 0)
            if have + amount > cap.get(resource, 0):
                return reasons.zone_capacity(job.zone, resource, have, amount, cap.get(resource, 0))
        if not all(self._pod_fits_schedulable(job.zone, pod) for pod in job.pods):
            return reasons.no_node_fits(job.zone)
        return None

    # ------------------------------------------------------------------ history queries
    # Read-only questions ``usher replay``, ``audit`` and ``explain`` ask of a state rebuilt
    # from the log alone, on which no decision pass has run.

    def reason_now(self, key: WorkloadKey) -> Reason | None:
        """Why a workload waits, worked out from the state as it is now (no pass needed)."""
        return engine_queries.reason_now(self, key)

    def admission_shortfall(
        self, key: WorkloadKey, quota: QuotaPath, requests: dict[str, int]
    ) -> Reason | None:
        """What stops ``requests`` on ``quota`` now, as the ledger checks it; None if they fit."""
        return engine_queries.admission_shortfall(self, key, quota, requests)


def _stop_id(status: budgets.BudgetStatus | None) -> tuple[budget_spec.BudgetKey, str] | None:
    """What a leaf's budget stop is, to tell whether it changed (B1)."""
    return None if status is None else (status.budget.key, status.budget.action.value)


def _pod_fits(pod: Shape, allocatable: dict[str, int]) -> bool:
    return all(amount <= allocatable.get(resource, 0) for resource, amount in pod)


def _add_shape(into: dict[str, int], shape: Shape) -> None:
    for resource, amount in shape:
        into[resource] = into.get(resource, 0) + amount


def _shift(into: dict[str, int], amounts: dict[str, int], sign: int) -> None:
    for resource, amount in amounts.items():
        into[resource] = into.get(resource, 0) + sign * amount


def _excess(
    victims: dict[_K, dict[str, int]], hold: dict[_K, dict[str, int]]
) -> dict[_K, dict[str, int]]:
    """Per key and resource, what the victims hold above the hold (``max(v, h) - h``)."""
    out: dict[_K, dict[str, int]] = {}
    for key in sorted(victims, key=str):
        held = hold.get(key, {})
        extra = {
            r: a - held.get(r, 0) for r, a in sorted(victims[key].items()) if a > held.get(r, 0)
        }
        if extra:
            out[key] = extra
    return out


def _zone_capacity(nodes: dict[NodeName, NodeCapacity]) -> dict[str, int]:
    """What a zone's schedulable nodes allocate, summed in node-name order."""
    total: dict[str, int] = {}
    for name in sorted(nodes):
        record = nodes[name]
        if record.unschedulable:
            continue
        for resource, amount in record.allocatable.items():
            total[resource] = total.get(resource, 0) + amount
    return total


def _sort_key(job: Job) -> SortKey:
    return job.sort_key
