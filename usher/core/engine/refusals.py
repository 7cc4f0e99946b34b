"""What reclaim refuses without a search, per leaf and request shape, whoever asks.

What it does: answers, for a leaf's node and a request shape, the questions reclaim
(``reclaim_search._search_plan``) asks before it looks at any victim and that do not depend on
which workload asks: whether the request may preempt in its own leaf or beyond its guarantee
(L1, P2, P3), whether reclaim may search for it at all (within the guarantee, or allowed
beyond it: R5), and whether it fits every ancestor's claim once the stopping victims have
stopped (R7: room is coming, so reclaim waits). The pass's pruning data (``offers``) and the
pass's end (``pass_end``) keep and ask these per leaf; reclaim asks them per workload.
What it must never do: look at a victim, change usage, or answer for a workload beyond its
leaf and shape (what a workload adds -- R10's requeue, R7's earlier victims, its pods, its
topology -- is reclaim's own).
"""

from __future__ import annotations

from usher.core.engine.accounting import Accounting
from usher.core.rules.preemption_policy import preempts_in_leaf
from usher.core.state.indexed import QuotaNodeInfo, Shape


def preempts_own_leaf(leaf: QuotaNodeInfo, shape: Shape) -> bool:
    """Whether a request of ``shape`` may preempt lower-priority work of its own leaf (L1
    ``LowerPriority`` within quota, P3)."""
    return leaf.within_quota == "LowerPriority" and preempts_in_leaf(
        leaf.preemption, shape, leaf.min
    )


def preempts_beyond_guarantee(leaf: QuotaNodeInfo, shape: Shape) -> bool:
    """Whether a request of ``shape`` asking beyond ``leaf``'s guarantee may still preempt:
    in its own leaf, or other leaves' borrowers while borrowing (P2). Where it may not, such a
    request that does not fit fails its reclaim with nothing looked at (``find_victims``)."""
    return preempts_own_leaf(leaf, shape) or leaf.preemption.while_borrowing is not None


def fits_once_stopped(leaf: QuotaNodeInfo, shape: Shape) -> bool:
    """Whether ``shape`` fits on ``leaf``'s quota and each of its ancestors' once every
    stopping victim has stopped: where victims are stopping, reclaim for such a request is
    refused without a search (room is coming, R7)."""
    return all(fits_once_stopped_at(info, shape) for info in leaf.ancestors)


def fits_once_stopped_at(info: QuotaNodeInfo, shape: Shape) -> bool:
    """``fits_once_stopped`` on one node: its claim (used minus what stops) plus ``shape``
    within its cap."""
    for resource, amount in shape:
        limit = info.cap.get(resource)
        if (
            limit is not None
            and info.used.get(resource, 0) - info.residual.get(resource, 0) + amount > limit
        ):
            return False
    return True


def may_search(leaf: QuotaNodeInfo, shape: Shape) -> bool:
    """Whether reclaim may search victims for a plain request of ``shape`` in ``leaf``: within
    its guarantee (as far as its total ``min`` says), or where it may preempt beyond it.
    False: refused without a search, whoever asks (``_search_plan``'s first answer)."""
    return Accounting.within_min(leaf, shape) or preempts_beyond_guarantee(leaf, shape)
