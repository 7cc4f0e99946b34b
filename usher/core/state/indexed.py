"""In-memory state of the decision core: the indexed quota tree, workloads and queues.

What it does: compact, slot-based records the engine mutates incrementally (used per node,
sorted queues, request shapes) so a pass never re-sorts or rescans everything.
What it must never do: decide anything (that is ``engine``/``reclaim``), perform I/O, read a
clock, or iterate an unordered collection where order matters.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from enum import StrEnum

from schemas import (
    Millis,
    QueueName,
    QuotaNode,
    QuotaPath,
    Reason,
    RetryAsk,
    TopologyAsk,
    TopologyPin,
    WorkloadKey,
    WorkloadObserved,
    Zone,
)
from usher.core.model.config import EngineConfig, ReadinessPolicy, WithinQuota
from usher.core.rules.arbitration import effective_cap
from usher.core.rules.fairshare import DEFAULT_WEIGHT, fair_weight
from usher.core.rules.lending import LENDS_ALL, Lending, node_lending, reserving_nodes
from usher.core.rules.preemption_policy import DEFAULT_POLICY, preemption_policy
from usher.core.rules.readiness import Readiness, readiness_policy
from usher.core.rules.reclaim import NodePolicy, node_policy
from usher.core.rules.retry import RetryPolicy, retry_policy
from usher.core.tree.budget_spec import Budget, holds_overrun, parse_budgets
from usher.core.tree.quota_tree import iter_nodes, queue_name
from usher.core.tree.zone_burst import burst_zones, default_zones
from usher.core.tree.zone_quota import ZoneCaps, parse_zone_max, parse_zone_min
from usher.core.values.registry import (
    BACKFILL,
    DEFAULT_STARVATION_SECONDS,
    STARVATION,
    TOPOLOGY_LEVELS,
)

Shape = tuple[tuple[str, int], ...]
"""A request as a sorted tuple of ``(resource, amount)`` with amount > 0; hashable, shared."""

SortKey = tuple[int, int, WorkloadKey]
"""Order inside a queue: ``(-priority, created_ms, namespace/name)`` ascending (section 2)."""

Scalable = tuple[str, Shape, int, int]
"""The pod set that may start with fewer pods (R11): its name, per-pod request, the pods it
asks for and the fewest it may start with."""

VictimKey = tuple[int, int, int, WorkloadKey]
"""Reclaim order inside one leaf: lowest priority, most recently admitted, then name."""


class JobState(StrEnum):
    """Where a job stands, for the engine and for people; the values are what Usher prints.

    The engine holds a workload in one of the first five (``ENGINE_STATES``). ``Rejected`` and
    ``Deleted`` are known only around it, from the log: a manifest the watcher could not read
    is never queued, and a deleted workload is gone from the engine.
    """

    PENDING = "Pending"
    ADMITTED = "Admitted"
    FINISHED = "Finished"
    INADMISSIBLE = "Inadmissible"
    UNMAPPED = "Unmapped"
    REJECTED = "Rejected"
    """The watcher could not read the manifest (``WorkloadRejected``): never queued."""
    DELETED = "Deleted"
    """Deleted since (``usher explain`` of a workload the log once held)."""


# The engine's short names for its states (the enum's members, not copies).
PENDING = JobState.PENDING
ADMITTED = JobState.ADMITTED
FINISHED = JobState.FINISHED
INADMISSIBLE = JobState.INADMISSIBLE
UNMAPPED = JobState.UNMAPPED

ENGINE_STATES = (PENDING, ADMITTED, FINISHED, INADMISSIBLE, UNMAPPED)
"""The states a workload can have inside the engine, in the order Usher lists them."""


def shape_of(resources: dict[str, int]) -> Shape:
    """The canonical shape of a request (zero amounts dropped: they constrain nothing)."""
    return tuple(sorted((r, a) for r, a in resources.items() if a > 0))


def total_requests(event: WorkloadObserved) -> dict[str, int]:
    """What all the pods of a workload request together, in canonical units."""
    total: dict[str, int] = {}
    for pod_set in event.pod_sets:
        for resource, amount in pod_set.requests.items():
            if pod_set.count > 0 and amount > 0:
                total[resource] = total.get(resource, 0) + amount * pod_set.count
    return total


def shape_with(shape: Shape, scalable: Scalable, pods: int) -> Shape:
    """``shape`` (the whole request) with the scalable pod set at ``pods`` pods (R11)."""
    _, pod, count, _ = scalable
    total = dict(shape)
    for resource, amount in pod:
        total[resource] = total.get(resource, 0) - amount * (count - pods)
    return shape_of(total)


class QuotaNodeInfo:
    """One node of the tree in force, with its effective caps and inherited attributes."""

    __slots__ = (
        "ancestors",
        "backfill",
        "cap",
        "children",
        "default_zones",
        "depth",
        "is_leaf",
        "lending",
        "max",
        "min",
        "min_runtime_ms",
        "name",
        "namespaces",
        "parent",
        "path",
        "preemption",
        "queue",
        "readiness",
        "residual",
        "retry",
        "starvation_ms",
        "topology_levels",
        "used",
        "within_quota",
        "zone_max",
        "zone_min",
        "zone_used",
    )

    def __init__(self, path: QuotaPath, node: QuotaNode, parent: QuotaNodeInfo | None) -> None:
        self.path = path
        self.name = node.name
        self.parent: QuotaPath | None = parent.path if parent is not None else None
        self.depth: int = 0 if parent is None else parent.depth + 1
        self.min: dict[str, int] = dict(node.min)
        self.max: dict[str, int] = dict(node.max)
        self.cap: dict[str, int] = {}
        self.children: list[QuotaPath] = []
        self.is_leaf = not node.children
        self.namespaces = list(node.namespaces)
        self.queue: QueueName | None = None
        self.used: dict[str, int] = {}
        """Everything counted here: admissions, holds, and the residual of stopping victims."""
        self.residual: dict[str, int] = {}
        """The part of ``used`` that only stopping victims hold (ADMISSION-RULES R7): it
        counts for fit, not for ``min`` (borrowing, reclaim) -- it leaves once they stop."""
        self.within_quota: WithinQuota = "Never"
        self.min_runtime_ms = 0
        self.preemption = DEFAULT_POLICY
        """Who may preempt whom beyond R5's defaults (P1-P3), inherited down the tree."""
        self.readiness = ReadinessPolicy()
        """Ready timeout, requeue backoff and attempts, inherited down the tree (R10)."""
        self.retry = RetryPolicy()
        """Retry limit and OOM memory factor, inherited down the tree (R12, R13)."""
        self.starvation_ms = 0
        """How long a head may be passed over before capacity is reserved for it (N1); 0 = off."""
        self.backfill = False
        """Whether its workloads may backfill beside a reservation (N2, inherited)."""
        self.lending: Lending = LENDS_ALL
        """Whom its leaves reclaim from and what it lends of its idle guarantee (L1, L2)."""
        self.ancestors: tuple[QuotaNodeInfo, ...] = ()
        self.zone_max: ZoneCaps = parse_zone_max(node.attributes, "")[0]
        """Per zone, what this node's subtree may use there (Z1); empty = no zone cap."""
        self.zone_min: ZoneCaps = parse_zone_min(node.attributes, "")[0]
        """Per zone, what this node is guaranteed there (Z4); empty = no zone guarantee."""
        self.zone_used: ZoneCaps = {}
        """Per capped or guaranteed zone, what admissions, holds and lingering usage count
        there (Z1, Z4): stopping victims' residual is not in it (it is a claim, R7)."""
        self.default_zones: tuple[Zone, ...] = default_zones(
            node.attributes, parent.default_zones if parent is not None else ()
        )
        """The accepted zones of workloads below that list none (Z3, inherited); empty: none."""
        levels = TOPOLOGY_LEVELS.read(node.attributes)
        self.topology_levels: tuple[str, ...] = (
            tuple(levels)
            if levels is not None
            else (parent.topology_levels if parent is not None else ())
        )
        """The topology levels its workloads may ask for, widest first (TP1, inherited)."""


