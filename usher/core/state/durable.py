"""The engine's durable state as plain data: exactly what a snapshot stores.

What it does: ``EngineState`` holds the records the engine's decisions depend on -- the tree in
force with each node's usage, every workload, nodes, priority classes, holds, the budgets'
book (B1), preemptions whose victims still stop, lingering usage, wakeups, the reclaim memo
and the counters -- as plain containers with no behaviour. Everything else the engine keeps
(queues, per-leaf candidate lists, pruning data, caches) is derived from it by
``Engine.rebuild_derived``.
``copy_for_trial`` gives the working copy a preview pass runs on.
What it must never do: decide anything, hold a cache or an index that can be recomputed from
the rest (those belong to the engine), perform I/O or read a clock.
"""

from __future__ import annotations

import msgspec

from schemas import ClusterName, Millis, NodeName, QuotaPath, WorkloadKey, Zone
from usher.core.model.config import EngineConfig
from usher.core.rules.budgets import BudgetBook, Running
from usher.core.rules.clusters import ClusterLink
from usher.core.rules.fairshare import FairBook
from usher.core.rules.holds import HoldRecord
from usher.core.rules.retry import Failure, RetryLink
from usher.core.state.indexed import Job, Placement, Shape, StopGroup, TreeIndex


class NodeCapacity(msgspec.Struct, frozen=True):
    """One Kubernetes node as the engine counts it."""

    allocatable: dict[str, int]
    unschedulable: bool
    labels: dict[str, str] = {}
    """Its labels a topology level may name (TP1), bounded (``values.labels``)."""


ReclaimMemo = dict[tuple[QuotaPath, Shape, int, Zone], int]
"""``(leaf, shape, priority, zone)`` -> the state version at which a reclaim failed."""


class EngineState:
    """The durable state of one engine (what a snapshot carries; no derived index)."""

    __slots__ = (
        "announce",
        "budget_book",
        "closing",
        "clusters",
        "failures",
        "fair_book",
        "gated",
        "held",
        "holds",
        "jobs",
        "last_pass_now",
        "lingering",
        "nodes",
        "now",
        "passes",
        "preemptors",
        "priority_values",
        "reclaim_failed",
        "retries",
        "seq",
        "served",
        "starving",
        "stops",
        "tree",
        "tree_holds",
        "version",
        "wakeups",
        "zone_used",
    )

    def __init__(self, config: EngineConfig) -> None:
        self.tree = TreeIndex(None, config)
        """The tree in force; its nodes' ``used`` is durable (their ``residual`` is derived)."""
        self.jobs: dict[WorkloadKey, Job] = {}
        self.announce: dict[WorkloadKey, None] = {}
        """Unmapped and inadmissible workloads whose reason the next pass announces."""
        self.priority_values: dict[str, int] = {}
        self.nodes: dict[Zone, dict[NodeName, NodeCapacity]] = {}
        self.served: dict[Zone, None] | None = None
        """Zones some dequeuer announced (``ZoneServed``); None until the first announcement,
        when nobody can tell which zones are served."""
        self.zone_used: dict[Zone, dict[str, int]] = {}
        self.clusters: dict[ClusterName, ClusterLink] = {}
        """What the log last said of each cluster (M1), in the order they first appeared;
        empty on a log that never spoke of clusters (then M1 shuts nothing)."""
        self.held: dict[WorkloadKey, None] = {}
        self.holds: dict[QuotaPath, HoldRecord] = {}
        """Holds and drains operators ordered on the log (R14/R15), by node."""
        self.tree_holds: dict[QuotaPath, HoldRecord] = {}
        """Holds and drains the tree's attributes put in force (R14/R15), by node."""
        self.preemptors: dict[WorkloadKey, None] = {}
        self.stops: dict[WorkloadKey, StopGroup] = {}
        """Preemptions whose victims still stop, by preemptor (ADMISSION-RULES R7); each
        group's residuals are derived."""
        self.lingering: dict[WorkloadKey, Placement] = {}
        """Usage of finished or deleted workloads still counted until the ledger's
        ``Released`` (R7; never with ``instant_release``)."""
        self.wakeups: list[tuple[int, int, WorkloadKey]] = []
        self.reclaim_failed: ReclaimMemo = {}
        self.failures: dict[WorkloadKey, Failure] = {}
        """Failed attempts of jobs with retries whose ``Retried`` is not yet applied (R12)."""
        self.retries: dict[WorkloadKey, RetryLink] = {}
        """Attempts a ``Retried`` named, by their key: their first attempt and place (R12)."""
        self.budget_book = BudgetBook()
        self.closing: dict[WorkloadKey, Running] = {}
        """Allocation intervals (U1) still open although their workload no longer counts as
        admitted: finished or deleted, lingering until the ledger's ``Released`` (or
        ``Preempted``, ``Requeued``) closes them; the budget and fair-share books book them
        then, so they count what usage counts (B1, F1; never with ``instant_release``)."""
        """What closed allocation intervals accrued in each budget's current window (B1)."""
        self.starving: dict[WorkloadKey, Millis] = {}
        """Heads passed over by admissions, by key -> since when (N1): past their leaf's
        starvation threshold capacity on their path is reserved for them."""
        self.gated: dict[WorkloadKey, tuple[str, ...]] = {}
        """The workloads admission gates are still listed on, by key -> those gates in order
        (G1): not admitted while listed here (sparse: most workloads list none)."""
        self.fair_book = FairBook()
        """Decayed usage of each leaf's closed allocation intervals (F1; kept only with a
        half-life configured)."""
        self.version = 0
        self.passes = 0
        self.seq = 0
        self.now: Millis = Millis(0)
        self.last_pass_now: Millis | None = None

    def copy_for_trial(self) -> EngineState:
        """A copy a pass may write without touching this one, one level deep.

        Workload records, stop groups and usage maps are copied; shapes, reasons, node
        capacities, holds and the tree's index are shared (a pass never writes them). The tree's
        per-node usage is not copied here: ``Engine.preview_pass`` sets it aside itself.
        """
        twin = EngineState.__new__(EngineState)
        twin.tree = self.tree
        twin.jobs = {key: job.copy() for key, job in self.jobs.items()}
        twin.announce = dict(self.announce)
        twin.priority_values = self.priority_values
        twin.nodes = self.nodes
        twin.served = self.served
        twin.clusters = self.clusters  # a pass never writes it
        twin.zone_used = {zone: dict(used) for zone, used in self.zone_used.items()}
        twin.held = dict(self.held)
        twin.holds = self.holds
        twin.tree_holds = self.tree_holds
        twin.preemptors = dict(self.preemptors)
        twin.stops = {key: group.copy() for key, group in self.stops.items()}
        twin.lingering = dict(self.lingering)
        twin.wakeups = list(self.wakeups)
        twin.reclaim_failed = dict(self.reclaim_failed)
        twin.failures = dict(self.failures)
        twin.retries = dict(self.retries)
        twin.budget_book = self.budget_book.copy()
        twin.closing = dict(self.closing)
        twin.starving = dict(self.starving)
        twin.gated = self.gated  # a pass never writes it
        twin.fair_book = self.fair_book.copy()
        twin.version = self.version
        twin.passes = self.passes
        twin.seq = self.seq
        twin.now = self.now
        twin.last_pass_now = self.last_pass_now
        return twin
