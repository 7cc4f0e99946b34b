"""The ledger history sweep of ``checks.py`` on allocation rows written into a real database.

A preempted victim runs until the ledger releases it, not until it is preempted; a preemptor's
hold that was never admitted never ran.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from fractions import Fraction

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.e2e.checks import history_violations

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
CPU = 1000


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def _write(url: str, rows: list[dict[str, object]]) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            for path, parent in (("root", None), ("root/a", "root"), ("root/b", "root")):
                await conn.execute(
                    text(
                        "INSERT INTO quota_nodes (path, parent_path, name, tree_version)"
                        " VALUES (:path, :parent, :name, 1)"
                    ),
                    {"path": path, "parent": parent, "name": path.rsplit("/", 1)[-1]},
                )
                await conn.execute(
                    text("INSERT INTO quota_usage (path, resource, max) VALUES (:p, 'cpu', :m)"),
                    {"p": path, "m": 100 * CPU},
                )
            for row in rows:
                await conn.execute(
                    text(
                        "INSERT INTO allocations (workload, zone, quota_path, queue, requests,"
                        " state, reserved_at, admitted_at, preempted_at, released_at)"
                        " VALUES (:workload, 'default', :quota, 'q', CAST(:requests AS jsonb),"
                        " 'released', :reserved, :admitted, :preempted, :released)"
                    ),
                    {
                        "workload": row["workload"],
                        "quota": row["quota"],
                        "requests": msgspec.json.encode({"cpu": row["cpu"]}).decode(),
                        "reserved": row.get("reserved", row.get("admitted")),
                        "admitted": row.get("admitted"),
                        "preempted": row.get("preempted"),
                        "released": row["released"],
                    },
                )
    finally:
        await engine.dispose()


async def test_a_victim_counts_until_released_and_a_hold_only_once_admitted(
    migrated_url: str,
) -> None:
    await _write(
        migrated_url,
        [
            # The victim: 60 cpu on b, preempted at 2 s, stopped and released at 4 s.
            {
                "workload": "b/victim",
                "quota": "root/b",
                "cpu": 60 * CPU,
                "admitted": at(0),
                "preempted": at(2),
                "released": at(4),
            },
            {
                "workload": "a/base",
                "quota": "root/a",
                "cpu": 30 * CPU,
                "admitted": at(0),
                "released": at(10),
            },
            # Admitted at 3 s while the victim still runs: root 60 + 30 + 20 = 110 > 100.
            {
                "workload": "a/other",
                "quota": "root/a",
                "cpu": 20 * CPU,
                "admitted": at(3),
                "released": at(10),
            },
            # A hold reserved at 2 s and released unadmitted at 3.5 s: it never ran.
            {
                "workload": "b/gone",
                "quota": "root/b",
                "cpu": 10 * CPU,
                "reserved": at(2),
                "released": at(3.5),
            },
        ],
    )
    found = await history_violations(migrated_url, Fraction(1))
    assert found == [f"{at(3).isoformat()} root cpu 110000 > 100000"]