class TreeIndex:
    """The quota tree in force, indexed by path, namespace, node name and queue."""

    __slots__ = (
        "backfill_on",
        "budgets",
        "burst",
        "by_name",
        "fair_weights",
        "leaf_of_namespace",
        "least_starvation_ms",
        "leaves",
        "leaves_under",
        "nodes",
        "overrun_leaves",
        "overrun_nodes",
        "queue_leaf",
        "reserving",
        "root",
        "starvation_on",
        "zone_capped",
        "zone_counted",
        "zone_guaranteed",
    )

    def __init__(self, root: QuotaNode | None, config: EngineConfig) -> None:
        self.root = root
        self.nodes: dict[QuotaPath, QuotaNodeInfo] = {}
        self.by_name: dict[str, QuotaPath] = {}
        self.leaf_of_namespace: dict[str, QuotaPath] = {}
        self.leaves: list[QuotaPath] = []
        self.queue_leaf: dict[QueueName, QuotaPath] = {}
        self.leaves_under: dict[QuotaPath, list[QuotaPath]] = {}
        """Every leaf below (or at) a node, in tree order: reclaim walks these level by level."""
        self.budgets: dict[QuotaPath, tuple[Budget, ...]] = {}
        """The budgets each node declares (B1); empty when none does (nothing is counted)."""
        self.starvation_on = False
        """Whether the starvation guard is on anywhere (N1; on by default): passes skip it when
        every node turns it off."""
        self.least_starvation_ms = 0
        """The shortest threshold in force anywhere the guard is on (0: off everywhere): no
        reservation starts before the longest-waiting head has waited that long."""
        self.backfill_on = False
        """Whether any leaf may backfill beside a reservation (N2)."""
        self.overrun_nodes: set[QuotaPath] = set()
        """Nodes whose budgets hold a declared runtime that would overrun them (B2)."""
        self.overrun_leaves: set[QuotaPath] = set()
        """Leaves below such a node; empty when none opts in (nothing is checked)."""
        self.zone_capped = False
        """Whether some node caps a zone (Z1): fit checks zone caps only then."""
        self.zone_guaranteed = False
        """Whether some node guarantees a zone (Z4): reclaim judges zone guarantees only then."""
        self.zone_counted = False
        """Whether either holds: False, no per-zone usage is counted on nodes at all."""
        self.reserving: frozenset[QuotaPath] = frozenset()
        """Nodes that keep idle guarantee for themselves, or above one that does (L1, L2):
        empty when no node restricts lending (fit checks then skip lending altogether)."""
        self.fair_weights: dict[QuotaPath, int] = {}
        """Each node's fair-share weight (F1: ``usher.io/fair-weight``, inherited, default 1)."""
        self.burst: frozenset[Zone] = (
            burst_zones(root.attributes) if root is not None else frozenset()
        )
        """The zones the root marks as burst (Z3); empty: every order is Z2's and R5's."""
        if root is not None:
            self._index(root, config)

    def _index(self, root: QuotaNode, config: EngineConfig) -> None:
        for path, node, parent_path in iter_nodes(root):
            parent = self.nodes[parent_path] if parent_path is not None else None
            info = QuotaNodeInfo(path, node, parent)
            info.cap = {r: effective_cap(m, config.oversell_rate) for r, m in info.max.items()}
            info.within_quota, info.min_runtime_ms = _inherited_attributes(node, parent, config)
            info.preemption = preemption_policy(
                node.attributes, parent.preemption if parent is not None else DEFAULT_POLICY
            )
            info.readiness = readiness_policy(
                node.attributes, parent.readiness if parent is not None else config.readiness
            )
            info.retry = retry_policy(
                node.attributes, parent.retry if parent is not None else RetryPolicy()
            )
            info.starvation_ms = _starvation_ms(node, parent)
            if info.starvation_ms > 0:
                self.starvation_on = True
                least = self.least_starvation_ms
                self.least_starvation_ms = (
                    min(least, info.starvation_ms) if least else (info.starvation_ms)
                )
            info.backfill = _backfill(node, parent)
            info.lending = node_lending(
                node.attributes, parent.lending if parent is not None else LENDS_ALL
            )
            self.backfill_on = self.backfill_on or (info.backfill and info.is_leaf)
            info.ancestors = (*parent.ancestors, info) if parent is not None else (info,)
            inherited = self.fair_weights[parent.path] if parent is not None else DEFAULT_WEIGHT
            self.fair_weights[path] = fair_weight(node.attributes, inherited)
            budgets, _ = parse_budgets(node.attributes, path, "")
            if budgets:
                self.budgets[path] = tuple(budgets)
                if holds_overrun(node.attributes):
                    self.overrun_nodes.add(path)
            self.zone_capped = self.zone_capped or bool(info.zone_max)
            self.zone_guaranteed = self.zone_guaranteed or bool(info.zone_min)
            self.zone_counted = self.zone_capped or self.zone_guaranteed
            self.nodes[path] = info
            self.by_name[node.name] = path
            if parent is not None:
                parent.children.append(path)
            if info.is_leaf:
                if any(ancestor.path in self.overrun_nodes for ancestor in info.ancestors):
                    self.overrun_leaves.add(path)
                info.queue = queue_name(path, node.namespaces[0] if node.namespaces else None)
                self.leaves.append(path)
                for ancestor in info.ancestors:
                    self.leaves_under.setdefault(ancestor.path, []).append(path)
                self.queue_leaf[info.queue] = path
                for namespace in node.namespaces:
                    self.leaf_of_namespace[namespace] = path
        self.reserving = reserving_nodes(
            (path, info.parent, info.lending) for path, info in self.nodes.items()
        )


