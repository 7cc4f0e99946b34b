"""The decision engine: folds events into state and runs decision passes (SEMANTICS 2-6).

What it does: ``Engine.apply(event, now)`` folds a cluster event or a decision made elsewhere
into the state; ``Engine.decide(now)`` runs one decision pass (cross-queue interleave,
Round/Block, reclaim, within-quota preemption, min runtime) and returns its decisions; the
query methods explain every workload's state and reason.
What it must never do: read a clock, draw random numbers, perform I/O, or iterate an
unordered collection where the order could reach a decision. Time only comes in as ``now``.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right, insort
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from itertools import chain
from typing import TypeVar

import msgspec

from schemas import (
    Admitted,
    Decision,
    Inadmissible,
    Millis,
    NodeName,
    NodeObserved,
    NodeRemoved,
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
    Unmapped,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    WorkloadRejected,
    Zone,
    ZoneServed,
)
from schemas.events import ClusterEvent
from usher.core import reasons
from usher.core.config import EngineConfig
from usher.core.reclaim import borrowed_resource, within_guarantee
from usher.core.state import (
    ADMITTED,
    FINISHED,
    INADMISSIBLE,
    PENDING,
    UNMAPPED,
    Job,
    JobState,
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
)

Share = tuple[int, float, int, int]
"""Dominant share of a leaf as ``(infinite, used/min, used, min)``.

