"""Invariants checked after end-to-end runs, from the ledger's history and the log.

What it does: sweeps every allocation's lifetime (from admission or hold until preemption or
release) over time and reports any instant where a quota node would hold more than
``max x oversellRate`` of a resource; counts admissions per workload on the log.
What it must never do: trust the ``used`` column alone (it only shows the present).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime
from fractions import Fraction
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from usher.adapters.pg.ledger_store import path_of


async def history_violations(database_url: str, rate: Fraction) -> list[str]:
    """Every (time, node, resource) where the ledger's history exceeds the cap."""
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            caps = {
                (p, r): m * rate.numerator // rate.denominator
                for p, r, m in await conn.execute(
                    text("SELECT path, resource, max FROM quota_usage WHERE max IS NOT NULL")
                )
            }
            rows = (
                await conn.execute(
                    text(
                        "SELECT workload, quota_path, requests,"
                        " COALESCE(admitted_at, reserved_at) AS start,"
                        " COALESCE(preempted_at, released_at) AS stop"
                        " FROM allocations"
                    )
                )
            ).all()
    finally:
        await engine.dispose()
    changes: list[tuple[datetime, int, str, dict[str, Any]]] = []
    for row in rows:
        # Ends sort before starts at the same instant: a release and the admission it made
        # room for may share a timestamp.
        changes.append((row.start, 1, row.quota_path, row.requests))
        if row.stop is not None:
            changes.append((row.stop, 0, row.quota_path, row.requests))
    changes.sort(key=lambda c: (c[0], c[1]))
    used: dict[tuple[str, str], int] = defaultdict(int)
    violations: list[str] = []
    for when, starting, leaf, requests in changes:
        sign = 1 if starting else -1
        for node in path_of(leaf):  # type: ignore[arg-type]
            for resource, amount in requests.items():
                key = (str(node), resource)
                used[key] += sign * int(amount)
                cap = caps.get(key)
                if cap is not None and used[key] > cap:
                    violations.append(f"{when.isoformat()} {node} {resource} {used[key]} > {cap}")
    return violations


def admissions_per_workload(entries: list[tuple[int, str, Any]]) -> Counter[str]:
    """How many distinct ``Admitted`` decisions the log holds for each workload."""
    seen: Counter[str] = Counter()
    for _, _, envelope in entries:
        if type(envelope.event).__name__ == "Admitted":
            seen[str(envelope.event.workload)] += 1
    return seen
