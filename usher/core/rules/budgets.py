"""Window budgets of quota nodes (docs/admission-rules.md B1): what is spent, what it stops.

What it does: ``parse_budgets`` reads a node's ``usher.io/budgets`` attribute
(``nvidia.com/gpu=500h per month; cpu=20000h per 7d``) into ``Budget`` records, exact integers
(canonical units x ms), or the errors refusing it (T1 names the attribute); ``window_of`` says
which window an instant falls in (a calendar month UTC, or consecutive N-day periods counted
from 1970-01-01 UTC) and when it resets. ``BudgetBook`` keeps, per budget, what closed
allocation intervals accrued in the current window (U1's intervals: an interval closes at
the ledger's ``Preempted``, ``Requeued`` or ``Released`` of its workload); ``BudgetStatus``
adds the running work up to ``now`` and says whether the budget is spent (``spent >=
limit``), how long the running work takes to use up what is left (``ms_until_exhausted``)
and the pending reason (``BudgetExhausted: 503.2 of 500 GPU-hours in 2026-11, resets
2026-12-01 (budget of root/research)``); ``nearest_stop`` says which spent budget governs a
leaf (its action: ``hold``, ``min-only`` or ``lower-priority``) and ``next_change`` when one
resets or runs out (the engine's wakeups). ``budget_report`` and its renderers print ``usher
budget``. Also the opt-in of B2's overrun
hold, ``usher.io/budget-overrun`` (``overrun_errors``, ``holds_overrun``; the hold itself is
``budget_overrun``'s).
What it must never do: read a clock (``now`` is passed in), perform I/O, use float arithmetic on
an amount, or evict anything (a spent budget only stops or orders new admissions, B1).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Final, NamedTuple

import msgspec

from schemas import Millis, QuotaPath, Reason, ReasonCode
from usher.core.model.quantity import format_quantity, hours, unit_of
from usher.core.tree.budget_spec import MONTH, Budget, BudgetAction, BudgetKey

MS_PER_DAY: Final = 86_400_000


# ---------------------------------------------------------------------------- windows


class Window(NamedTuple):
    """One window ``[start_ms, end_ms)`` and its name for people."""

    start_ms: int
    end_ms: int
    label: str


def _utc(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def _ms(when: datetime) -> int:
    return (when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def window_of(days: int, now: int) -> Window:
    """The window of a budget of ``days`` (``MONTH``: the calendar month UTC) holding ``now``."""
    if days == MONTH:
        when = _utc(now)
        start = datetime(when.year, when.month, 1, tzinfo=UTC)
        end = datetime(when.year + when.month // 12, when.month % 12 + 1, 1, tzinfo=UTC)
        return Window(_ms(start), _ms(end), f"{when.year:04d}-{when.month:02d}")
    length = days * MS_PER_DAY
    start_ms = now - now % length
    label = f"the {days} day{'s' if days != 1 else ''} from {_day(start_ms)}"
    return Window(start_ms, start_ms + length, label)


def _day(ms: int) -> str:
    return _utc(ms).strftime("%Y-%m-%d")


def window_text(days: int) -> str:
    """How a budget's window is written: ``month`` or ``7d``."""
    return "month" if days == MONTH else f"{days}d"


# ---------------------------------------------------------------------------- the book


def accrued(amount: int, start_ms: int, window: Window, now: int) -> int:
    """What ``amount`` held since ``start_ms`` accrued in ``window`` up to ``now`` (U1)."""
    return amount * max(0, min(now, window.end_ms) - max(start_ms, window.start_ms))


class BudgetBook(msgspec.Struct, kw_only=True):
    """Per budget, what closed intervals accrued in its current window (a snapshot keeps it).

    Only intervals that close while a budget is on their path are booked: a budget a new tree
    brings counts the work running then from its admission, never work that ended before it.
    """

    closed: dict[str, tuple[int, int]] = msgspec.field(default_factory=dict)
    """``book_key`` -> (the window's start, canonical units x ms accrued there)."""

    def booked(self, budget: Budget, window: Window) -> int:
        kept = self.closed.get(book_key(budget.key))
        return kept[1] if kept is not None and kept[0] == window.start_ms else 0

    def close(
        self, budgets: Iterable[Budget], shape: Mapping[str, int], start_ms: int, now: int
    ) -> None:
        """An interval from ``start_ms`` closes at ``now``: each budget on its path books it."""
        for budget in budgets:
            amount = shape.get(budget.resource, 0)
            if not amount:
                continue
            window = window_of(budget.days, now)
            add = accrued(amount, start_ms, window, now)
            key = book_key(budget.key)
            self.closed[key] = (window.start_ms, self.booked(budget, window) + add)

    def copy(self) -> BudgetBook:
        return BudgetBook(closed=dict(self.closed))