def _inherited_attributes(
    node: QuotaNode, parent: QuotaNodeInfo | None, config: EngineConfig
) -> tuple[WithinQuota, int]:
    """A node's within-quota mode and min runtime: its own attribute, else its parent's."""
    inherited: NodePolicy = (
        (parent.within_quota, parent.min_runtime_ms)
        if parent is not None
        else (config.within_quota, config.min_runtime_ms)
    )
    return node_policy(node.attributes, inherited)


def _starvation_ms(node: QuotaNode, parent: QuotaNodeInfo | None) -> int:
    """The node's starvation threshold (N1): its own attribute (T1 checked it is whole
    seconds), else its parent's, else the default (on: no tree starves a head unless a node
    turns the guard off with ``0``)."""
    seconds = STARVATION.read(node.attributes)
    if seconds is not None:
        return seconds * 1000
    return parent.starvation_ms if parent is not None else DEFAULT_STARVATION_SECONDS * 1000


def _backfill(node: QuotaNode, parent: QuotaNodeInfo | None) -> bool:
    """Whether the node's workloads may backfill (N2): its own attribute (T1 checked it is
    ``"true"`` or ``"false"``), else its parent's, else no."""
    backfill = BACKFILL.read(node.attributes)
    if backfill is not None:
        return backfill
    return parent.backfill if parent is not None else False


