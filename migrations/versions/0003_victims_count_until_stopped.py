"""victims count until stopped: recompute quota_usage.used under the group rule

A preempted victim (state ``preempting``) now keeps counting on its path until it is seen
stopped, and its preemptor's ``held`` allocation is carved out of it: a preemption group counts
``max(victims, hold)`` per (node, resource) (docs/admission-rules.md R7). Upgrading recomputes
every ``used`` from the live allocations under that rule; downgrading recomputes it under the
old one (victims not counted, holds counted whole).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_Key = tuple[str, str]


def _paths(leaf: str) -> list[str]:
    parts = leaf.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _add(into: dict[_Key, int], leaf: str, requests: dict[str, object]) -> None:
    for node in _paths(leaf):
        for resource, amount in requests.items():
            into[(node, resource)] = into.get((node, resource), 0) + int(str(amount))


def _usage(rows: list[Any], *, groups: bool) -> dict[_Key, int]:
    """``used`` per (node, resource) from live allocations, with or without the group rule."""
    used: dict[_Key, int] = {}
    victims: dict[str, dict[_Key, int]] = {}
    holds: dict[str, dict[_Key, int]] = {}
    for workload, state, leaf, requests, preemptor in rows:
        if state in ("reserved", "admitted"):
            _add(used, leaf, requests)
        elif state == "held":
            _add(holds.setdefault(workload, {}) if groups else used, leaf, requests)
        elif state == "preempting" and groups and preemptor is not None:
            _add(victims.setdefault(preemptor, {}), leaf, requests)
    for preemptor in sorted(set(victims) | set(holds)):
        running, held = victims.get(preemptor, {}), holds.get(preemptor, {})
        for key in set(running) | set(held):
            used[key] = used.get(key, 0) + max(running.get(key, 0), held.get(key, 0))
    return used


def _recompute(*, groups: bool) -> None:
    bind = op.get_bind()
    rows = list(
        bind.execute(
            sa.text(
                "SELECT workload, state, quota_path, requests, preemptor FROM allocations "
                "WHERE state <> 'released'"
            )
        )
    )
    used = _usage(rows, groups=groups)
    bind.execute(sa.text("UPDATE quota_usage SET used = 0"))
    for (path, resource), amount in sorted(used.items()):
        bind.execute(
            sa.text(
                "INSERT INTO quota_usage (path, resource, min, max, used) "
                "VALUES (:p, :r, 0, NULL, :u) "
                "ON CONFLICT (path, resource) DO UPDATE SET used = :u"
            ),
            {"p": path, "r": resource, "u": amount},
        )


def upgrade() -> None:
    _recompute(groups=True)


def downgrade() -> None:
    _recompute(groups=False)