def book_key(key: BudgetKey) -> str:
    """A book entry's name (a string: a snapshot stores it as a JSON key)."""
    node, resource, days = key
    return f"{node} {resource} {days}"


# ---------------------------------------------------------------------------- status


class BudgetStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One budget at ``now``: its window, what is spent and how fast the running work spends."""

    budget: Budget
    window: Window
    spent: int
    rate: int
    """Canonical units the running work below the node holds: what one more ms adds."""

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.budget.limit

    @property
    def left(self) -> int:
        return max(0, self.budget.limit - self.spent)

    def ms_until_exhausted(self) -> int | None:
        """How long the running work, at its present rate, takes to use up what is left
        (rounded up to a whole ms, so the budget is spent then); None if nothing runs."""
        if self.exhausted or self.rate <= 0:
            return None
        return _ceil_div(self.left, self.rate)

    def _of_limit(self, amount_ms: int) -> str:
        """``amount_ms`` against the budget's limit: ``12 of 100 <unit>-hours``."""
        resource = self.budget.resource
        unit, _ = unit_of(resource)
        return (
            f"{people_hours(resource, amount_ms)} of "
            f"{people_hours(resource, self.budget.limit)} {unit}-hours"
        )

    def _window_of_budget(self) -> str:
        """Which window of which budget, its parenthesis left open for a note:
        ``2026-11, resets 2026-12-01 (budget of root/a``."""
        return (
            f"{self.window.label}, resets {_day(self.window.end_ms)} (budget of {self.budget.node}"
        )

    def _reason(self, code: ReasonCode, message: str, requested: int | None = None) -> Reason:
        """A budget reason's numbers: the budget's node and resource, spent against limit."""
        return Reason(
            code=code,
            message=message,
            node=self.budget.node,
            resource=self.budget.resource,
            used=self.spent,
            requested=requested,
            limit=self.budget.limit,
        )

    def pending_reason(self, now: int, within_min: str | None = None) -> Reason:
        """What a workload waiting below a spent budget says (B1)."""
        message = f"{self._of_limit(self.spent)} in {self._window_of_budget()}"
        message += f"; {within_min})" if within_min is not None else ")"
        return self._reason("BudgetExhausted", message)

    def overrun_reason(self, amount: int, runtime_ms: int) -> Reason:
        """What a workload held because its declared runtime x request is more than the
        budget has left says (B2): ``amount`` of the resource for ``runtime_ms``."""
        budget = self.budget
        unit, _ = unit_of(budget.resource)
        need = amount * runtime_ms
        message = (
            f"declared {runtime_ms // 1000} s x {budget.resource} "
            f"{format_quantity(budget.resource, amount)} = "
            f"{people_hours(budget.resource, need)} {unit}-hours, more than the "
            f"{self._of_limit(self.left)} left in {self._window_of_budget()})"
        )
        return self._reason("BudgetOverrun", message, requested=need)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def people_hours(resource: str, amount_ms: int) -> str:
    """Hours of the resource's unit for people: exact to 3 decimals, no trailing zeros."""
    text = f"{hours(resource, amount_ms):f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


class Running(NamedTuple):
    """One admitted workload as budgets count it: where, what, since when."""

    path: QuotaPath
    shape: Mapping[str, int]
    admitted_ms: int


def statuses(
    budgets: Mapping[QuotaPath, tuple[Budget, ...]],
    book: BudgetBook,
    running: Iterable[Running],
    now: int,
) -> dict[BudgetKey, BudgetStatus]:
    """Every budget in force at ``now``: booked intervals plus the running work up to now."""
    spent: dict[BudgetKey, int] = {}
    rate: dict[BudgetKey, int] = {}
    windows: dict[BudgetKey, Window] = {}
    for node_budgets in budgets.values():
        for budget in node_budgets:
            window = window_of(budget.days, now)
            windows[budget.key] = window
            spent[budget.key] = book.booked(budget, window)
            rate[budget.key] = 0
    for item in running:
        for node in _path_nodes(item.path):
            for budget in budgets.get(node, ()):
                amount = item.shape.get(budget.resource, 0)
                if amount:
                    window = windows[budget.key]
                    spent[budget.key] += accrued(amount, item.admitted_ms, window, now)
                    rate[budget.key] += amount
    out: dict[BudgetKey, BudgetStatus] = {}
    for node_budgets in budgets.values():
        for budget in node_budgets:
            key = budget.key
            out[key] = BudgetStatus(
                budget=budget, window=windows[key], spent=spent[key], rate=rate[key]
            )
    return out


def _path_nodes(path: QuotaPath) -> list[QuotaPath]:
    """``root/a/b`` -> ``root``, ``root/a``, ``root/a/b`` (as ``tree.path_nodes``, which this
    module may not import: the tree imports it to check attributes)."""
    parts = path.split("/")
    return [QuotaPath("/".join(parts[: i + 1])) for i in range(len(parts))]