class Job:
    """One workload as the engine tracks it (pending, admitted, finished, ...)."""

    __slots__ = (
        "admit_seq",
        "admitted_ms",
        "announced",
        "arrived_pass",
        "created_ms",
        "fit_shape",
        "grown",
        "held",
        "key",
        "leaf",
        "listed",
        "max_runtime_ms",
        "name",
        "namespace",
        "note",
        "note_pass",
        "pin",
        "pod_count",
        "pods",
        "priority",
        "priority_class",
        "quota_name",
        "readiness",
        "retry_ask",
        "scalable",
        "shape",
        "sort_key",
        "spec_priority",
        "state",
        "topology",
        "used_path",
        "used_shape",
        "victim_key",
        "zone",
        "zones",
    )

    def __init__(self, key: WorkloadKey, namespace: str, name: str) -> None:
        self.key = key
        self.namespace = namespace
        self.name = name
        self.zone: Zone = Zone("default")
        """Where it counts: its first accepted zone, or the zone it was admitted into (Z2)."""
        self.zones: tuple[Zone, ...] = ()
        """Every zone it accepts, most preferred first (Z2); empty: only ``zone``. Its own
        list, else the one its leaf's ``usher.io/zones`` gives it (Z3)."""
        self.listed: tuple[Zone, ...] = ()
        """The zones its own ``usher.io/zones`` annotation lists (Z2); empty: none."""
        self.priority_class: str | None = None
        self.spec_priority: int | None = None
        self.priority = 0
        self.created_ms: Millis = Millis(0)
        self.shape: Shape = ()
        self.scalable: Scalable | None = None
        """The pod set that may start smaller (R11); None: all-or-nothing."""
        self.fit_shape: Shape = ()
        """The least it may start with: ``shape``, or with ``scalable`` at its minimum. Queues
        group by it, so that pruning never skips a workload that could start partially."""
        self.pods: tuple[Shape, ...] = ()
        self.pod_count = 0
        """Pods of the whole gang (every pod set's count summed)."""
        self.quota_name: str | None = None
        self.state: JobState = PENDING
        self.leaf: QuotaPath | None = None
        self.sort_key: SortKey = (0, 0, key)
        self.admitted_ms: Millis = Millis(0)
        self.admit_seq = 0
        self.used_path: QuotaPath | None = None
        """Leaf path the admitted usage was recorded on (kept even if the leaf vanishes)."""
        self.used_shape: Shape = ()
        self.victim_key: VictimKey = (0, 0, 0, key)
        self.arrived_pass = 0
        self.note: Reason | None = None
        self.note_pass = -1
        self.held = False
        self.announced: Reason | None = None
        self.readiness: Readiness | None = None
        """Readiness after admission (R10); None until a ready timeout applied to it."""
        self.retry_ask: RetryAsk | None = None
        """Its own retry annotations (R12, R13); None: it carries none."""
        self.max_runtime_ms: int | None = None
        """Its declared maximum runtime (RT1); None: it declares none."""
        self.topology: TopologyAsk | None = None
        """Its topology ask (TP1): all its pods in one domain of a level; None: anywhere."""
        self.pin: TopologyPin | None = None
        """Admitted: the domain its pods are pinned to (TP1); None: anywhere in its zone."""
        self.grown: Reason | None = None
        """Admitted, then observed running asking more than its admission counts (R16): the
        next pass of its zone stops it; None: it did not grow."""

    @property
    def requeues(self) -> int:
        """Admissions of it that timed out for readiness so far (R10)."""
        return self.readiness.requeues if self.readiness is not None else 0

    def copy(self) -> Job:
        """A working copy for a trial pass (every field is immutable or a scalar)."""
        twin = Job.__new__(Job)
        for field in Job.__slots__:
            setattr(twin, field, getattr(self, field))
        return twin

    def refresh_sort_key(self) -> None:
        """Recompute the queue order key after priority or creation changed."""
        self.sort_key = (-self.priority, self.created_ms, self.key)

    def refresh_victim_key(self) -> None:
        """Recompute the reclaim order key after admission or a priority change."""
        self.victim_key = (self.priority, -self.admitted_ms, -self.admit_seq, self.key)


