"""The engine's data: the durable state and every derived index, cache and book, as fields.

What it does: the fields of the context every part of the engine reads and writes
(``EngineData``), the heads the starvation guard follows (``GuardHeads``), the interning of
shapes and names, and the types of a leaf's offer (``Share``, ``OfferKey``, ``LeafOffer``).
What it must never do: decide anything; read a clock; import any module of the engine but
``policy``.
"""

from __future__ import annotations

from schemas import (
    QuotaPath,
    WorkloadKey,
    Zone,
)
from usher.core.engine.policy import seam_for
from usher.core.model.config import EngineConfig
from usher.core.rules import budgets, holds
from usher.core.rules.fairshare import FairKey
from usher.core.state.durable import EngineState
from usher.core.state.indexed import (
    Queue,
    Shape,
    SortKey,
    TreeIndex,
    VictimKey,
)

Share = tuple[int, float, int, int]
"""Dominant share of a leaf as ``(infinite, used/min, used, min)``.

The float orders shares at C speed (rounding is monotonic, so a smaller float is a smaller
share); exact ties in the float fall back to the integers, deterministically. ``(1, ...)`` is
infinite (used > 0 where min is 0)."""

OfferKey = tuple[int, FairKey, Share, SortKey]
"""Interleave preference (section 4): within-min first, lower share, then queue order; the
first element is 2 below a spent ``lower-priority`` budget (B1: after everything else). The
second is 0 unless fair share is on (F1): then, beyond the guarantee, lower decayed usage per
weight goes first and the share breaks its ties."""


LeafOffer = tuple[WorkloadKey, OfferKey, int]
"""A waiting leaf's first candidate, its interleave key, and 1 if the leaf could preempt."""

LeafRefusal = tuple[bool, tuple[Shape, ...]]
"""Of a leaf that could preempt, over its whole queue: whether a workload there might move
even while victims stop (``open``: it may start smaller, or reclaim may search for its shape
and that shape does not fit the leaf's own claim once they stopped), and else the shapes
reclaim may search for (``needs``): each is refused without a search only while victims stop
and it fits every ancestor's claim once they stopped (``PassEnd``)."""


class GuardHeads:
    """The heads the starvation guard follows (N1), kept between its tracking steps.

    ``of_leaf``: each leaf under the guard (and not held) that has a head -> that head, as
    of the last tracking step; ``leaf_of`` the other way round. ``unclocked``: those leaves
    whose head has no starvation clock yet. ``changed``: leaves whose head may have changed
    since (their offer was refreshed: every input of a head is one of an offer). ``whole``:
    none of it is known (a new engine, tree or restored state): the next step looks at every
    leaf. A flat ``copy`` is a working copy (every item is immutable).
    """

    __slots__ = ("changed", "leaf_of", "of_leaf", "unclocked", "whole")

    def __init__(self) -> None:
        self.of_leaf: dict[QuotaPath, WorkloadKey] = {}
        self.leaf_of: dict[WorkloadKey, QuotaPath] = {}
        self.unclocked: set[QuotaPath] = set()
        self.changed: set[QuotaPath] = set()
        self.whole = True

    def copy(self) -> GuardHeads:
        twin = GuardHeads()
        twin.of_leaf, twin.leaf_of = dict(self.of_leaf), dict(self.leaf_of)
        twin.unclocked, twin.changed = set(self.unclocked), set(self.changed)
        twin.whole = self.whole
        return twin