def stop_over(
    found: Mapping[BudgetKey, BudgetStatus], leaf: QuotaPath, action: BudgetAction
) -> BudgetStatus | None:
    """The spent budget with ``action`` nearest to ``leaf`` on its path (leaf first, then by
    resource and window), or None."""
    for node in reversed(_path_nodes(leaf)):
        spent = sorted(
            (s for s in found.values() if s.budget.node == node and s.budget.action == action),
            key=lambda s: (s.budget.resource, s.budget.days),
        )
        for status in spent:
            if status.exhausted:
                return status
    return None


def nearest_stop(found: Mapping[BudgetKey, BudgetStatus], leaf: QuotaPath) -> BudgetStatus | None:
    """The spent budget that governs ``leaf``: the strongest action first (``hold``, then
    ``min-only``, then ``lower-priority``), of one action the nearest (``stop_over``)."""
    for action in BudgetAction:
        status = stop_over(found, leaf, action)
        if status is not None:
            return status
    return None


def next_change(found: Iterable[BudgetStatus], now: int) -> int | None:
    """The next instant after ``now`` a budget changes what it stops: a spent one resets at
    its window's end, an unspent one is used up by the running work (B1's wakeups)."""
    ahead: list[int] = []
    for status in found:
        if status.exhausted:
            ahead.append(status.window.end_ms)
            continue
        until = status.ms_until_exhausted()
        if until is not None and now + until < status.window.end_ms:
            ahead.append(now + until)
    later = [at for at in ahead if at > now]
    return min(later) if later else None


# ---------------------------------------------------------------------------- report


class BudgetRow(msgspec.Struct, frozen=True, kw_only=True):
    """One budget at the report's ``now``: for ``usher budget``, the client and metrics."""

    node: QuotaPath
    resource: str
    window: str
    """``month`` or ``<N>d``."""
    period: str
    """The current window for people: ``2026-11`` or ``the 7 days from 2026-11-19``."""
    action: str
    limit_ms: int
    spent_ms: int
    left_ms: int
    """Canonical units x ms, exact."""
    limit_hours: str
    spent_hours: str
    left_hours: str
    unit: str
    resets_ms: int
    resets: str
    exhausted: bool


class BudgetReport(msgspec.Struct, frozen=True, kw_only=True):
    now_ms: Millis
    rows: list[BudgetRow]


def budget_report(found: Mapping[BudgetKey, BudgetStatus], now: Millis) -> BudgetReport:
    """One row per budget, by node, resource and window."""
    rows: list[BudgetRow] = []
    for key in sorted(found):
        status = found[key]
        budget = status.budget
        unit, _ = unit_of(budget.resource)
        rows.append(
            BudgetRow(
                node=budget.node,
                resource=budget.resource,
                window=window_text(budget.days),
                period=status.window.label,
                action=budget.action.value,
                limit_ms=budget.limit,
                spent_ms=status.spent,
                left_ms=status.left,
                limit_hours=people_hours(budget.resource, budget.limit),
                spent_hours=people_hours(budget.resource, status.spent),
                left_hours=people_hours(budget.resource, status.left),
                unit=f"{unit}-hours",
                resets_ms=status.window.end_ms,
                resets=_day(status.window.end_ms),
                exhausted=status.exhausted,
            )
        )
    return BudgetReport(now_ms=now, rows=rows)


def render_budget_table(report: BudgetReport) -> str:
    """One line per budget: spent, limit, left, unit, reset day and whether it is spent."""
    lines = [
        f"  {'NODE':<28} {'RESOURCE':<16} {'WINDOW':<7} {'SPENT':>12} {'LIMIT':>12} "
        f"{'LEFT':>12}  {'UNIT':<12} {'RESETS':<10}  STATE"
    ]
    for row in report.rows:
        state = f"exhausted ({row.action})" if row.exhausted else "ok"
        lines.append(
            f"  {row.node:<28} {row.resource:<16} {row.window:<7} {row.spent_hours:>12} "
            f"{row.limit_hours:>12} {row.left_hours:>12}  {row.unit:<12} {row.resets:<10}  {state}"
        )
    if not report.rows:
        lines.append("  (no node of the quota tree carries a budget)")
    return "\n".join(lines) + "\n"


def render_budget_json(report: BudgetReport) -> str:
    return json.dumps(msgspec.to_builtins(report), indent=2, sort_keys=True) + "\n"


__all__ = [
    "BudgetBook",
    "BudgetReport",
    "BudgetRow",
    "BudgetStatus",
    "Running",
    "accrued",
    "budget_report",
    "nearest_stop",
    "next_change",
    "people_hours",
    "render_budget_json",
    "render_budget_table",
    "statuses",
    "stop_over",
    "window_of",
    "window_text",
]