Placement = tuple[QuotaPath, Shape, Zone]
"""Where a workload's usage counts: its recorded leaf path, its request, its zone."""


class StopGroup:
    """One preemption whose victims have not all been seen stopped (ADMISSION-RULES R7).

    Until a victim's ``Released`` arrives, its pods may still run: its whole usage keeps
    counting. The preemptor's hold is carved out of it, so on every node and zone the group
    counts ``max(victims, hold)``: ``residual`` is what the victims add above the hold.
    """

    __slots__ = ("hold", "preemptor", "residual", "victims", "zone_residual")

    def __init__(self, preemptor: WorkloadKey, hold: Placement | None) -> None:
        self.preemptor = preemptor
        self.hold = hold
        """The preemptor's request where it counts; ``None`` once the preemptor is gone."""
        self.victims: dict[WorkloadKey, Placement] = {}
        self.residual: dict[QuotaPath, dict[str, int]] = {}
        self.zone_residual: dict[Zone, dict[str, int]] = {}

    def copy(self) -> StopGroup:
        """A working copy for a trial pass (placements are immutable tuples)."""
        twin = StopGroup(self.preemptor, self.hold)
        twin.victims = dict(self.victims)
        twin.residual = {path: dict(amounts) for path, amounts in self.residual.items()}
        twin.zone_residual = {zone: dict(amounts) for zone, amounts in self.zone_residual.items()}
        return twin


