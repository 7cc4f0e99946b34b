"""B1 spent budgets as a gate: what a spent budget's action stops.

What it does: below a spent budget (as of the engine's last refresh), ``hold`` shuts every new
admission (and closes the leaf for pruning), ``min-only`` shuts what would borrow beyond its
leaf's ``min``; ``lower-priority`` shuts nothing (it only orders: the pass's tiers). A
preemptor the ledger already holds capacity for goes on (R8).
What it must never do: compute the budgets (``usher.core.rules.budgets`` does; the engine
refreshes them), or read a clock.
"""

from __future__ import annotations

from schemas import Millis, QuotaPath, Reason
from usher.core.gates.view import AdmissionView, Opening, stop_gate
from usher.core.rules.budgets import BudgetStatus
from usher.core.rules.reclaim import within_guarantee
from usher.core.state.indexed import Job
from usher.core.tree.budget_spec import BudgetAction


def stop(view: AdmissionView, job: Job) -> Reason | None:
    """Why a spent budget on ``job``'s path keeps it from being admitted now, or None."""
    if job.leaf is None or job.held:
        return None
    status = view.spent_budget_over(job.leaf)
    if status is None or status.budget.action == BudgetAction.LOWER_PRIORITY:
        return None
    if status.budget.action == BudgetAction.HOLD:
        return status.pending_reason(view.state.now)
    info = view.state.tree.nodes[job.leaf]
    if within_guarantee(info.used, info.residual, info.min, job.shape):
        return None
    return status.pending_reason(view.state.now, f"min-only: {info.path} admits within min only")


def resets(status: BudgetStatus) -> Opening:
    """A budget's answer changes by time alone when its window resets (B1, B2)."""
    return Opening(
        at_ms=Millis(status.window.end_ms), on=f"the budget of {status.budget.node} resets"
    )


def opens(view: AdmissionView, job: Job) -> Opening:
    assert job.leaf is not None
    status = view.spent_budget_over(job.leaf)
    assert status is not None
    return resets(status)


def spent(view: AdmissionView, leaf: QuotaPath) -> bool:
    return view.spent_budget_over(leaf) is not None


def holds_leaf(view: AdmissionView, leaf: QuotaPath) -> bool:
    """Whether a spent budget with action ``hold`` stops every new admission of ``leaf``."""
    status = view.spent_budget_over(leaf)
    return status is not None and status.budget.action == BudgetAction.HOLD


GATE = stop_gate(
    "B1 budget spent",
    "a budget on its path is spent (B1)",
    stop,
    opens=opens,
    may_shut=spent,
    closes=holds_leaf,
)