The float orders shares at C speed (rounding is monotonic, so a smaller float is a smaller
share); exact ties in the float fall back to the integers, deterministically. ``(1, ...)`` is
infinite (used > 0 where min is 0)."""

OfferKey = tuple[int, Share, SortKey]
"""Interleave preference (section 4): within-min first, lower share, then queue order."""

_K = TypeVar("_K", QuotaPath, Zone)

_ZERO_SHARE: Share = (0, 0.0, 0, 1)
_INFINITE_SHARE: Share = (1, 0.0, 0, 1)


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


class _NodeRecord(msgspec.Struct, frozen=True):
    allocatable: dict[str, int]
    unschedulable: bool


class Engine:
    """Pure, deterministic admission and preemption core. Same inputs, same decisions."""

    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config if config is not None else EngineConfig()
        self._tree = TreeIndex(None, self.config)
        self._queues: dict[QuotaPath, Queue] = {}
        self._jobs: dict[WorkloadKey, Job] = {}
        self._leaf_admitted: dict[QuotaPath, list[VictimKey]] = {}
        """Admitted workloads per recorded leaf path, sorted in reclaim order."""
        self._outside: dict[WorkloadKey, None] = {}
        """Unmapped and inadmissible workloads, re-examined when the tree or nodes change."""
        self._announce: dict[WorkloadKey, None] = {}
        self._priority_values: dict[str, int] = {}
        self._class_users: dict[str, dict[WorkloadKey, None]] = {}
        self._nodes: dict[Zone, dict[NodeName, _NodeRecord]] = {}
        self._zone_cap: dict[Zone, dict[str, int]] = {}
        self._zone_used: dict[Zone, dict[str, int]] = {}
        self._pod_fit_cache: dict[tuple[Zone, Shape], int] = {}
        self._served: dict[Zone, None] | None = None
        """Zones some dequeuer announced (``ZoneServed``); None until the first announcement,
        when nobody can tell which zones are served."""
        self._held: dict[WorkloadKey, None] = {}
        self._preemptors: dict[WorkloadKey, None] = {}
        self._stops: dict[WorkloadKey, StopGroup] = {}
        """Preemptions whose victims still stop, by preemptor (ADMISSION-RULES R7)."""
        self._stopping: dict[WorkloadKey, WorkloadKey] = {}
        """Each victim not yet seen stopped -> its preemptor."""
        self._lingering: dict[WorkloadKey, Placement] = {}
        """Usage of finished or deleted workloads still counted until the ledger's
        ``Released`` (R7; never with ``instant_release``)."""
        self._pass_admitted: set[WorkloadKey] = set()
        """Admitted by the running pass: never offered as a victim in it (ADMISSION-RULES R6)."""
        self._wakeups: list[tuple[int, int, WorkloadKey]] = []
        self._shapes: dict[Shape, Shape] = {}
        self._share_cache: dict[QuotaPath, Share] = {}
        self._dirty: set[QuotaPath] = set()
        self._low: dict[QuotaPath, dict[str, int] | None] = {}
        self._leaf_potential: dict[QuotaPath, int] = {}
        self._potential: dict[QuotaPath, int] = {}
        self._reclaim_failed: dict[tuple[QuotaPath, Shape, int, Zone], int] = {}
        self._version = 0
        self._passes = 0
        self._seq = 0
        self._now: Millis = Millis(0)
        self._last_pass_now: Millis | None = None

    # ------------------------------------------------------------------ folding inputs

    def apply(self, event: ClusterEvent | Decision, now: Millis) -> list[Decision]:
        """Fold one event (or a decision made elsewhere) into the state.

        Returns only immediate decisions that need no pass (``Released`` of a finished or
        deleted admitted workload). Applying a decision the state already reflects is a no-op.
        """
        self._now = now
        match event:
            case WorkloadObserved():
                self._observe(event)
            case WorkloadFinished():
                return self._finish(event.workload, succeeded=event.succeeded)
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
            case Preempted():
                self._apply_preempted(event)
            case Released():
                self._apply_released(event)
            case WorkloadRejected() | QuotaTreeRejected() | Pending() | Inadmissible() | Unmapped():
                # A rejected input changes nothing (the last valid state stays in force); the
                # other decisions carry no state change of their own.
                pass
        return []

    def _observe(self, event: WorkloadObserved) -> None:
        job = self._jobs.get(event.workload)
        if job is None:
            job = Job(event.workload, event.namespace, event.name)
            job.arrived_pass = self._passes
            self._jobs[job.key] = job
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
            # Admitted or finished: its usage stays as recorded; only metadata follows.
            if job.state == ADMITTED and job.used_path is not None:
                self._forget_admitted(job)
                old_zone = job.zone
                self._fill(job, event)
                if job.zone != old_zone:
                    # Its pods run where they were admitted; usage follows the zone label so
                    # that the release later subtracts from the zone it was added to.
                    self._move_zone_usage(job.used_shape, old_zone, job.zone)
                job.refresh_victim_key()
                insort(self._leaf_admitted.setdefault(job.used_path, []), job.victim_key)
            else:
                self._fill(job, event)

    def _fill(self, job: Job, event: WorkloadObserved) -> None:
        if job.priority_class is not None:
            self._class_users.get(job.priority_class, {}).pop(job.key, None)
        job.zone = event.zone
        job.priority_class = event.priority_class
        job.spec_priority = event.priority
        job.created_ms = event.created_ms
        job.quota_name = event.quota_name
        total: dict[str, int] = {}
        pods: list[Shape] = []
        for pod_set in event.pod_sets:
            if pod_set.count <= 0:
                continue
            pods.append(self._intern(shape_of(pod_set.requests)))
            for resource, amount in pod_set.requests.items():
                total[resource] = total.get(resource, 0) + amount * pod_set.count
        job.shape = self._intern(shape_of(total))
        job.pods = tuple(sorted(set(pods)))
        if job.priority_class is not None:
            self._class_users.setdefault(job.priority_class, {})[job.key] = None
        job.priority = self._resolve_priority(job)
        job.refresh_sort_key()

    def _intern(self, shape: Shape) -> Shape:
        # One tuple object per distinct shape: 100k workloads share a handful of them.
        return self._shapes.setdefault(shape, shape)

    def _resolve_priority(self, job: Job) -> int:
        if job.priority_class is not None and job.priority_class in self._priority_values:
            return self._priority_values[job.priority_class]
        return job.spec_priority if job.spec_priority is not None else 0

    def _set_priority_class(self, name: str, value: int | None) -> None:
        if value is None:
            self._priority_values.pop(name, None)
        else:
            self._priority_values[name] = value
        for key in list(self._class_users.get(name, {})):
            job = self._jobs[key]
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
        self._version += 1

    def _finish(self, key: WorkloadKey, *, succeeded: bool) -> list[Decision]:
        job = self._jobs.get(key)
        if job is None or job.state == FINISHED:
            return []
        quota = job.used_path if job.state == ADMITTED else None
        released = self._release(job, "Finished" if succeeded else "Failed")
        if not released:
            self._unplace(job)
        if quota is not None:
            job.leaf = quota  # a finished workload is shown in the queue it ran from
        job.state = FINISHED
        return released

    def _delete(self, key: WorkloadKey) -> list[Decision]:
        job = self._jobs.get(key)
        if job is None:
            return []
        released = self._release(job, "Deleted")
        if not released and job.state != FINISHED:
            self._unplace(job)
        if job.priority_class is not None:
            self._class_users.get(job.priority_class, {}).pop(key, None)
        self._announce.pop(key, None)
        del self._jobs[key]
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
            self._forget_admitted(job)
            job.state = UNMAPPED  # out of every place until the caller finishes or deletes it
        self._preemptors.pop(job.key, None)
        self._held.pop(job.key, None)
        self._lingering[job.key] = (job.used_path, job.used_shape, job.zone)
        job.used_path = None
        job.used_shape = ()
        job.held = False  # a held workload stays where it waits; the caller takes it out
        self._version += 1

    def _end_linger(self, key: WorkloadKey) -> bool:
        where = self._lingering.pop(key, None)
        if where is None:
            return False
        self._unaccount(*where)
        self._version += 1
        return True

    # ------------------------------------------------------------------ decisions made elsewhere

    def _apply_admitted(self, decision: Admitted) -> None:
        if decision.workload in self._lingering:
            # This engine admitted it and saw it end before the ledger's grant came back: the
            # lingering usage is that very allocation (one live allocation per workload, R8).
            return
        job = self._jobs.get(decision.workload)
        if job is None:
            namespace, _, name = decision.workload.partition("/")
            job = Job(decision.workload, namespace, name)
            job.zone = decision.zone
            job.priority = decision.priority
            job.created_ms = self._now
            job.shape = self._intern(shape_of(decision.requests))
            job.refresh_sort_key()
            job.arrived_pass = self._passes
            job.state = UNMAPPED  # placeholder: not in any queue yet
            self._jobs[job.key] = job
        elif job.state in (ADMITTED, FINISHED):
            return
        else:
            self._unplace(job)
        if job.held:
            self._drop_hold(job)
        shape = self._intern(shape_of(decision.requests))
        self._admit(job, decision.quota, shape)

    def _apply_preempted(self, decision: Preempted) -> None:
        lingering = self._lingering.pop(decision.workload, None)
        if lingering is not None:
            # It finished (or was deleted) before the ledger read that: the ledger preempted
            # what it still held. Its usage now counts as the group's, as in the ledger.
            self._unaccount(*lingering)
            self._hold_for(decision.preemptor)
            self._begin_stop(decision.preemptor, decision.workload, lingering)
            return
        job = self._jobs.get(decision.workload)
        if job is None or job.state != ADMITTED:
            return
        assert job.used_path is not None
        placement: Placement = (job.used_path, job.used_shape, job.zone)
        self._unadmit(job)
        self._classify(job)
        self._set_note(job, decision.reason)
        self._hold_for(decision.preemptor)
        self._begin_stop(decision.preemptor, job.key, placement)

    def _hold_for(self, key: WorkloadKey) -> None:
        """A reclaim decided elsewhere: the freed capacity is held for its preemptor.

        The ledger holds it the same way until the preemptor's ``Admitted`` arrives, so no
        engine offers that capacity to anyone else meanwhile.
        """
        job = self._jobs.get(key)
        if job is None or job.held or job.state != PENDING or job.leaf is None:
            return
        job.used_path = job.leaf
        job.used_shape = job.shape
        job.held = True
        self._held[key] = None
        self._account(job.leaf, job.shape, job.zone)
        self._version += 1

    def _apply_released(self, decision: Released) -> None:
        # The ledger freed it (R7): a victim seen stopped, or a finished, deleted or
        # preempted workload whose usage lingered until now; a preemptor gone for good.
        self._end_stop(decision.workload)
        self._preemptor_gone(decision.workload)
        if self._end_linger(decision.workload):
            return  # a workload of the same name may exist again: it is not this one
        job = self._jobs.get(decision.workload)
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
        job = self._jobs.get(key)
        if job is None or job.state != ADMITTED:
            return
        if key in self._preemptors:
            self._preemptors.pop(key)
            self._forget_admitted(job)
            job.state = PENDING
            job.held = True
            self._held[key] = None
            self._place_pending_again(job)
        else:
            self._unadmit(job)
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
        for decision in victims:
            self._end_stop(decision.workload)
        for decision in victims:
            victim = self._jobs.get(decision.workload)
            if victim is None or victim.state == ADMITTED or victim.state == FINISHED:
                continue
            if victim.held:
                self._drop_hold(victim)
            self._unplace(victim)
            admitted_ms, admit_seq = victim.admitted_ms, victim.admit_seq
            self._admit(victim, decision.quota, victim.shape)
            self._forget_admitted(victim)
            victim.admitted_ms, victim.admit_seq = admitted_ms, admit_seq
            victim.refresh_victim_key()
            insort(self._leaf_admitted.setdefault(decision.quota, []), victim.victim_key)
            victim.note = None
        job = self._jobs.get(preemptor)
        if job is None or job.state != ADMITTED:
            return
        self._unadmit(job)
        self._classify(job)
        self._set_note(job, reason)

    def check_preemption(
        self, preemptor: WorkloadKey, victims: Sequence[WorkloadKey], now: Millis
    ) -> Reason | None:
        """Whether evicting ``victims`` for ``preemptor`` follows section 5 on this state.

        ``None`` when it does: the preemptor waits, each victim is admitted, past its minimum
        runtime, and either on a borrowing leaf (the preemptor asking within its ``min``) or a
        strictly lower-priority workload of the preemptor's own leaf (``LowerPriority``), and
        the preemptor fits once they are gone. The state is left exactly as it was.
        """
        self._now = now
        job = self._jobs.get(preemptor)
        if job is not None and job.held:
            return None  # already accepted: a retry of a reclaim the log already carries
        if job is None or job.state != PENDING or job.leaf is None:
            return reasons.stale_view(preemptor, "the preemptor is not waiting in a queue")
        if not victims:
            return reasons.stale_view(preemptor, "no victims named")
        info = self._tree.nodes[job.leaf]
        within = self._within_min(info, job.shape)
        lower = info.within_quota == "LowerPriority"
        removed: list[Placement] = []
        try:
            for key in victims:
                victim = self._jobs.get(key)
                refusal = self._victim_refusal(job, victim, key, within=within, lower=lower)
                if refusal is not None:
                    return refusal
                where = self._victim_placement(victim, key)
                assert where is not None
                self._unaccount(*where)
                removed.append(where)
            if not self._fits(job):
                return reasons.stale_view(preemptor, "it would not fit without these victims")
            return None
        finally:
            for where in reversed(removed):
                self._account(*where)

    def _victim_placement(self, victim: Job | None, key: WorkloadKey) -> Placement | None:
        """Where a victim's usage counts: admitted, or finished and not yet released by the
        ledger (which still holds it as admitted, R7); None if neither."""
        if victim is not None and victim.state == ADMITTED and victim.used_path is not None:
            return (victim.used_path, victim.used_shape, victim.zone)
        return self._lingering.get(key)

    def _victim_refusal(
        self, job: Job, victim: Job | None, key: WorkloadKey, *, within: bool, lower: bool
    ) -> Reason | None:
        where = self._victim_placement(victim, key)
        if where is None:
            return reasons.stale_view(job.key, f"{key} is not admitted", key)
        if key in self._stops:
            return reasons.stale_view(
                job.key, f"{key} is a preemptor whose victims have not stopped yet", key
            )
        path = where[0]
        if victim is not None and self._now - victim.admitted_ms < self._min_runtime(path):
            return reasons.stale_view(job.key, f"{key} is within its minimum runtime", key)
        if path == job.leaf:
            if victim is not None and lower and victim.priority < job.priority:
                return None
            return reasons.stale_view(job.key, f"{key} is not of lower priority", key)
        if within and self._borrowing_reason(job, path) is not None:
            return None
        return reasons.stale_view(job.key, f"{key} is not borrowing what is asked", key)

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
        self._held.pop(job.key, None)
        self._version += 1

    def _set_note(self, job: Job, reason: Reason) -> None:
        # A note explains the workload until the next pass looks at it again.
        job.note = reason
        job.note_pass = self._passes

    # ------------------------------------------------------------------ tree and nodes

    def _install_tree(self, event: QuotaTreeApplied) -> None:
        """A new valid tree: never evicts; waiting workloads are mapped again."""
        self._tree = TreeIndex(event.root, self.config)
        self._queues = {
            leaf: Queue(self._tree.nodes[leaf].queue or QueueName(leaf), leaf)
            for leaf in self._tree.leaves
        }
        self._low = {}
        self._leaf_potential = {}
        self._potential = {}
        self._share_cache = {}
        self._dirty = set(self._tree.leaves)
        for job in self._jobs.values():
            if job.used_path is not None:
                # Admitted (or held) usage keeps counting on the nodes of its recorded path
                # that still exist.
                self._account_quota(job.used_path, job.used_shape)
        for path, shape, _ in self._lingering.values():
            self._account_quota(path, shape)
        for group in self._stops.values():
            # Stopping victims keep counting on the nodes of their paths that still exist.
            group.residual = {}
            self._account_residual(group, self._node_residual(group), group.zone_residual)
        for job in list(self._jobs.values()):
            if job.state in (PENDING, UNMAPPED, INADMISSIBLE):
                job.state = UNMAPPED
                self._outside.pop(job.key, None)
                self._classify(job)
                if job.held and job.state != PENDING:
                    self._drop_hold(job)
        self._version += 1

    def _observe_node(self, event: NodeObserved) -> None:
        record = _NodeRecord(dict(event.allocatable), event.unschedulable)
        nodes = self._nodes.setdefault(event.zone, {})
        if nodes.get(event.node) == record:
            return
        nodes[event.node] = record
        self._nodes_changed(event.zone)

    def _remove_node(self, event: NodeRemoved) -> None:
        nodes = self._nodes.get(event.zone, {})
        if event.node not in nodes:
            return
        del nodes[event.node]
        if not nodes:
            del self._nodes[event.zone]
        self._nodes_changed(event.zone)

    def _serve(self, zone: Zone) -> None:
        if self._served is None:
            self._served = {}
        if zone not in self._served:
            self._served[zone] = None
            self._version += 1  # its workloads may be decided (and reclaim for) from now on

    def _serves(self, zone: Zone) -> bool:
        """Whether some dequeuer decides for ``zone``: announced, or one of this engine's own
        (a dequeuer serves its zone before its own announcement is back from the log)."""
        if self._served is None or zone in self._served:
            return True
        return self.config.zones is not None and zone in self.config.zones

    def _decides(self, zone: Zone) -> bool:
        """Whether a pass of this engine decides for ``zone``: one of its zones, and served
        (an engine deciding for every zone, as people's views do, skips unserved ones)."""
        return self.config.decides_for(zone) and self._serves(zone)

    def served_zones(self) -> list[Zone]:
        """The zones dequeuers announced, sorted (empty when none ever did)."""
        return sorted(self._served or {})

    def _not_served(self, job: Job) -> Reason | None:
        if self._serves(job.zone):
            return None
        return reasons.zone_not_served(job.zone, self.served_zones())

    def _nodes_changed(self, zone: Zone) -> None:
        total: dict[str, int] = {}
        for name in sorted(self._nodes.get(zone, {})):
            record = self._nodes[zone][name]
            if record.unschedulable:
                continue
            for resource, amount in record.allocatable.items():
                total[resource] = total.get(resource, 0) + amount
        self._zone_cap[zone] = total
        self._pod_fit_cache = {k: v for k, v in self._pod_fit_cache.items() if k[0] != zone}
        # Inadmissibility depends on the nodes: examine this zone's waiting workloads again.
        for job in list(self._jobs.values()):
            if job.zone == zone and job.state in (PENDING, INADMISSIBLE):
                self._unplace(job)
                self._classify(job)
        self._dirty.update(self._tree.leaves)
        self._version += 1

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
            job.state = UNMAPPED
            self._outside[job.key] = None
            self._announce_if_new(job, unmapped)
            return
        job.leaf = leaf
        never = self._never_fits(job, self._tree.nodes[leaf])
        if never is not None:
            job.state = INADMISSIBLE
            self._outside[job.key] = None
            self._announce_if_new(job, never)
            return
        job.state = PENDING
        job.announced = None
        self._note_shapes(leaf, self._queues[leaf].add(job))

    def _note_shapes(self, leaf: QuotaPath, changed: bool) -> None:
        # The shape groups of a leaf feed the pass's pruning; any change makes it stale.
        self._dirty.add(leaf)

    def _map(self, job: Job) -> tuple[QuotaPath | None, Reason | None]:
        if self._tree.root is None:
            return None, reasons.no_tree()
        if job.quota_name is not None:
            path = self._tree.by_name.get(job.quota_name)
            if path is None or not self._tree.nodes[path].is_leaf:
                return None, reasons.unknown_quota(job.quota_name)
            return path, None
        leaf = self._tree.leaf_of_namespace.get(job.namespace)
        if leaf is None:
            return None, reasons.no_leaf(job.namespace)
        return leaf, None

    def _announce_if_new(self, job: Job, reason: Reason) -> None:
        if job.announced is None or (job.announced.code, job.announced.message) != (
            reason.code,
            reason.message,
        ):
            self._announce[job.key] = None
        job.announced = reason

    def _never_fits(self, job: Job, leaf: QuotaNodeInfo) -> Reason | None:
        """Why ``job`` could not fit even in an empty cluster, or None (section 3)."""
        rate = self.config.oversell_rate
        for info in reversed(leaf.ancestors):
            for resource, amount in job.shape:
                cap = info.cap.get(resource)
                if cap is not None and amount > cap:
                    return reasons.exceeds_max(
                        info.path, resource, amount, info.max[resource], cap, rate
                    )
        nodes = self._nodes.get(job.zone)
        if not nodes:
            return None
        for pod in job.pods:
            if not any(_pod_fits(pod, nodes[n].allocatable) for n in sorted(nodes)):
                return self._pod_too_large(job, pod, nodes)
        totals: dict[str, int] = {}
        for name in sorted(nodes):
            for resource, amount in nodes[name].allocatable.items():
                totals[resource] = totals.get(resource, 0) + amount
        for resource, amount in job.shape:
            if amount > totals.get(resource, 0):
                return reasons.zone_total_exceeded(
                    job.zone, resource, amount, totals.get(resource, 0)
                )
        return None

    def _pod_too_large(self, job: Job, pod: Shape, nodes: dict[NodeName, _NodeRecord]) -> Reason:
        for resource, amount in pod:
            largest = max(nodes[n].allocatable.get(resource, 0) for n in sorted(nodes))
            if amount > largest:
                return reasons.pod_too_large(job.zone, resource, amount, largest)
        # Every resource fits some node, but no single node has all of them at once.
        return reasons.pod_too_large(job.zone, pod[0][0], pod[0][1], 0)

    # ------------------------------------------------------------------ accounting

    def _path_nodes(self, path: QuotaPath) -> tuple[QuotaNodeInfo, ...]:
        info = self._tree.nodes.get(path)
        if info is not None:
            return info.ancestors
        # A vanished leaf: its usage counts on the prefixes of its path that still exist.
        parts = path.split("/")
        found = []
        for depth in range(1, len(parts) + 1):
            node = self._tree.nodes.get(QuotaPath("/".join(parts[:depth])))
            if node is not None:
                found.append(node)
        return tuple(found)

    def _account_quota(self, path: QuotaPath, shape: Shape, sign: int = 1) -> None:
        for info in self._path_nodes(path):
            used = info.used
            for resource, amount in shape:
                used[resource] = used.get(resource, 0) + sign * amount
            self._share_cache.pop(info.path, None)
        if path in self._tree.nodes:
            self._dirty.add(path)

    def _account(self, path: QuotaPath, shape: Shape, zone: Zone) -> None:
        self._account_quota(path, shape)
        zone_used = self._zone_used.setdefault(zone, {})
        for resource, amount in shape:
            zone_used[resource] = zone_used.get(resource, 0) + amount

    def _move_zone_usage(self, shape: Shape, source: Zone, target: Zone) -> None:
        before = self._zone_used.setdefault(source, {})
        after = self._zone_used.setdefault(target, {})
        for resource, amount in shape:
            before[resource] = before.get(resource, 0) - amount
            after[resource] = after.get(resource, 0) + amount
        self._version += 1

    def _unaccount(self, path: QuotaPath, shape: Shape, zone: Zone) -> None:
        self._account_quota(path, shape, -1)
        zone_used = self._zone_used.setdefault(zone, {})
        for resource, amount in shape:
            zone_used[resource] = zone_used.get(resource, 0) - amount

    def _admit(self, job: Job, quota: QuotaPath, shape: Shape, *, in_pass: bool = False) -> None:
        """Record ``job`` as admitted on ``quota`` (counts as used at once).

        ``in_pass``: admitted by the running pass, so not a reclaim candidate before it ends
        (R6); it joins its leaf's candidate list then, and no reclaim walks past it meanwhile.
        """
        self._seq += 1
        job.state = ADMITTED
        job.admitted_ms = self._now
        job.admit_seq = self._seq
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
            heapq.heappush(self._wakeups, (job.admitted_ms + runtime, job.admit_seq, job.key))
        self._version += 1

    def _unadmit(self, job: Job) -> None:
        """Free an admitted workload's usage; the caller decides where it goes next."""
        assert job.used_path is not None
        self._unaccount(job.used_path, job.used_shape, job.zone)
        self._forget_admitted(job)
        self._preemptors.pop(job.key, None)
        job.used_path = None
        job.used_shape = ()
        job.state = UNMAPPED  # out of every place until the caller classifies or finishes it
        self._version += 1

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
        info = self._tree.nodes.get(path)
        return info.min_runtime_ms if info is not None else self.config.min_runtime_ms

    # ------------------------------------------------------------------ fit

    def _fits_quota(self, leaf: QuotaPath, shape: Shape) -> bool:
        for info in self._tree.nodes[leaf].ancestors:
            cap = info.cap
            used = info.used
            for resource, amount in shape:
                limit = cap.get(resource)
                if limit is not None and used.get(resource, 0) + amount > limit:
                    return False
        return True

    def _fits_zone(self, job: Job) -> bool:
        if job.zone not in self._nodes:
            return True
        cap = self._zone_cap.get(job.zone, {})
        used = self._zone_used.get(job.zone, {})
        for resource, amount in job.shape:
            if used.get(resource, 0) + amount > cap.get(resource, 0):
                return False
        return all(self._pod_fits_schedulable(job.zone, pod) for pod in job.pods)

    def _pod_fits_schedulable(self, zone: Zone, pod: Shape) -> bool:
        if zone not in self._nodes:
            return True  # nodes of the zone unknown: no node constraint (section 3)
        cached = self._pod_fit_cache.get((zone, pod))
        if cached is None:
            nodes = self._nodes[zone]
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
        best = Fraction(0)
        for resource in sorted(info.used):
            used = info.used[resource]
            if used <= 0:
                continue
            minimum = info.min.get(resource, 0)
            if minimum <= 0:
                share = _INFINITE_SHARE
                break
            exact = Fraction(used, minimum)
            if exact > best:
                best = exact
                share = (0, used / minimum, exact.numerator, exact.denominator)
        self._share_cache[info.path] = share
        return share

    # ------------------------------------------------------------------ the decision pass

    def decide(self, now: Millis) -> list[Decision]:
        """Run one decision pass at ``now``; its decisions are already applied to the state."""
        self._now = now
        if self._last_pass_now is None or now != self._last_pass_now:
            # Time moved: min-runtime protections may have ended, so reclaim can differ.
            self._version += 1
        self._last_pass_now = now
        self._passes += 1
        decisions: list[Decision] = self._announcements()
        if self._tree.root is not None:
            try:
                _Pass(self, decisions).run()
            finally:
                self._end_pass_admissions()
        return decisions

    def _announcements(self) -> list[Decision]:
        out: list[Decision] = []
        for key in self._announce:
            job = self._jobs.get(key)
            if job is None or job.announced is None or not self.config.decides_for(job.zone):
                continue
            if job.state == UNMAPPED:
                out.append(Unmapped(workload=key, zone=job.zone, reason=job.announced))
            elif job.state == INADMISSIBLE and job.leaf is not None:
                out.append(
                    Inadmissible(
                        workload=key,
                        queue=self._tree.nodes[job.leaf].queue,
                        quota=job.leaf,
                        reason=job.announced,
                    )
                )
        self._announce = {}
        return out

    def _refresh_pruning(self) -> None:
        """Bring the per-node pruning data (lowest request, reclaim potential) up to date."""
        if not self._dirty:
            return
        stale_inner: set[QuotaPath] = set()
        for leaf in sorted(self._dirty):
            info = self._tree.nodes.get(leaf)
            queue = self._queues.get(leaf)
            if info is None or queue is None:
                continue
            low = _lowest(list(queue.shapes))
            if low != self._low.get(leaf):
                self._low[leaf] = low
                stale_inner.update(a.path for a in info.ancestors[:-1])
            potential = 1 if self._has_potential(info, queue) else 0
            delta = potential - self._leaf_potential.get(leaf, 0)
            if delta:
                self._leaf_potential[leaf] = potential
                for ancestor in info.ancestors:
                    self._potential[ancestor.path] = self._potential.get(ancestor.path, 0) + delta
        self._dirty = set()
        nodes = self._tree.nodes
        for path in sorted(stale_inner, key=lambda p: (-nodes[p].depth, p)):
            self._low[path] = _combine_lowest([self._low.get(c) for c in nodes[path].children])

    def _has_potential(self, info: QuotaNodeInfo, queue: Queue) -> bool:
        """Whether something in the queue might preempt (so it must be visited even if full)."""
        if not queue.entries:
            return False
        if info.within_quota == "LowerPriority" and info.path in self._leaf_admitted:
            return True
        if any(self._within_min(info, shape) for shape in queue.shapes):
            return True
        return any(self._jobs[k].leaf == info.path for k in self._held)

    def _viable_leaves(self) -> list[QuotaPath]:
        """Leaves whose queue could admit or preempt something now, in tree order."""
        self._refresh_pruning()
        assert self._tree.root is not None
        root = self._tree.nodes[QuotaPath(self._tree.root.name)]
        found: list[QuotaPath] = []
        stack: list[tuple[QuotaNodeInfo, dict[str, int]]] = [(root, {})]
        while stack:
            info, above = stack.pop()
            room = dict(above)
            used = info.used
            for resource, cap in info.cap.items():
                free = cap - used.get(resource, 0)
                if resource not in room or free < room[resource]:
                    room[resource] = free
            if not self._potential.get(info.path, 0) and not _low_fits(
                self._low.get(info.path), room
            ):
                continue
            if info.is_leaf:
                found.append(info.path)
            else:
                nodes = self._tree.nodes
                stack.extend((nodes[c], room) for c in reversed(info.children))
        return found

    # ------------------------------------------------------------------ reclaim

    def _reclaim(self, job: Job) -> list[tuple[Job, Reason]] | None:
        """Victims that make room for ``job`` (section 5), already removed from usage."""
        assert job.leaf is not None
        leaf = self._tree.nodes[job.leaf]
        within = self._within_min(leaf, job.shape)
        lower = leaf.within_quota == "LowerPriority"
        if not within and not lower:
            return None
        if not all(self._pod_fits_schedulable(job.zone, pod) for pod in job.pods):
            return None  # no eviction can make a too-large pod fit
        if self._stops and self._fits_once_stopped(job):
            return None  # room is coming: preempting more would take what is not needed
        memo = (job.leaf, job.shape, job.priority if lower else 0, job.zone)
        if self._reclaim_failed.get(memo) == self._version:
            return None
        cross = self._cross_leaf_candidates(job) if within else iter(())
        same = self._same_leaf_candidates(job) if lower else iter(())
        candidates = chain(((v, True) for v in cross), ((v, False) for v in same))
        removed = self._remove_until_fits(job, candidates)
        if removed is None:
            self._reclaim_failed[memo] = self._version
            return None
        return self._put_back(job, removed)

    def _remove_until_fits(
        self, job: Job, candidates: Iterator[tuple[Job, bool]]
    ) -> list[tuple[Job, Reason]] | None:
        removed: list[tuple[Job, Reason]] = []
        for victim, cross in candidates:
            assert victim.used_path is not None
            if cross:
                why = self._borrowing_reason(job, victim.used_path)
                if why is None:
                    continue  # its leaf is no longer borrowing: it keeps running
            else:
                assert job.leaf is not None
                why = reasons.lower_priority(job.key, job.priority, victim.priority, job.leaf)
            self._unaccount(victim.used_path, victim.used_shape, victim.zone)
            removed.append((victim, why))
            if self._fits(job):
                return removed
        for victim, _ in reversed(removed):
            assert victim.used_path is not None
            self._account(victim.used_path, victim.used_shape, victim.zone)
        return None

    def _put_back(self, job: Job, removed: list[tuple[Job, Reason]]) -> list[tuple[Job, Reason]]:
        """Minimal victim set: return, in reverse order, every victim W still fits beside."""
        for index in range(len(removed) - 1, -1, -1):
            victim = removed[index][0]
            assert victim.used_path is not None
            self._account(victim.used_path, victim.used_shape, victim.zone)
            if self._fits(job):
                del removed[index]
            else:
                self._unaccount(victim.used_path, victim.used_shape, victim.zone)
        return removed

    def _cross_leaf_candidates(self, job: Job) -> Iterator[Job]:
        """Other leaves' borrowers, nearest in the tree first, lazily (section 5).

        Level by level from the parent up to the root: the leaves whose deepest common
        ancestor with ``job``'s leaf is that node. Inside a level, the per-leaf lists (already
        in reclaim order) are merged, so a reclaim that needs one victim costs little.
        """
        assert job.leaf is not None
        nodes = self._tree.nodes
        path = nodes[job.leaf].ancestors
        vanished = self._vanished_by_depth(job.leaf, len(path) - 1)
        for level in range(len(path) - 2, -1, -1):
            inner = set(self._tree.leaves_under.get(path[level + 1].path, ()))
            leaves = [
                leaf
                for leaf in self._tree.leaves_under.get(path[level].path, ())
                if leaf not in inner and leaf in self._leaf_admitted
            ]
            leaves.extend(vanished.get(level + 1, ()))
            yield from self._merged_victims(job, leaves)

    def _vanished_by_depth(self, leaf: QuotaPath, deepest: int) -> dict[int, list[QuotaPath]]:
        """Admitted usage recorded on leaves that no longer exist, by common depth."""
        mine = leaf.split("/")
        out: dict[int, list[QuotaPath]] = {}
        for path in sorted(p for p in self._leaf_admitted if p not in self._tree.nodes):
            depth = min(_common_depth(mine, path.split("/")), deepest)
            out.setdefault(depth, []).append(path)
        return out

    def _merged_victims(self, job: Job, leaves: list[QuotaPath]) -> Iterator[Job]:
        lists = []
        for leaf in leaves:
            if self._borrowing_reason(job, leaf) is not None:
                lists.append(self._leaf_admitted[leaf])
        for victim_key in heapq.merge(*lists):
            victim = self._jobs[victim_key[3]]
            assert victim.used_path is not None
            if self._protected(victim):
                continue
            if self._now - victim.admitted_ms >= self._min_runtime(victim.used_path):
                yield victim

    def _same_leaf_candidates(self, job: Job) -> Iterator[Job]:
        """Strictly lower-priority workloads of ``job``'s own leaf, in reclaim order."""
        assert job.leaf is not None
        runtime = self._min_runtime(job.leaf)
        for victim_key in list(self._leaf_admitted.get(job.leaf, ())):
            if victim_key[0] >= job.priority:
                break  # sorted by priority: nothing further is lower
            victim = self._jobs[victim_key[3]]
            if not self._protected(victim) and self._now - victim.admitted_ms >= runtime:
                yield victim

    def _end_pass_admissions(self) -> None:
        """The pass is over: its admissions become reclaim candidates like any other."""
        for key in sorted(self._pass_admitted):
            job = self._jobs.get(key)
            if job is not None and job.state == ADMITTED and job.used_path is not None:
                insort(self._leaf_admitted.setdefault(job.used_path, []), job.victim_key)
        self._pass_admitted = set()

    def _protected(self, victim: Job) -> bool:
        """Never a victim: admitted by this very pass (the ledger may yet refuse it), or a
        preemptor whose own victims still stop (the ledger holds it, it is not admitted).
        ADMISSION-RULES R6."""
        return victim.key in self._pass_admitted or victim.key in self._stops

    def _fits_once_stopped(self, job: Job) -> bool:
        """Whether ``job`` fits on quota once every stopping victim has stopped."""
        assert job.leaf is not None
        for info in self._tree.nodes[job.leaf].ancestors:
            for resource, amount in job.shape:
                limit = info.cap.get(resource)
                claim = info.used.get(resource, 0) - info.residual.get(resource, 0)
                if limit is not None and claim + amount > limit:
                    return False
        return True

    # ------------------------------------------------------------------ stopping victims

    def _begin_stop(self, preemptor: WorkloadKey, victim: WorkloadKey, where: Placement) -> None:
        """``victim`` was preempted for ``preemptor``: its usage counts until it is seen
        stopped, with the preemptor's hold carved out of it (ADMISSION-RULES R7)."""
        if self.config.instant_release:
            return
        self._end_stop(victim)  # one group per victim, whatever a log says (hostile input)
        group = self._stops.get(preemptor)
        if group is None:
            holder = self._jobs.get(preemptor)
            hold: Placement | None = None
            if holder is not None and holder.used_path is not None:
                hold = (holder.used_path, holder.used_shape, holder.zone)
            group = self._stops[preemptor] = StopGroup(preemptor, hold)
        self._stopping[victim] = preemptor
        self._regroup(group, lambda: group.victims.__setitem__(victim, where))

    def _end_stop(self, victim: WorkloadKey) -> None:
        """``victim`` was seen stopped (or its preemption undone): its residual leaves."""
        preemptor = self._stopping.pop(victim, None)
        if preemptor is None:
            return
        group = self._stops[preemptor]
        self._regroup(group, lambda: group.victims.pop(victim, None))

    def _preemptor_gone(self, preemptor: WorkloadKey) -> None:
        """The preemptor finished or was deleted: its victims count whole until they stop."""
        group = self._stops.get(preemptor)
        if group is not None and group.hold is not None:

            def drop() -> None:
                group.hold = None

            self._regroup(group, drop)

    def _regroup(self, group: StopGroup, change: Callable[[], object]) -> None:
        """Apply ``change`` to a group, moving its residual from the old to the new value."""
        self._account_residual(group, {}, {})
        change()
        if not group.victims:
            del self._stops[group.preemptor]
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
            _shift(self._zone_used.setdefault(zone, {}), amounts, -1)
        group.residual, group.zone_residual = nodes, zones
        for path, amounts in nodes.items():
            self._shift_node(path, amounts, 1)
        for zone, amounts in zones.items():
            _shift(self._zone_used.setdefault(zone, {}), amounts, 1)
        self._version += 1

    def _shift_node(self, path: QuotaPath, amounts: dict[str, int], sign: int) -> None:
        info = self._tree.nodes.get(path)
        if info is None:
            return  # the node vanished with a tree change: its usage went with it
        _shift(info.used, amounts, sign)
        _shift(info.residual, amounts, sign)
        self._share_cache.pop(path, None)
        if info.is_leaf:
            self._dirty.add(path)

    def _borrowing_reason(self, job: Job, path: QuotaPath) -> Reason | None:
        """Why the leaf at ``path`` counts as borrowing a resource ``job`` needs, or None."""
        assert job.leaf is not None
        info = self._tree.nodes.get(path)
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

    # ------------------------------------------------------------------ time

    def next_wakeup(self) -> Millis | None:
        """The next instant a min-runtime protection ends (a pass should run then)."""
        heap = self._wakeups
        while heap:
            end, seq, key = heap[0]
            job = self._jobs.get(key)
            stale = job is None or job.state != ADMITTED or job.admit_seq != seq
            if stale or end <= self._now:
                heapq.heappop(heap)
                continue
            return Millis(end)
        return None

    # ------------------------------------------------------------------ queries

    def queues(self) -> dict[QueueName, list[QueueEntry]]:
        """Every queue with its pending workloads in order."""
        out: dict[QueueName, list[QueueEntry]] = {}
        for queue in self._queues.values():
            out[queue.name] = [
                QueueEntry(job=key, position=i + 1, priority=-neg)
                for i, (neg, _, key) in enumerate(queue.entries)
            ]
        return out

    def job_state(self, key: WorkloadKey) -> JobView | None:
        """What the engine knows about one workload, or None if unknown (or deleted)."""
        job = self._jobs.get(key)
        if job is None:
            return None
        queue: QueueName | None = None
        quota: QuotaPath | None = None
        position: int | None = None
        if job.state == ADMITTED or (job.state == FINISHED and job.leaf is not None):
            quota = job.used_path or job.leaf
        else:
            quota = job.leaf
        if quota is not None and quota in self._tree.nodes:
            queue = self._tree.nodes[quota].queue
        if job.state == PENDING and job.leaf is not None:
            position = self._queues[job.leaf].position(job)
        return JobView(
            job=key,
            state=job.state,
            queue=queue,
            quota=quota,
            position=position,
            priority=job.priority,
            reason=self.reason(key),
        )

    def jobs(self) -> dict[WorkloadKey, JobView]:
        """Every known workload (deleted ones are gone), by key."""
        out: dict[WorkloadKey, JobView] = {}
        for key in sorted(self._jobs):
            view = self.job_state(key)
            assert view is not None
            out[key] = view
        return out

    def quota_used(self) -> dict[QuotaPath, dict[str, int]]:
        """Used amounts of every node of the tree in force (leaves and inner nodes)."""
        return {
            path: {r: a for r, a in sorted(info.used.items()) if a != 0}
            for path, info in self._tree.nodes.items()
        }

    def quota_nodes(self) -> dict[QuotaPath, tuple[dict[str, int], dict[str, int]]]:
        """``(min, max)`` of every node of the tree in force, for reports."""
        return {path: (dict(i.min), dict(i.max)) for path, i in self._tree.nodes.items()}

    def reason(self, key: WorkloadKey) -> Reason | None:
        """Why a workload is where it is now (None for admitted or finished ones)."""
        job = self._jobs.get(key)
        if job is None or job.state in (ADMITTED, FINISHED):
            return None
        if job.state in (UNMAPPED, INADMISSIBLE):
            return job.announced
        return self._pending_reason(job)

    def _pending_reason(self, job: Job) -> Reason:
        if job.note is not None and job.note_pass == self._passes:
            return job.note
        if job.key in self._stopping:
            return self._still_stopping(job.key)
        unserved = self._not_served(job)
        if unserved is not None:
            return unserved
        if self._passes <= job.arrived_pass:
            return reasons.not_yet_evaluated("arrived after the last decision pass")
        if not self.config.decides_for(job.zone):
            return reasons.not_yet_evaluated(f"decided by the dequeuer of zone {job.zone}")
        assert job.leaf is not None
        queue = self._queues[job.leaf]
        if self.config.policy == "Block":
            head = self._head(queue)
            if head is not None and head != job.key:
                return reasons.blocked_by_head(head, queue.name)
        shortfall = self._quota_shortfall(job)
        if shortfall is not None:
            return shortfall
        zone = self._zone_shortfall(job)
        if zone is not None:
            return zone
        return reasons.not_yet_evaluated("fits now; the next decision pass will admit it")

    def _still_stopping(self, key: WorkloadKey) -> Reason:
        return reasons.victim_stopping(key, self._stopping[key])

    def _head(self, queue: Queue) -> WorkloadKey | None:
        for _, _, key in queue.entries:
            if self._decides(self._jobs[key].zone):
                return key
        return None

    def _quota_shortfall(self, job: Job) -> Reason | None:
        assert job.leaf is not None
        # Nearest node first: the leaf or department a person can act on.
        for info in reversed(self._tree.nodes[job.leaf].ancestors):
            for resource, amount in job.shape:
                cap = info.cap.get(resource)
                used = info.used.get(resource, 0)
                if cap is None or used + amount <= cap:
                    continue
                holder = self._holder_on(info.path, job.key)
                if holder is not None:
                    return reasons.held_for_preemptor(
                        info.path, resource, used, amount, cap, holder
                    )
                stopping = info.residual.get(resource, 0)
                if stopping > 0 and used - stopping + amount <= cap:
                    return reasons.victims_still_stopping(
                        info.path, resource, used, amount, cap, stopping
                    )
                return reasons.quota_exceeded(
                    info.path,
                    resource,
                    used,
                    amount,
                    info.max[resource],
                    cap,
                    self.config.oversell_rate,
                )
        return None

    def _holder_on(self, path: QuotaPath, asking: WorkloadKey) -> WorkloadKey | None:
        for key in sorted(self._held):
            holder = self._jobs[key]
            if (
                key != asking
                and holder.used_path is not None
                and any(n.path == path for n in self._path_nodes(holder.used_path))
            ):
                return key
        return None

    def _zone_shortfall(self, job: Job) -> Reason | None:
        if job.zone not in self._nodes:
            return None
        cap = self._zone_cap.get(job.zone, {})
        used = self._zone_used.get(job.zone, {})
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
        """Why a workload waits, worked out from the state as it is now (no pass needed).

        ``reason`` answers as of the last decision pass; a state rebuilt from the log has run
        none. This says: a held preemptor waits for its victims to stop; under Block, a head
        that does not fit blocks the rest; else the nearest node whose ``max x oversellRate``
        would be exceeded, the zone's room, or "fits now". Unmapped and inadmissible workloads
        keep their announced reason. The state is left unchanged.
        """
        job = self._jobs.get(key)
        if job is None or job.state in (ADMITTED, FINISHED):
            return None
        if job.state in (UNMAPPED, INADMISSIBLE) or job.leaf is None:
            return job.announced
        if key in self._stopping:
            return self._still_stopping(key)
        unserved = self._not_served(job)
        if unserved is not None:
            return unserved
        if job.held:
            return Reason(
                code="PreemptionInProgress",
                message="capacity freed by its preemption is held for it until its victims stop",
            )
        if self.config.policy == "Block":
            queue = self._queues[job.leaf]
            head = self._head(queue)
            if head is not None and head != key and self._shortfall_now(self._jobs[head]):
                return reasons.blocked_by_head(head, queue.name)
        found = self._shortfall_now(job)
        return found or reasons.not_yet_evaluated("fits now; the next decision pass admits it")

    def _shortfall_now(self, job: Job) -> Reason | None:
        if job.held:
            return None
        return self._quota_shortfall(job) or self._zone_shortfall(job)

    def admission_shortfall(
        self, key: WorkloadKey, quota: QuotaPath, requests: dict[str, int]
    ) -> Reason | None:
        """What stops ``requests`` on ``quota`` now, as the ledger checks it; None if they fit.

        On every node root..``quota`` that exists and names the resource in ``max``:
        ``used + requested <= max x oversellRate``. Capacity held for ``key`` itself (a
        preemptor about to be admitted) is set aside; zone capacity is not checked (the ledger
        does not arbitrate it). The state is left unchanged.
        """
        job = self._jobs.get(key)
        own_paths: set[QuotaPath] = set()
        own: dict[str, int] = {}
        if job is not None and job.held and job.used_path is not None:
            own_paths = {node.path for node in self._path_nodes(job.used_path)}
            own = dict(job.used_shape)
        for info in reversed(self._path_nodes(quota)):
            mine = own if info.path in own_paths else {}
            for resource, amount in shape_of(requests):
                cap = info.cap.get(resource)
                used = info.used.get(resource, 0) - mine.get(resource, 0)
                if cap is None or used + amount <= cap:
                    continue
                path, holder = info.path, self._holder_on(info.path, key)
                if holder is not None:
                    return reasons.held_for_preemptor(path, resource, used, amount, cap, holder)
                rate = self.config.oversell_rate
                return reasons.quota_exceeded(
                    path, resource, used, amount, info.max[resource], cap, rate
                )
        return None

    def reclaim_preview(self, key: WorkloadKey, now: Millis) -> tuple[str | None, list[Preempted]]:
        """Dry run of reclaim for a waiting workload: whom a pass at ``now`` would preempt.

        ``(None, victims)`` when reclaim would make room (the minimal victim set of section 5,
        as the ``Preempted`` decisions a pass would make), else ``(why not, [])``. Nothing is
        decided: usage, caches, the clock and the pruning data are put back exactly as they
        were.
        """
        job = self._jobs.get(key)
        if job is None or job.state != PENDING or job.leaf is None:
            return f"it is not waiting in a queue ({'unknown' if job is None else job.state})", []
        if job.held:
            return "capacity is already held for it: its victims are stopping", []
        if self._fits(job):
            return "it fits without preempting anything; the next decision pass admits it", []
        refusal = self._reclaim_refusal(job)
        if refusal is not None:
            return refusal, []
        saved = (self._now, set(self._dirty), dict(self._share_cache), dict(self._reclaim_failed))
        self._now = now
        try:
            removed = self._reclaim(job)
            if removed is None:
                return (
                    "no set of borrowing workloads elsewhere (or lower-priority ones of its own "
                    "leaf, with LowerPriority) would make room; workloads within their minimum "
                    "runtime are protected",
                    [],
                )
            victims = [self._preview_victim(job, victim, why) for victim, why in removed]
            for victim, _ in removed:
                assert victim.used_path is not None
                self._account(victim.used_path, victim.used_shape, victim.zone)
            return None, victims
        finally:
            self._now, self._dirty, self._share_cache, self._reclaim_failed = saved

    def _reclaim_refusal(self, job: Job) -> str | None:
        from usher.core.quantity import format_quantity

        assert job.leaf is not None
        info = self._tree.nodes[job.leaf]
        if not all(self._pod_fits_schedulable(job.zone, pod) for pod in job.pods):
            return f"no schedulable node of zone {job.zone} can host one of its pods"
        if self._within_min(info, job.shape) or info.within_quota == "LowerPriority":
            return None
        for resource, amount in job.shape:
            used, minimum = info.used.get(resource, 0), info.min.get(resource, 0)
            if used + amount > minimum:
                return (
                    f"{job.leaf} {resource} {format_quantity(resource, used)} used + "
                    f"{format_quantity(resource, amount)} requested > min "
                    f"{format_quantity(resource, minimum)}: reclaim only restores a guarantee, "
                    "and within-quota preemption is Never"
                )
        return None

    def _preview_victim(self, job: Job, victim: Job, why: Reason) -> Preempted:
        assert victim.used_path is not None
        info = self._tree.nodes.get(victim.used_path)
        queue = info.queue if info is not None and info.queue is not None else QueueName("")
        return Preempted(
            workload=victim.key, queue=queue, quota=victim.used_path, preemptor=job.key, reason=why
        )


class _Pass:
    """One decision pass: queues offer candidates, the best is tried, until none is left."""

    def __init__(self, engine: Engine, decisions: list[Decision]) -> None:
        self.e = engine
        self.decisions = decisions
        self.heap: list[tuple[OfferKey, int, QuotaPath]] = []
        self.live: dict[QuotaPath, int] = {}
        self.offered: dict[QuotaPath, Job] = {}
        self.cursor: dict[QuotaPath, SortKey] = {}
        self.closed: set[QuotaPath] = set()
        self.tried: set[WorkloadKey] = set()
        self.stamp = 0
        self.block = engine.config.policy == "Block"

    def run(self) -> None:
        for leaf in self.e._viable_leaves():
            self.offer(leaf)
        while self.heap:
            if self.nothing_can_move():
                break
            _, stamp, leaf = heapq.heappop(self.heap)
            if self.live.get(leaf) != stamp:
                continue
            del self.live[leaf]
            job = self.offered.pop(leaf)
            if not self.queue_viable(leaf):
                continue  # nothing left in it can fit or preempt until something changes
            self.tried.add(job.key)
            if not self.try_candidate(job) and self.block:
                self.closed.add(leaf)
                continue
            self.cursor[leaf] = job.sort_key
            self.offer(leaf)

    def nothing_can_move(self) -> bool:
        """True when the root has no room for any pending shape and nobody may preempt.

        Ends a pass early: once the cluster is full, the remaining candidates would all be
        tried and fail, which changes nothing.
        """
        e = self.e
        root = e._tree.nodes[QuotaPath(e._tree.root.name)] if e._tree.root is not None else None
        if root is None or e._potential.get(root.path, 0):
            return False
        room = {r: cap - root.used.get(r, 0) for r, cap in root.cap.items()}
        return not _low_fits(e._low.get(root.path), room)

    def offer(self, leaf: QuotaPath) -> None:
        """Push the queue's next untried workload, if anything in it could still move."""
        if leaf in self.closed or not self.queue_viable(leaf):
            return
        job = self.next_untried(leaf)
        if job is None:
            return
        info = self.e._tree.nodes[leaf]
        # A held preemptor's own hold is already counted in its leaf's usage.
        key: OfferKey = (
            0 if self.e._within_min(info, () if job.held else job.shape) else 1,
            self.e._share(info),
            job.sort_key,
        )
        self.stamp += 1
        heapq.heappush(self.heap, (key, self.stamp, leaf))
        self.live[leaf] = self.stamp
        self.offered[leaf] = job

    def next_untried(self, leaf: QuotaPath) -> Job | None:
        queue = self.e._queues[leaf]
        cursor = self.cursor.get(leaf)
        index = 0 if cursor is None else bisect_right(queue.entries, cursor)
        entries = queue.entries
        jobs = self.e._jobs
        decides_for = self.e._decides
        while index < len(entries):
            key = entries[index][2]
            job = jobs[key]
            if key not in self.tried and decides_for(job.zone):
                return job
            index += 1
        return None

    def queue_viable(self, leaf: QuotaPath) -> bool:
        """Whether some untried workload of the queue fits now or could preempt."""
        e = self.e
        queue = e._queues[leaf]
        info = e._tree.nodes[leaf]
        cursor = self.cursor.get(leaf)
        for shape, group in queue.shapes.items():
            if cursor is not None and group[-1] <= cursor:
                continue
            if e._fits_quota(leaf, shape) or e._within_min(info, shape):
                return True
        if cursor is not None and (not queue.entries or queue.entries[-1] <= cursor):
            return False
        if info.within_quota == "LowerPriority" and leaf in e._leaf_admitted:
            return True
        return any(e._jobs[k].leaf == leaf for k in e._held)

    def try_candidate(self, job: Job) -> bool:
        """Admit ``job`` if it fits, else after reclaim; False if it stays pending."""
        e = self.e
        if job.key in e._stopping:
            return False  # preempted, not seen stopped yet: the ledger would refuse it
        if job.held:
            e._drop_hold(job)  # its own hold is what it may use now
        if e._fits(job):
            self.admit(job)
            return True
        victims = e._reclaim(job)
        if victims is None:
            return False
        placements = self.preempt(job, victims)
        self.admit(job)
        e._preemptors[job.key] = None
        for victim, where in placements:
            e._begin_stop(job.key, victim, where)
        self.reopen(victims)
        return True

    def admit(self, job: Job) -> None:
        e = self.e
        assert job.leaf is not None
        leaf = job.leaf
        e._note_shapes(leaf, e._queues[leaf].remove(job))
        queue = e._tree.nodes[leaf].queue
        assert queue is not None
        e._admit(job, leaf, job.shape, in_pass=True)
        self.decisions.append(
            Admitted(
                workload=job.key,
                queue=queue,
                quota=leaf,
                zone=job.zone,
                requests=dict(job.shape),
                priority=job.priority,
            )
        )

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
            info = e._tree.nodes.get(quota)
            queue = info.queue if info is not None and info.queue is not None else QueueName("")
            # Usage was already removed by reclaim; restore it so _unadmit removes it once.
            e._account(quota, victim.used_shape, victim.zone)
            e._unadmit(victim)
            e._classify(victim)
            e._set_note(victim, why)
            self.tried.add(victim.key)  # not reconsidered before the next pass
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

    def reopen(self, victims: list[tuple[Job, Reason]]) -> None:
        """After a preemption: refresh the victims' queues and open any queue it unblocked."""
        for victim, _ in victims:
            leaf = victim.leaf
            if leaf is not None and leaf in self.live:
                self.offer(leaf)
        for leaf in self.e._viable_leaves():
            if leaf not in self.live:
                self.offer(leaf)


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


def _common_depth(left: list[str], right: list[str]) -> int:
    depth = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        depth += 1
    return depth


def _lowest(shapes: list[Shape]) -> dict[str, int] | None:
    """Per resource, the least any shape needs (only resources every shape needs)."""
    if not shapes:
        return None
    low = dict(shapes[0])
    for shape in shapes[1:]:
        amounts = dict(shape)
        low = {r: min(a, amounts[r]) for r, a in low.items() if r in amounts}
    return low


def _combine_lowest(lows: list[dict[str, int] | None]) -> dict[str, int] | None:
    present = [low for low in lows if low is not None]
    if not present:
        return None
    low = dict(present[0])
    for other in present[1:]:
        low = {r: min(a, other[r]) for r, a in low.items() if r in other}
    return low


def _low_fits(low: dict[str, int] | None, room: dict[str, int]) -> bool:
    if low is None:
        return False
    for resource, amount in low.items():
        free = room.get(resource)
        if free is not None and amount > free:
            return False
    return True
