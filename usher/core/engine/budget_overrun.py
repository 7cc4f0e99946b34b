"""When the budget overrun hold (docs/admission-rules.md B2) can next lift: a window's reset.

What it does: below a node that opts in with ``usher.io/budget-overrun: hold`` (read with the
other budget attributes: ``budget_spec.holds_overrun``, T1's ``budget_spec.overrun_errors``),
a waiting workload whose request x declared runtime (RT1) is more than a budget has left is
held (the gate ``usher.core.gates.overrun`` says so); such a hold can next lift at a window's
reset (``next_release``; what is left only shrinks within a window): a wakeup.
What it must never do: hold a workload that declares no runtime, hold anything below a node
that does not opt in, evict or preempt anything, or read a clock (``now`` is the engine's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schemas import Millis

if TYPE_CHECKING:
    from usher.core.engine.context import EngineContext


def next_release(e: EngineContext) -> Millis | None:
    """The next reset of an opted-in budget with work waiting below it: a pass then looks at
    what it held again (within a window what is left only shrinks)."""
    tree = e.state.tree
    waiting = [
        leaf for leaf in tree.overrun_leaves if (queue := e.leaf_queues.get(leaf)) and queue.entries
    ]
    if not waiting:
        return None
    nodes = {info.path for leaf in waiting for info in e.nodes_on_path(leaf)} & tree.overrun_nodes
    ends = [
        status.window.end_ms
        for status in e.budget_statuses().values()
        if status.budget.node in nodes and status.window.end_ms > e.state.now
    ]
    return Millis(min(ends)) if ends else None
