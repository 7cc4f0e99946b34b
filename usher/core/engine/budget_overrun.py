"""The budget overrun hold (docs/admission-rules.md B2): a declared runtime that would not fit.

What it does: below a node that opts in with ``usher.io/budget-overrun: hold`` (read with the
other budget attributes: ``budget_spec.holds_overrun``, T1's ``budget_spec.overrun_errors``), says
whether a waiting workload that declares a maximum runtime (RT1) is held because, on a budget
of such a node on its path, its request x declared runtime is more than the budget has left
in its window (``stop``, with the numbers: ``BudgetOverrun: declared 3600 s x cpu 4 = 4
CPU-hours, more than the 2.5 of 10 CPU-hours left in 2026-11, resets 2026-12-01 (budget of
root/a)``), and when such a hold can next lift: at a window's reset (``next_release``; what
is left only shrinks within a window).
What it must never do: hold a workload that declares no runtime, hold anything below a node
that does not opt in, evict or preempt anything, or read a clock (``now`` is the engine's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schemas import Millis, Reason

if TYPE_CHECKING:
    from usher.core.engine.facade import Engine
    from usher.core.state.indexed import Job


def stop(e: Engine, job: Job) -> Reason | None:
    """``BudgetOverrun`` when, on the nearest opted-in budget on ``job``'s path (leaf first;
    on one node by resource, then window, month first), its request x declared runtime is
    more than the budget has left now; None otherwise (no declaration, no such budget, or a
    preemptor whose capacity the ledger already holds, R8)."""
    tree = e.state.tree
    if job.max_runtime_ms is None or job.leaf is None or job.held:
        return None
    if job.leaf not in tree.overrun_leaves:
        return None
    found = e.budget_statuses()
    amounts = dict(job.shape)
    for info in reversed(e._path_nodes(job.leaf)):
        if info.path not in tree.overrun_nodes:
            continue
        for budget in sorted(tree.budgets.get(info.path, ()), key=lambda b: (b.resource, b.days)):
            amount = amounts.get(budget.resource, 0)
            status = found.get(budget.key)
            if amount and status is not None and amount * job.max_runtime_ms > status.left:
                return status.overrun_reason(amount, job.max_runtime_ms)
    return None


def next_release(e: Engine) -> Millis | None:
    """The next reset of an opted-in budget with work waiting below it: a pass then looks at
    what it held again (within a window what is left only shrinks)."""
    tree = e.state.tree
    waiting = [
        leaf for leaf in tree.overrun_leaves if (queue := e._queues.get(leaf)) and queue.entries
    ]
    if not waiting:
        return None
    nodes = {info.path for leaf in waiting for info in e._path_nodes(leaf)} & tree.overrun_nodes
    ends = [
        status.window.end_ms
        for status in e.budget_statuses().values()
        if status.budget.node in nodes and status.window.end_ms > e.state.now
    ]
    return Millis(min(ends)) if ends else None