class EngineData:
    """The engine's data: the durable state and every derived index, cache and book, as fields."""

    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config if config is not None else EngineConfig()
        self.policy = seam_for(self.config.policy)
        self.state = EngineState(self.config)
        """What a snapshot stores; everything below is derived from it (``rebuild_derived``)."""
        self.leaf_queues: dict[QuotaPath, Queue] = {}
        self.leaf_admitted: dict[QuotaPath, list[VictimKey]] = {}
        """Admitted workloads per recorded leaf path, sorted in reclaim order."""
        self.outside: dict[WorkloadKey, None] = {}
        """Unmapped and inadmissible workloads, re-examined when the tree or nodes change."""
        self.class_users: dict[str, dict[WorkloadKey, None]] = {}
        self.zone_cap: dict[Zone, dict[str, int]] = {}
        self.pod_fit_cache: dict[tuple[Zone, Shape], int] = {}
        self.stopping: dict[WorkloadKey, WorkloadKey] = {}
        """Each victim not yet seen stopped -> its preemptor."""
        self.pass_admitted: set[WorkloadKey] = set()
        """Admitted by the running pass: never offered as a victim in it (ADMISSION-RULES R6)."""
        self.shapes: dict[Shape, Shape] = {}
        self.pod_lists: dict[tuple[Shape, ...], tuple[Shape, ...]] = {}
        self.names: dict[str, str] = {}
        """One string object per namespace, zone and priority class name (per workload, each
        decoded event brings its own copy): memory per pending workload (issue 16)."""
        self.share_cache: dict[QuotaPath, Share] = {}
        self.dirty: set[QuotaPath] = set()
        self.low: dict[QuotaPath, dict[str, int] | None] = {}
        self.leaf_potential: dict[QuotaPath, int] = {}
        self.potential: dict[QuotaPath, int] = {}
        self.leaf_refusals: dict[QuotaPath, LeafRefusal] = {}
        """Each leaf that could preempt -> its ``LeafRefusal``, kept with its potential."""
        self.needs_above: dict[tuple[QuotaPath, Shape], int] = {}
        """(inner node, shape) -> how many leaves below it (not ``open``) need that shape to
        fit the node's claim once victims stopped: what ``PassEnd`` checks instead of every
        leaf."""
        self.open_leaves: set[QuotaPath] = set()
        """The leaves whose ``LeafRefusal`` is ``open``: looked at one by one."""
        self.offer_keys: dict[QuotaPath, LeafOffer] = {}
        """Each waiting leaf's first candidate, its interleave key and whether the leaf could
        preempt, kept between passes and recomputed only for leaves that changed (dirty)."""
        self.admit_offers: list[tuple[OfferKey, QuotaPath]] = []
        self.potential_offers: list[tuple[OfferKey, QuotaPath]] = []
        self.timed_offers: set[QuotaPath] = set()
        """Heaps of the offers above, split by whether the leaf could preempt: a pass starts
        from copies of both instead of a key per waiting leaf, and drops the first once the
        root is full. An entry is current while ``offer_keys`` holds its key (lazy removal)."""
        self.unready: dict[WorkloadKey, int] = {}
        """Admitted workloads whose ready deadline runs -> that deadline (R10)."""
        self.grown: dict[WorkloadKey, None] = {}
        """Admitted workloads seen asking more than their admission counts (R16)."""
        self.holds: dict[QuotaPath, holds.HoldRecord] = {}
        """The hold or drain governing each held node, whichever its source (R14/R15)."""
        self.held_leaves: dict[QuotaPath, holds.HoldRecord] = {}
        """Each leaf below a held node -> the hold nearest to it: it admits nothing new."""
        self.budget_stops: dict[QuotaPath, budgets.BudgetStatus] = {}
        """Each leaf below a spent budget -> the one governing it (``budgets.nearest_stop``),
        as of the last ``refresh_budgets`` (B1)."""
        self.guard_heads = GuardHeads()
        """The heads N1 follows: looked up again only for leaves whose offer changed."""
        self.budget_seen: dict[str, tuple[int, int]] = {}
        """``at``: the (now, version) ``budget_stops`` was computed for; the same pair
        computes the same stops, so history queries asking per workload compute them once."""

    @property
    def tree(self) -> TreeIndex:
        """The tree in force: shorthand for ``state.tree`` (the quota shortfall reads it)."""
        return self.state.tree

    def intern(self, shape: Shape) -> Shape:
        # One tuple object per distinct shape: 100k workloads share a handful of them.
        return self.shapes.setdefault(shape, shape)

    def intern_name(self, name: str) -> str:
        return self.names.setdefault(name, name)
