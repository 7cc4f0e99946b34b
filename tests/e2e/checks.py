"""Invariants checked after end-to-end runs, from the ledger's history and the log.

What it does: replays the whole log (read with the export adapter's reader) through the
core's invariant checker (``usher.core.history.invariants``: running usage within
``max x oversellRate``, no admission while live, every preemption justified, nothing stuck at
the end); sweeps every allocation's lifetime in the ledger (from its admission until its
release: a preempted victim runs until it is released, a hold is not running) over time and
reports any instant where a quota node would hold more than ``max x oversellRate`` of a
resource; counts admissions per workload on the log.
What it must never do: trust the ``used`` column alone (it only shows the present).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from datetime import datetime
from fractions import Fraction
from typing import Any

from nats.js import JetStreamContext
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from usher.adapters.nats.export import read_entries
from usher.adapters.nats.subjects import Subjects
from usher.core.history.invariants import Violation, check_log, render_violations
from usher.core.history.replay import decode_history
from usher.core.model.config import EngineConfig
from usher.core.tree.quota_tree import path_nodes


async def log_violations(
    js: JetStreamContext, subjects: Subjects, config: EngineConfig, *, at_end: bool = True
) -> list[Violation]:
    """Every invariant the whole log breaks; ``at_end`` only once the log has come to rest."""
    history = decode_history(await read_entries(js, subjects))
    # The run's settings, deciding for every zone: the checker sees the whole log.
    everywhere = EngineConfig(
        policy=config.policy,
        oversell_rate=config.oversell_rate,
        within_quota=config.within_quota,
        min_runtime_ms=config.min_runtime_ms,
    )
    return check_log(history.items, everywhere, at_end=at_end)


async def assert_log_invariants(
    js: JetStreamContext, subjects: Subjects, config: EngineConfig
) -> None:
    """The end of every end-to-end run: the quiet log breaks no invariant."""
    found = await log_violations(js, subjects, config)
    assert found == [], f"{len(found)} invariant violations:\n{render_violations(found)}"


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
                        # Running from admission until release: a preempted victim runs
                        # until it is released; a hold never admitted never ran.
                        "SELECT workload, quota_path, requests,"
                        " admitted_at AS start, released_at AS stop"
                        " FROM allocations WHERE admitted_at IS NOT NULL"
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
        for node in path_nodes(leaf):  # type: ignore[arg-type]
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


def story_checks(entries: list[tuple[int, str, Any]], jobs: set[str]) -> int:
    """Each job's story on the whole log: admitted once more than it was sent back (preempted,
    or requeued after its ready timeout, R10), or as often if it finished before the ledger
    carried the eviction out; never while it held quota, never after it finished, and holding
    none at the end. Returns the number of preemptions."""
    admitted: Counter[str] = Counter()
    preempted: Counter[str] = Counter()
    requeued: Counter[str] = Counter()
    finished_running: set[str] = set()
    finished: set[str] = set()
    live: set[str] = set()
    problems: list[str] = []
    for seq, _, envelope in entries:
        event = envelope.event
        kind = type(event).__name__
        key = str(getattr(event, "workload", ""))
        if kind == "Admitted":
            if key in live:
                problems.append(f"seq {seq}: {key} admitted while it still holds quota")
            if key in finished:
                problems.append(f"seq {seq}: {key} admitted after it finished")
            live.add(key)
            admitted[key] += 1
            finished_running.discard(key)
        elif kind == "Preempted":
            preempted[key] += 1
        elif kind == "Requeued" and event.retry_after_ms is not None:
            requeued[key] += 1
        elif kind == "Released":
            live.discard(key)
        elif kind == "WorkloadFinished" and admitted[key]:
            finished_running.add(key)
            finished.add(key)
    # Each eviction is followed by a new admission, unless the victim's pods completed before
    # it was suspended (its job finished, maybe before the ledger, which learns of it from the
    # log, carried out the preemption): then nothing is left to admit.
    problems += [
        f"{key}: admitted {admitted[key]}x, preempted {preempted[key]}x, requeued {requeued[key]}x"
        for key in sorted(jobs)
        if admitted[key] != preempted[key] + requeued[key] + 1
        and not (admitted[key] == preempted[key] + requeued[key] and key in finished_running)
    ]
    problems += [f"{key} still holds quota at the end" for key in sorted(live)]
    assert problems == [], problems[:10]
    return sum(preempted.values())


async def assert_audit_clean(env: dict[str, str], prefix: str, database_url: str) -> None:
    """``usher audit --quiescent`` over the whole log and the ledger exits 0."""
    audit = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "usher.cli", "audit", "--nats", env["USHER_NATS_URL"],
         "--prefix", prefix, "--database", database_url, "--quiescent"],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "USHER_HOME": env["USHER_HOME"]},
    )  # fmt: skip
    assert audit.returncode == 0, audit.stdout[-4000:] + audit.stderr[-2000:]


# Each ended allocation's resource-milliseconds, summed by PostgreSQL itself: its interval runs
# from admission to preemption (or requeue), else release (U1), each end in whole ms as
# ``usher.core.protocol.log.datetime_ms`` takes them (the float seconds since the epoch x 1000,
# cut).
_USAGE_BY_NAMESPACE_SQL = """
SELECT split_part(a.workload, '/', 1) AS namespace, r.key AS resource,
       SUM(GREATEST(0,
           floor(extract(epoch FROM COALESCE(a.preempted_at, a.released_at))::float8 * 1000)
           - floor(extract(epoch FROM a.admitted_at)::float8 * 1000)
       )::bigint * r.value::bigint) AS amount_ms
FROM allocations a, jsonb_each_text(a.requests) r
WHERE a.admitted_at IS NOT NULL AND r.value::bigint <> 0
GROUP BY 1, 2
"""


async def assert_usage_equals_ledger_sql(
    env: dict[str, str], prefix: str, database_url: str
) -> dict[tuple[str, str], int]:
    """``usher usage --by namespace -o json`` (folded from the log's decisions) equals the
    ledger's allocation intervals summed by SQL, to the millisecond, once nothing runs any
    more (every interval closed). Returns the totals."""
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            open_rows = await conn.execute(
                text(
                    "SELECT count(*) FROM allocations WHERE admitted_at IS NOT NULL"
                    " AND COALESCE(preempted_at, released_at) IS NULL"
                )
            )
            assert open_rows.scalar_one() == 0, "an admitted allocation is still open"
            rows = (await conn.execute(text(_USAGE_BY_NAMESPACE_SQL))).all()
    finally:
        await engine.dispose()
    by_sql = {(row.namespace, row.resource): int(row.amount_ms) for row in rows if row.amount_ms}
    report = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "usher.cli", "usage", "--nats", env["USHER_NATS_URL"],
         "--prefix", prefix, "--by", "namespace", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "USHER_HOME": env["USHER_HOME"]},
    )  # fmt: skip
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    by_log = {
        (row["group"], row["resource"]): int(row["amount_ms"])
        for row in json.loads(report.stdout)["rows"]
    }
    assert by_log == by_sql
    assert by_sql, "nothing was used: the comparison proves nothing"
    return by_sql
