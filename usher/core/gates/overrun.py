"""B2 budget overrun as a gate: a declared runtime that would not fit what a budget has left.

What it does: below a node that opts in with ``usher.io/budget-overrun: hold``, shuts a
waiting workload that declares a maximum runtime (RT1) whose request x declared runtime is
more than an opted-in budget on its path has left in its window, with the numbers
(``BudgetOverrun: declared 3600 s x cpu 4 = 4 CPU-hours, more than the 2.5 of 10 CPU-hours
left in 2026-11, ...``). What is left shrinks with the clock: the gate may shut by time alone.
What it must never do: shut a workload that declares no runtime, shut anything below a node
that does not opt in, or read a clock (``now`` is the state's).
"""

from __future__ import annotations

from schemas import QuotaPath, Reason
from usher.core.gates.budget import resets
from usher.core.gates.view import AdmissionView, Opening, Timed, stop_gate
from usher.core.rules.budgets import BudgetStatus
from usher.core.state.indexed import Job


def stop(view: AdmissionView, job: Job) -> Reason | None:
    """``BudgetOverrun`` when, on the nearest opted-in budget on ``job``'s path (leaf first;
    on one node by resource, then window, month first), its request x declared runtime is
    more than the budget has left now; None otherwise (no declaration, no such budget, or a
    preemptor whose capacity the ledger already holds, R8)."""
    found = overrun(view, job)
    if found is None:
        return None
    status, amount = found
    assert job.max_runtime_ms is not None
    return status.overrun_reason(amount, job.max_runtime_ms)


def opens(view: AdmissionView, job: Job) -> Opening:
    """What it has left only grows back when that budget's window resets."""
    found = overrun(view, job)
    assert found is not None
    return resets(found[0])


def overrun(view: AdmissionView, job: Job) -> tuple[BudgetStatus, int] | None:
    """The budget ``stop`` names and ``job``'s amount of its resource, or None."""
    tree = view.state.tree
    if job.max_runtime_ms is None or job.leaf is None or job.held:
        return None
    if job.leaf not in tree.overrun_leaves:
        return None
    found = view.budget_statuses()
    amounts = dict(job.shape)
    for info in reversed(tree.nodes[job.leaf].ancestors):
        if info.path not in tree.overrun_nodes:
            continue
        for budget in sorted(tree.budgets.get(info.path, ()), key=lambda b: (b.resource, b.days)):
            amount = amounts.get(budget.resource, 0)
            status = found.get(budget.key)
            if amount and status is not None and amount * job.max_runtime_ms > status.left:
                return status, amount
    return None


def opted_in(view: AdmissionView, leaf: QuotaPath) -> bool:
    return leaf in view.state.tree.overrun_leaves


GATE = stop_gate(
    "B2 budget overrun",
    "its declared runtime would overrun what a budget on its path has left (B2)",
    stop,
    opens=opens,
    may_shut=opted_in,
    timed=Timed.ALWAYS,
)
