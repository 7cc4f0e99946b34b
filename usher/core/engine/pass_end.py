"""Where the rest of a decision pass can move nothing, though some leaf may still preempt.

What it does: a pass ends once the root has no room for any waiting shape and no leaf has
reclaim potential (``DecisionPass.nothing_can_move``). ``PassEnd`` proves the same end where
leaves do have potential but every candidate still to be taken from them would be refused
reclaim without a search (``reclaim_search.find_victims``): a request beyond its leaf's
guarantee where nothing may preempt beyond it (R5, L1, P2), or one that fits once the victims
now stopping have stopped (R7: room is coming). With the root full, such a candidate fails its
try with nothing changed, so taking them one by one -- thousands of offers while one victim
stops at a large backlog -- decides nothing: the pass ends where the proof holds.

How: the engine keeps, for each leaf that could preempt, what stands between its waiting work
and such a refusal (``LeafRefusal``, refreshed with the leaf's other pruning data) and, per
inner node and shape, how many leaves below need the shape to fit there once the victims
stopped (``needs_above``). After a move, the proof asks each counted (node, shape) once and
looks at the few leaves one by one that the counts cannot speak for: those changed since the
refresh (admitted into in this pass) and those ``open``. Where that fails, and once as many
candidates have failed as a look at every leaf costs (``LOOK_AFTER``), it looks at each leaf
with potential. It keeps the leaves whose candidates still to come might move (``blockers``);
afterwards a blocker is looked at again only when its own candidate failed (its cursor moved
on). Any move voids the proof: usage changed.
What it must never do: end a pass where a remaining candidate could admit, preempt, drop a
hold or start partially (a held preemptor anywhere, or a scalable workload in a leaf, keeps it
from proving anything there), change any state, or decide anything itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from schemas import QuotaPath
from usher.core.engine.refusals import fits_once_stopped, fits_once_stopped_at, may_search
from usher.core.state.indexed import QuotaNodeInfo, Shape, SortKey

if TYPE_CHECKING:
    from usher.core.engine.context import EngineContext

LOOK_AFTER: Final = 32
"""A look at every leaf with potential is made once failed candidates since the last move,
times this, reach their number: the looks cost at most a fixed share of the walk they end."""


def has_room_for(info: QuotaNodeInfo, low: dict[str, int] | None) -> bool:
    """Whether ``info`` could take ``low``, the lowest request waiting below it (per resource:
    a node without room for it has room for no waiting shape below it); False where nothing
    waits below."""
    if low is None:
        return False
    cap, used = info.cap, info.used
    for resource, amount in low.items():
        limit = cap.get(resource)
        if limit is not None and used.get(resource, 0) + amount > limit:
            return False
    return True


class PassEnd:
    """Whether the candidates left in a pass can move anything, no waiting shape fitting."""

    def __init__(self, engine: EngineContext, closed: set[QuotaPath]) -> None:
        """``closed``: the pass's leaves that offer nothing more (under Block)."""
        self.e = engine
        self.closed = closed
        self.blockers: set[QuotaPath] | None = None
        """The leaves whose candidates still to come may move; None: not looked at since the
        last move."""
        self.failures = 0
        self.counted = False
        """Whether the counts were asked since the last move (they answer the same until
        one)."""
        self.roomy: bool | None = None
        """Whether some leaf might take a waiting shape, as last looked (None: not since the
        last move)."""

    def moved(self) -> None:
        """Something moved (usage changed): the proof is to be made again."""
        self.blockers = None
        self.failures = 0
        self.counted = False
        self.roomy = None

    def no_room_anywhere(self, root: QuotaNodeInfo) -> bool:
        """Whether no waiting shape fits anywhere though the root has room: every leaf where
        work waits lies below (or is) a node without room for the lowest request waiting below
        it -- a cohort full while another lends nothing to it. Looked at once failed
        candidates since the last move, times ``LOOK_AFTER``, reach the number of leaves."""
        if self.roomy is None:
            if self.failures * LOOK_AFTER < len(self.e.state.tree.leaves):
                return False
            self.roomy = self.room_somewhere(root)
        return not self.roomy

    def room_somewhere(self, root: QuotaNodeInfo) -> bool:
        """Whether some leaf might take a waiting shape: one with room for its lowest request
        on a path of nodes each with room for theirs (the recorded lowest requests are only
        ever lower than the true ones within a pass: more room, never less)."""
        nodes, low = self.e.state.tree.nodes, self.e.low
        stack = [root]
        while stack:
            info = stack.pop()
            if not has_room_for(info, low.get(info.path)):
                continue
            if info.is_leaf:
                return True
            stack.extend(nodes[child] for child in info.children)
        return False

    def failed(self, leaf: QuotaPath, cursor: SortKey) -> None:
        """``leaf``'s candidate failed with nothing changed; its cursor is now ``cursor``."""
        self.failures += 1
        blockers = self.blockers
        if blockers is not None and leaf in blockers and not self.may_move(leaf, cursor):
            blockers.discard(leaf)

    def proven(self, cursor: Mapping[QuotaPath, SortKey], potential: int) -> bool:
        """Whether no candidate left can move, no waiting shape fitting anywhere and
        ``potential`` leaves having reclaim potential (the caller knows both)."""
        if self.e.state.held:
            return False  # a held preemptor's try drops its hold: usage goes down
        if self.blockers is None and not self.counted:
            self.counted = True
            self.blockers = self.by_counts(cursor)
        if self.blockers is None:
            if self.failures * LOOK_AFTER < potential:
                return False
            self.blockers = {
                leaf
                for leaf, has in self.e.leaf_potential.items()
                if has and self.may_move(leaf, cursor.get(leaf))
            }
        return not self.blockers

    def by_counts(self, cursor: Mapping[QuotaPath, SortKey]) -> set[QuotaPath] | None:
        """The blockers as the kept counts find them, or None where they cannot say: some
        counted shape does not fit its node once the victims stopped (or none stop)."""
        e = self.e
        if e.needs_above:
            if not e.state.stops:
                return None
            nodes = e.state.tree.nodes
            for (path, shape), _ in e.needs_above.items():
                if not fits_once_stopped_at(nodes[path], shape):
                    return None
        # Changed since the refresh: usage only grew there (admitted in this pass), but its
        # kept refusal may say less than it now should; and the open ones: each looked at.
        look = e.open_leaves.union(leaf for leaf in e.dirty if e.leaf_potential.get(leaf))
        return {leaf for leaf in look if self.may_move(leaf, cursor.get(leaf))}

    def may_move(self, leaf: QuotaPath, cursor: SortKey | None) -> bool:
        """Whether a candidate of ``leaf`` past ``cursor`` might be admitted, preempt or start
        partially now (False only where each would be refused reclaim without a search)."""
        queue = self.e.leaf_queues.get(leaf)
        if queue is None or leaf in self.closed:
            return False
        entries = queue.entries
        if not entries or (cursor is not None and entries[-1] <= cursor):
            return False
        if queue.scalables:
            return True  # grouped by the least they start with: their own request may search
        info = self.e.state.tree.nodes[leaf]
        stopping = bool(self.e.state.stops)
        for shape, group in queue.shapes.items():
            if cursor is not None and group[-1] <= cursor:
                continue
            if not self.refused(info, shape, stopping):
                return True
        return False

    def refused(self, info: QuotaNodeInfo, shape: Shape, stopping: bool) -> bool:
        """Whether reclaim refuses a plain request of ``shape`` in ``info`` without a search,
        whoever asks: beyond the guarantee where nothing may preempt beyond it, or fitting
        once the stopping victims have stopped."""
        if not may_search(info, shape):
            return True
        return stopping and fits_once_stopped(info, shape)
