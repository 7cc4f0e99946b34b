"""Budgets a tree node declares (docs/admission-rules.md B1, B2): the ``usher.io/budgets``,
``usher.io/budget-action`` and ``usher.io/budget-overrun`` attributes read into ``Budget``
records, or the errors refusing them (T1 names the attribute).

What it does: ``parse_budgets`` reads ``nvidia.com/gpu=500h per month; cpu=20000h per 7d`` into
exact integers (canonical units x ms); ``overrun_errors`` and ``holds_overrun`` read B2's opt-in.
What it must never do: account spend or decide anything (``usher.core.rules.budgets`` does), read
a clock, or perform I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from enum import StrEnum
from typing import Final

import msgspec

from schemas import FieldError, QuotaPath
from usher.core.model.quantity import MAX_CANONICAL, MS_PER_HOUR, unit_of
from usher.core.values import registry

BUDGETS_ATTRIBUTE: Final = registry.BUDGETS.key
BUDGET_ACTION_ATTRIBUTE: Final = registry.BUDGET_ACTION.key

MONTH: Final = 0
"""``Budget.days`` of a calendar-month budget (UTC)."""
MAX_DAYS: Final = 366

_ITEM = re.compile(
    r"^\s*(?P<resource>[^\s=;]+)\s*=\s*(?P<amount>[0-9]+(?:\.[0-9]+)?)h\s+per\s+"
    r"(?P<window>month|[0-9]{1,4}d)\s*$"
)


class BudgetAction(StrEnum):
    """What a spent budget does to new admissions below its node (B1)."""

    HOLD = "hold"
    """Nothing new is admitted below the node until the window resets."""
    MIN_ONLY = "min-only"
    """A workload is admitted only if its leaf stays within its ``min`` (no borrowing)."""
    LOWER_PRIORITY = "lower-priority"
    """Offered after every workload not below such a budget (a last interleave tier, R3)."""


BUDGET_ACTIONS: Final = tuple(action.value for action in BudgetAction)


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """One budget of one node: ``limit`` of ``resource`` x time per window."""

    node: QuotaPath
    resource: str
    limit: int
    """Canonical units (millicores for cpu) x milliseconds, exact."""
    days: int
    """The window: ``MONTH`` (0) for a calendar month UTC, else N-day periods from the epoch."""
    action: BudgetAction = BudgetAction.HOLD

    @property
    def key(self) -> BudgetKey:
        return (self.node, self.resource, self.days)


BudgetKey = tuple[QuotaPath, str, int]
"""A budget's identity in the book: node, resource and window length."""


# ---------------------------------------------------------------------------- parsing (T1)


def parse_budgets(
    attributes: Mapping[str, str], node: QuotaPath, field_prefix: str
) -> tuple[list[Budget], list[FieldError]]:
    """The budgets a node's attributes declare, or every error refusing them, each at the
    attribute's path under ``field_prefix`` (T1 names it). Items are separated by ``;``."""
    errors: list[FieldError] = []
    action = BudgetAction.HOLD
    action_text = attributes.get(BUDGET_ACTION_ATTRIBUTE)
    if action_text is not None:
        if action_text not in BUDGET_ACTIONS:
            allowed = ", ".join(BUDGET_ACTIONS)
            message = f"{BUDGET_ACTION_ATTRIBUTE} must be one of {allowed}, got {action_text!r}"
            errors.append(_invalid(f"{field_prefix}.{BUDGET_ACTION_ATTRIBUTE}", message))
        else:
            action = BudgetAction(action_text)
    text = attributes.get(BUDGETS_ATTRIBUTE)
    if text is None:
        return [], errors
    field = f"{field_prefix}.{BUDGETS_ATTRIBUTE}"
    out: list[Budget] = []
    seen: set[tuple[str, int]] = set()
    for item in (part for part in text.split(";") if part.strip()):
        budget, problem = _parse_item(item, node, action)
        if budget is None:
            errors.append(_invalid(field, problem))
        elif (budget.resource, budget.days) in seen:
            errors.append(_invalid(field, f"{item.strip()!r}: a second budget of the same window"))
        else:
            seen.add((budget.resource, budget.days))
            out.append(budget)
    if not out and not errors:
        errors.append(_invalid(field, "no budget given; expected e.g. 'cpu=100h per month'"))
    return (out if not errors else []), errors


def _parse_item(item: str, node: QuotaPath, action: BudgetAction) -> tuple[Budget | None, str]:
    match = _ITEM.match(item)
    if match is None:
        return None, (
            f"{item.strip()!r} is not '<resource>=<hours>h per month' or "
            f"'<resource>=<hours>h per <days>d'"
        )
    resource, window = match["resource"], match["window"]
    days = MONTH if window == "month" else int(window[:-1])
    if window != "month" and not 1 <= days <= MAX_DAYS:
        return None, f"{item.strip()!r}: a window is 1 to {MAX_DAYS} days"
    _, scale = unit_of(resource)
    exact = Decimal(match["amount"]) * scale * MS_PER_HOUR  # the pattern admits digits only
    if exact > MAX_CANONICAL:  # also where Decimal's 28 digits would have rounded
        return None, f"{item.strip()!r}: too large"
    if exact != exact.to_integral_value():
        return None, f"{item.strip()!r}: finer than one canonical unit x ms"
    return Budget(node=node, resource=resource, limit=int(exact), days=days, action=action), ""


def _invalid(field: str, message: str) -> FieldError:
    return FieldError(path=field, code="invalid-attribute", message=message)


OVERRUN_ATTRIBUTE: Final = registry.BUDGET_OVERRUN.key
OVERRUN_VALUES: Final = ("hold", "off")
"""``hold``: the node's budgets hold a workload whose declared runtime would overrun what is
left; ``off`` (the default): they do not."""


def overrun_errors(attributes: Mapping[str, str], field_prefix: str) -> list[FieldError]:
    """T1: the attribute is ``hold`` or ``off``, on a node that carries budgets."""
    raw = attributes.get(OVERRUN_ATTRIBUTE)
    if raw is None:
        return []
    field = f"{field_prefix}.{OVERRUN_ATTRIBUTE}"
    if raw not in OVERRUN_VALUES:
        message = f'{OVERRUN_ATTRIBUTE} must be "hold" or "off", got {raw!r}'
        return [FieldError(path=field, code="invalid-attribute", message=message)]
    if raw == "hold" and BUDGETS_ATTRIBUTE not in attributes:
        message = f"{OVERRUN_ATTRIBUTE} is set on a node without {BUDGETS_ATTRIBUTE}"
        return [FieldError(path=field, code="invalid-attribute", message=message)]
    return []


def holds_overrun(attributes: Mapping[str, str]) -> bool:
    """Whether a node's budgets hold workloads whose declared runtime would overrun them."""
    return attributes.get(OVERRUN_ATTRIBUTE) == "hold"