class Queue:
    """The pending workloads of one leaf in order, also grouped by request shape.

    The shape groups let a pass ask "can anything in this queue fit?" in O(shapes) instead
    of O(length): workloads of one shape fit or fail together on quota. A workload is grouped
    by the least it may start with (``Job.fit_shape``; its whole request unless R11 applies).
    """

    __slots__ = ("entries", "leaf", "name", "scalables", "shapes")

    def __init__(self, name: QueueName, leaf: QuotaPath) -> None:
        self.name = name
        self.leaf = leaf
        self.entries: list[SortKey] = []
        self.shapes: dict[Shape, list[SortKey]] = {}
        self.scalables = 0
        """How many of its workloads may start smaller (R11): they are grouped by the least
        they start with, so their group's shape is not their whole request."""

    def copy(self) -> Queue:
        """A working copy for a trial pass (the order keys are immutable tuples)."""
        twin = Queue(self.name, self.leaf)
        twin.entries = list(self.entries)
        twin.shapes = {shape: list(group) for shape, group in self.shapes.items()}
        twin.scalables = self.scalables
        return twin

    def fill(self, members: list[Job]) -> None:
        """Hold exactly ``members``, already in queue order (a rebuild: one sort instead of
        an insert per workload)."""
        self.entries = [job.sort_key for job in members]
        self.shapes = {}
        groups = self.shapes
        for job in members:
            group = groups.get(job.fit_shape)
            if group is None:
                groups[job.fit_shape] = [job.sort_key]
            else:
                group.append(job.sort_key)
        self.scalables = sum(1 for job in members if job.scalable is not None)

    def add(self, job: Job) -> bool:
        """Insert ``job`` at its place; True when a new shape group appeared."""
        insort(self.entries, job.sort_key)
        if job.scalable is not None:
            self.scalables += 1
        group = self.shapes.get(job.fit_shape)
        if group is None:
            self.shapes[job.fit_shape] = [job.sort_key]
            return True
        insort(group, job.sort_key)
        return False

    def remove(self, job: Job) -> bool:
        """Take ``job`` out; True when its shape group became empty."""
        if _remove_sorted(self.entries, job.sort_key) and job.scalable is not None:
            self.scalables -= 1
        group = self.shapes[job.fit_shape]
        _remove_sorted(group, job.sort_key)
        if not group:
            del self.shapes[job.fit_shape]
            return True
        return False

    def position(self, job: Job) -> int:
        """1-based position of a pending ``job``."""
        return bisect_left(self.entries, job.sort_key) + 1


def remove_sorted(items: list[SortKey] | list[VictimKey], item: SortKey | VictimKey) -> None:
    """Remove ``item`` from a sorted list (no-op if absent)."""
    _remove_sorted(items, item)  # type: ignore[arg-type]


def _remove_sorted(items: list[SortKey], item: SortKey) -> bool:
    """Remove ``item`` from a sorted list; whether it was there."""
    index = bisect_left(items, item)
    if index < len(items) and items[index] == item:
        del items[index]
        return True
    return False
