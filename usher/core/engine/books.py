"""The books: holds (R14/R15), budgets (B1/B2) and fair-share usage (F1).

What it does: keeps which nodes are held, books the usage of closed and admitted work into
budgets and fair share, answers which leaves a spent budget stops and when that can next change.
What it must never do: admit or stop work; read a clock (time comes in as ``now``).
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

from schemas import (
    Millis,
    QuotaPath,
    WorkloadKey,
)
from usher.core.engine.accounting import Accounting
from usher.core.rules import budgets, fairshare, holds
from usher.core.state.indexed import (
    ADMITTED,
    Job,
    QuotaNodeInfo,
)
from usher.core.tree import budget_spec
from usher.core.tree.quota_tree import path_nodes


class Books(Accounting):
    """The books: holds (R14/R15), budgets (B1/B2) and fair-share usage (F1)."""

    def refresh_holds(self) -> None:
        """Recompute which nodes and leaves are held (R14) after an order or a new tree; a
        leaf whose hold changed offers anew, and reclaim's memo is stale (R15 may preempt)."""
        in_force = holds.in_force(self.state.holds, self.state.tree_holds)
        leaves = holds.held_leaves(in_force, self.state.tree.leaves)
        changed = {
            leaf
            for leaf in self.held_leaves.keys() | leaves.keys()
            if self.held_leaves.get(leaf) != leaves.get(leaf)
        }
        if in_force != self.holds or changed:
            self.state.version += 1
        self.holds, self.held_leaves = in_force, leaves
        self.dirty.update(changed)

    def holds_in_force(self) -> dict[QuotaPath, holds.HoldRecord]:
        """The hold or drain governing each held node (R14/R15), by path."""
        return dict(self.holds)

    def hold_over(self, leaf: QuotaPath) -> holds.HoldRecord | None:
        """The hold nearest to ``leaf`` that stops its admissions, or None (R14)."""
        return self.held_leaves.get(leaf)

    def book_on_close(self, job: Job) -> None:
        """A finished or deleted workload stops counting as admitted before the ledger's
        ``Released`` (R7): its allocation interval (U1) stays open until the ledger's decision
        closes it (``book_closed``), so the books count what usage counts."""
        assert job.used_path is not None
        self.state.closing[job.key] = budgets.Running(
            job.used_path, dict(job.used_shape), job.admitted_ms
        )

    def book_closed(self, key: WorkloadKey) -> None:
        """The ledger's ``Preempted``, ``Requeued`` or ``Released`` closes ``key``'s interval
        now (U1): the budgets on its path and its leaf's fair book book it (B1, F1)."""
        interval = self.state.closing.pop(key, None)
        if interval is None:
            return
        found = self.state.tree.budgets
        on_path = [b for node in path_nodes(interval.path) for b in found.get(node, ())]
        if on_path:
            self.state.budget_book.close(
                on_path, interval.shape, interval.admitted_ms, self.state.now
            )
        half_life = self.config.half_life_ms
        if half_life is not None:
            self.state.fair_book.close(
                interval.path,
                dict(interval.shape),
                interval.admitted_ms,
                self.state.now,
                half_life,
            )

    def book_fair(self, job: Job) -> None:
        """An admitted workload stops counting as admitted: its leaf's fair book folds the
        interval, decayed (F1). Nothing is kept with fair share off."""
        half_life = self.config.half_life_ms
        if half_life is None or job.used_path is None:
            return
        self.state.fair_book.close(
            job.used_path, dict(job.used_shape), job.admitted_ms, self.state.now, half_life
        )

    def decayed_usage(self, leaf: QuotaPath) -> dict[str, Decimal]:
        """``leaf``'s usage decayed to ``state.now`` (F1): its closed intervals from the fair
        book and its admitted workloads up to now; empty with fair share off."""
        half_life = self.config.half_life_ms
        if half_life is None:
            return {}
        running = [
            fairshare.Running(job.used_path, dict(job.used_shape), job.admitted_ms)
            for victim in self.leaf_admitted.get(leaf, ())
            if (job := self.state.jobs.get(victim[3])) is not None
            and job.state == ADMITTED
            and job.used_path is not None
        ] + [
            fairshare.Running(*interval)
            for interval in self.state.closing.values()
            if interval.path == leaf
        ]
        return fairshare.decayed_usage(
            self.state.fair_book, leaf, running, self.state.now, half_life
        )

    def fair_key(self, info: QuotaNodeInfo, tier: int) -> fairshare.FairKey:
        """The interleave key's fair-share element (F1): within the guarantee (tier 0), or
        with fair share off, 0 (R3's order); beyond it, the leaf's dominant decayed usage per
        weight. The running pass's own admissions started now: they add nothing yet."""
        if tier == 0 or self.config.half_life_ms is None:
            return 0
        tree = self.state.tree
        root = next(iter(tree.nodes.values()))  # the index is in pre-order: root first
        return fairshare.fair_key(
            self.decayed_usage(info.path),
            fairshare.root_capacity(root.max, root.min),
            tree.fair_weights.get(info.path, fairshare.DEFAULT_WEIGHT),
        )

    def book_budgets(self, job: Job) -> None:
        """An admitted workload stops counting as admitted: its interval closes now, and
        every budget on its path books what it accrued in the current window (U1, B1)."""
        found = self.state.tree.budgets
        if not found or job.used_path is None:
            return
        on_path = [b for node in path_nodes(job.used_path) for b in found.get(node, ())]
        if on_path:
            self.state.budget_book.close(
                on_path, dict(job.used_shape), job.admitted_ms, self.state.now
            )

    def _running(self) -> Iterator[budgets.Running]:
        """The admitted workloads below some budget: the per-leaf reclaim lists (a vanished
        leaf's too, C2) and the running pass's own admissions, not every job."""
        found = self.state.tree.budgets
        keys = {
            victim[3]
            for path, victims in self.leaf_admitted.items()
            if any(node in found for node in path_nodes(path))
            for victim in victims
        }
        keys.update(self.pass_admitted)
        for key in keys:
            job = self.state.jobs.get(key)
            if job is not None and job.state == ADMITTED and job.used_path is not None:
                yield budgets.Running(job.used_path, dict(job.used_shape), job.admitted_ms)
        yield from self.state.closing.values()  # finished, not yet released: still held (U1)

    def budget_statuses(
        self, now: Millis | None = None
    ) -> dict[budget_spec.BudgetKey, budgets.BudgetStatus]:
        """Every budget of the tree in force at ``now`` (default ``state.now``; a later one
        lets the running work accrue up to it): spent, left, window (B1)."""
        found = self.state.tree.budgets
        if not found:
            return {}
        at = self.state.now if now is None else max(now, self.state.now)
        return budgets.statuses(found, self.state.budget_book, self._running(), at)

    def refresh_budgets(self) -> None:
        """Recompute which leaves a spent budget stops, at ``state.now`` (a pass does it first;
        so do history queries, which run no pass). A leaf whose stop changed offers anew."""
        if self.budget_seen.get("at") == (self.state.now, self.state.version):
            return
        stops = self.spent_budget_stops()
        changed = {
            leaf
            for leaf in self.budget_stops.keys() | stops.keys()
            if _stop_id(self.budget_stops.get(leaf)) != _stop_id(stops.get(leaf))
        }
        if changed:
            self.state.version += 1
            self.dirty.update(changed)
        self.budget_stops = stops
        self.budget_seen["at"] = (self.state.now, self.state.version)

    def spent_budget_stops(self) -> dict[QuotaPath, budgets.BudgetStatus]:
        """Each leaf below a spent budget at ``state.now`` -> the one governing it."""
        found = self.budget_statuses()
        stops: dict[QuotaPath, budgets.BudgetStatus] = {}
        if any(status.exhausted for status in found.values()):
            for leaf in self.state.tree.leaves:
                status = budgets.nearest_stop(found, leaf)
                if status is not None:
                    stops[leaf] = status
        return stops

    def spent_budget_over(self, leaf: QuotaPath) -> budgets.BudgetStatus | None:
        """The spent budget governing ``leaf`` as of the last ``refresh_budgets`` (B1)."""
        return self.budget_stops.get(leaf)

    def budget_gated(self, leaf: QuotaPath) -> bool:
        """Whether a spent budget governs ``leaf`` (B1) or an opted-in budget may hold a
        declared runtime there (B2): the budget gates may shut something there."""
        return leaf in self.budget_stops or leaf in self.state.tree.overrun_leaves

    def budget_tier(self, leaf: QuotaPath, job: Job, within: bool) -> int:
        """The first element of an interleave key (R3, B1): 0 within min, 1 borrowing, and 2
        below a spent ``lower-priority`` budget, whatever the rest (a held preemptor aside)."""
        status = self.budget_stops.get(leaf)
        if (
            status is not None
            and not job.held
            and status.budget.action == budget_spec.BudgetAction.LOWER_PRIORITY
        ):
            return 2
        return 0 if within else 1

    def next_budget_change(self) -> Millis | None:
        """When a budget with work waiting below it resets or is used up (B1), or None."""
        if not self.state.tree.budgets:
            return None
        tree = self.state.tree
        waiting = {
            node
            for leaf, queue in self.leaf_queues.items()
            if queue.entries
            for node in path_nodes(leaf)
            if node in tree.budgets
        }
        if not waiting:
            return None
        found = [s for s in self.budget_statuses().values() if s.budget.node in waiting]
        at = budgets.next_change(found, self.state.now)
        return None if at is None else Millis(at)


def _stop_id(status: budgets.BudgetStatus | None) -> tuple[budget_spec.BudgetKey, str] | None:
    """What a leaf's budget stop is, to tell whether it changed (B1)."""
    return None if status is None else (status.budget.key, status.budget.action.value)
