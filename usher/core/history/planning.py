"""The planning report (docs/admission-rules.md S2): what a run did for each department
(``usher sim --generate``, ``usher what-if``).

What it does: ``planning_report`` reads a run's decisions (in the ledger's order, with the
``Released`` a finish brings, as usage accounting folds them: U1), when each job arrived,
which jobs still wait at the end, the quota tree's guarantees and the cluster's capacity, and
says per department (a child of the root; the root itself when it has none): jobs that
arrived, admitted, still pending, wait mean/p95/max (arrival to first admission),
preemptions, and per resource the resource-seconds used against the guarantee over the window
(used / min x window), the share of the cluster's capacity (utilisation) and the
resource-seconds of runs a preemption threw away. ``render_planning_table``/``_json``/``_csv``
print it; ``wait_percentile`` is the one p95 rule ``what-if`` uses too.

What it must never do: read a clock, perform I/O, draw random numbers, or change a decision;
amounts are exact integers (canonical units x ms) until they are printed.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

import msgspec

from schemas import (
    Admitted,
    Decision,
    Inadmissible,
    Millis,
    NodeObserved,
    NodeRemoved,
    Pending,
    Preempted,
    QuotaPath,
    Requeued,
    WorkloadKey,
)
from usher.core.history.usage import MS_PER_SECOND, Interval, UsageFold, unit_of, usage_totals
from usher.core.model.quantity import format_quantity

CLUSTER = "(cluster)"
"""The row that sums every department (its guarantee is the root's min)."""
PERCENT = Decimal("0.1")
SECONDS = Decimal("0.001")


def wait_percentile(sorted_waits: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of waits sorted ascending (not empty)."""
    return sorted_waits[math.ceil(fraction * len(sorted_waits)) - 1]


class ResourceUse(msgspec.Struct, frozen=True, kw_only=True):
    """One department's use of one resource over the window, in unit-seconds of the
    resource's unit (core-seconds, GiB-seconds, GPU-seconds)."""

    resource: str
    unit: str
    used: str
    guaranteed: str
    """The department's min x the window."""
    of_guarantee_pct: str | None
    """``used`` / ``guaranteed`` in percent; None without a guarantee."""
    utilisation_pct: str | None
    """``used`` / (the cluster's capacity x the window) in percent; None without capacity."""
    lost_to_preemption: str
    """Resource-seconds of runs a preemption ended (that work is done again)."""


class DepartmentStats(msgspec.Struct, frozen=True, kw_only=True):
    """What the run did for one department (or, as ``(cluster)``, for all of them)."""

    department: str
    jobs: int
    """Jobs that arrived in the window."""
    admitted: int
    """Of them, admitted at least once."""
    pending: int
    """Jobs still waiting in a queue at the end."""
    wait_mean_s: float | None
    wait_p95_s: float | None
    wait_max_s: float | None
    preemptions: int
    resources: list[ResourceUse]


class PlanningReport(msgspec.Struct, frozen=True, kw_only=True):
    """The per-department report over ``[since_s, until_s)``."""

    since_s: float
    until_s: float
    capacity: dict[str, str]
    departments: list[DepartmentStats]
    cluster: DepartmentStats


@dataclass(frozen=True)
class RunRecord:
    """What a run left that the report reads (a scenario run's or a what-if run's)."""

    decisions: Sequence[tuple[Millis, Decision]]
    """Every decision in the order it was taken, with the ``Released`` of finishes (U1)."""
    arrivals: Mapping[WorkloadKey, Millis]
    """When each job arrived; those in ``[since, until]`` count (one arriving at the window's
    last instant was decided on)."""
    waiting: Iterable[WorkloadKey]
    """The jobs in a queue at the end."""
    quotas: Mapping[WorkloadKey, str]
    """Each job's quota node at the end, where it has one (a job no decision placed yet)."""
    limits: Mapping[QuotaPath, tuple[Mapping[str, int], Mapping[str, int]]]
    """Quota node -> (min, max) of the tree in force at the end."""
    capacity: Mapping[str, int]
    since_ms: Millis
    until_ms: Millis
    opening: Sequence[Interval] = ()
    """Allocations already held when the decisions start (a replay from ``--since``)."""


# ---------------------------------------------------------------------------- inputs


def capacity_of(events: Iterable[object]) -> dict[str, int]:
    """The summed allocatable of the nodes the events leave in the cluster."""
    nodes: dict[tuple[str, str], Mapping[str, int]] = {}
    for event in events:
        if isinstance(event, NodeObserved):
            nodes[(event.zone, event.node)] = event.allocatable
        elif isinstance(event, NodeRemoved):
            nodes.pop((event.zone, event.node), None)
    total: dict[str, int] = {}
    for allocatable in nodes.values():
        for resource, amount in allocatable.items():
            total[resource] = total.get(resource, 0) + amount
    return total


def departments_of(limits: Iterable[QuotaPath]) -> list[QuotaPath]:
    """The root's children (sorted); the root alone when it has none."""
    paths = sorted(limits)
    children = [p for p in paths if p.count("/") == 1]
    return children or [p for p in paths if "/" not in p]


def department_of(quota: str, departments: Sequence[QuotaPath]) -> QuotaPath | None:
    """The department whose subtree holds ``quota``."""
    for department in departments:
        if quota == department or quota.startswith(f"{department}/"):
            return department
    return None


# ---------------------------------------------------------------------------- the report


@dataclass
class _Tally:
    first_admit: dict[WorkloadKey, Millis]
    quota_of: dict[WorkloadKey, str]
    preemptions: dict[WorkloadKey, int]
    used: list[Interval]
    lost: list[Interval]


def _tally(decisions: Sequence[tuple[Millis, Decision]], opening: Sequence[Interval]) -> _Tally:
    """One pass over the decisions: first admissions, each job's last quota node, the
    intervals held (U1, from the ``opening`` ones on) and those a preemption ended."""
    fold = UsageFold()
    for interval in opening:
        fold.open.setdefault(interval.workload, interval)
    tally = _Tally({}, {}, {}, [], [])
    for at_ms, decision in decisions:
        quota = (
            decision.quota
            if isinstance(decision, Admitted | Pending | Preempted | Requeued | Inadmissible)
            else None
        )
        if quota:
            tally.quota_of[decision.workload] = quota
        if isinstance(decision, Admitted):
            tally.first_admit.setdefault(decision.workload, at_ms)
        closed_before = len(fold.closed)
        fold.apply(decision, at_ms)
        if isinstance(decision, Preempted):
            key = decision.workload
            tally.preemptions[key] = tally.preemptions.get(key, 0) + 1
            tally.lost.extend(fold.closed[closed_before:])
    tally.used = fold.intervals()
    return tally


def planning_report(record: RunRecord) -> PlanningReport:
    """The report per department and for the whole cluster."""
    departments = departments_of(record.limits)
    tally = _tally(record.decisions, record.opening)
    for key, quota in record.quotas.items():
        tally.quota_of.setdefault(key, quota)
    window = record.until_ms - record.since_ms
    waiting = set(record.waiting)

    def totals(intervals: list[Interval]) -> dict[tuple[str, str], int]:
        return usage_totals(
            intervals, since_ms=record.since_ms, until_ms=record.until_ms, now_ms=record.until_ms
        )

    used, lost = totals(tally.used), totals(tally.lost)
    rows: list[DepartmentStats] = []
    for department in [*departments, None]:
        group = str(department) if department is not None else None
        guarantee = record.limits.get(department or _root(departments), ({}, {}))[0]
        jobs = [
            key
            for key in record.arrivals
            if record.since_ms <= record.arrivals[key] <= record.until_ms
            and (department is None or _belongs(key, department, tally, departments))
        ]
        rows.append(
            _department_row(
                name=group or CLUSTER,
                jobs=jobs,
                record=record,
                tally=tally,
                waiting=waiting,
                resources=_resource_rows(
                    group, guarantee, used, lost, record.capacity, window, departments
                ),
            )
        )
    return PlanningReport(
        since_s=record.since_ms / MS_PER_SECOND,
        until_s=record.until_ms / MS_PER_SECOND,
        capacity={r: format_quantity(r, a) for r, a in sorted(record.capacity.items())},
        departments=rows[:-1],
        cluster=rows[-1],
    )


def _root(departments: Sequence[QuotaPath]) -> QuotaPath:
    return QuotaPath(departments[0].split("/")[0]) if departments else QuotaPath("")


def _belongs(
    key: WorkloadKey, department: QuotaPath, tally: _Tally, departments: Sequence[QuotaPath]
) -> bool:
    quota = tally.quota_of.get(key)
    return quota is not None and department_of(quota, departments) == department


def _department_row(
    *,
    name: str,
    jobs: list[WorkloadKey],
    record: RunRecord,
    tally: _Tally,
    waiting: set[WorkloadKey],
    resources: list[ResourceUse],
) -> DepartmentStats:
    waits = sorted(
        (tally.first_admit[key] - record.arrivals[key]) / MS_PER_SECOND
        for key in jobs
        if key in tally.first_admit
    )
    return DepartmentStats(
        department=name,
        jobs=len(jobs),
        admitted=len(waits),
        pending=sum(1 for key in jobs if key in waiting),
        wait_mean_s=round(sum(waits) / len(waits), 3) if waits else None,
        wait_p95_s=round(wait_percentile(waits, 0.95), 3) if waits else None,
        wait_max_s=round(waits[-1], 3) if waits else None,
        preemptions=sum(tally.preemptions.get(key, 0) for key in jobs),
        resources=resources,
    )


def _resource_rows(
    group: str | None,
    guarantee: Mapping[str, int],
    used: Mapping[tuple[str, str], int],
    lost: Mapping[tuple[str, str], int],
    capacity: Mapping[str, int],
    window_ms: int,
    departments: Sequence[QuotaPath],
) -> list[ResourceUse]:
    """Per resource the department has a guarantee for or used (``group`` None: all)."""

    def amount(totals: Mapping[tuple[str, str], int], resource: str) -> int:
        if group is not None:
            return totals.get((group, resource), 0)
        return sum(totals.get((str(d), resource), 0) for d in departments)

    named = set(guarantee) | {r for (g, r) in used if group is None or g == group}
    rows: list[ResourceUse] = []
    for resource in sorted(named):
        held = amount(used, resource)
        guaranteed = guarantee.get(resource, 0) * window_ms
        offered = capacity.get(resource, 0) * window_ms
        unit, _ = unit_of(resource)
        rows.append(
            ResourceUse(
                resource=resource,
                unit=f"{unit}-seconds",
                used=_unit_seconds(resource, held),
                guaranteed=_unit_seconds(resource, guaranteed),
                of_guarantee_pct=_percent(held, guaranteed),
                utilisation_pct=_percent(held, offered),
                lost_to_preemption=_unit_seconds(resource, amount(lost, resource)),
            )
        )
    return rows


def _unit_seconds(resource: str, amount_ms: int) -> str:
    """Canonical units x ms as seconds of the unit people read (exact to 3 decimals)."""
    _, scale = unit_of(resource)
    exact = Decimal(amount_ms) / Decimal(scale * MS_PER_SECOND)
    return str(exact.quantize(SECONDS, rounding=ROUND_HALF_UP))


def _percent(part: int, whole: int) -> str | None:
    if whole <= 0:
        return None
    return str((Decimal(part * 100) / Decimal(whole)).quantize(PERCENT, rounding=ROUND_HALF_UP))


# ---------------------------------------------------------------------------- rendering


def render_planning_json(report: PlanningReport) -> str:
    """One JSON object, keys sorted; byte-identical for the same run."""
    data = msgspec.to_builtins(report)
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def _seconds_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def render_planning_table(report: PlanningReport) -> str:
    """Two tables for people: jobs and waits, then resource-seconds per department."""
    capacity = ", ".join(f"{r} {q}" for r, q in report.capacity.items()) or "none"
    rows = [*report.departments, report.cluster]
    lines = [
        f"window {report.since_s:g}s .. {report.until_s:g}s; cluster capacity: {capacity}",
        "",
        f"  {'department':<28} {'jobs':>6} {'admitted':>9} {'pending':>8} {'wait mean':>10} "
        f"{'p95':>9} {'max':>9} {'preempted':>10}",
    ]
    for row in rows:
        lines.append(
            f"  {row.department:<28} {row.jobs:>6} {row.admitted:>9} {row.pending:>8} "
            f"{_seconds_text(row.wait_mean_s):>10} {_seconds_text(row.wait_p95_s):>9} "
            f"{_seconds_text(row.wait_max_s):>9} {row.preemptions:>10}"
        )
    lines += [
        "",
        f"  {'department':<28} {'resource':<16} {'used':>14} {'guaranteed':>14} "
        f"{'of min':>7} {'of cluster':>10} {'lost to preemption':>19}",
    ]
    for row in rows:
        for use in row.resources:
            lines.append(
                f"  {row.department:<28} {use.resource:<16} {use.used:>14} "
                f"{use.guaranteed:>14} {_pct(use.of_guarantee_pct):>7} "
                f"{_pct(use.utilisation_pct):>10} {use.lost_to_preemption:>19}"
            )
    lines += ["", "  (resource-seconds: CPU-seconds, GiB-seconds, GPU-seconds)"]
    return "\n".join(lines) + "\n"


def _pct(value: str | None) -> str:
    return "-" if value is None else f"{value}%"


CSV_COLUMNS = (
    "department",
    "jobs",
    "admitted",
    "pending",
    "wait_mean_s",
    "wait_p95_s",
    "wait_max_s",
    "preemptions",
    "resource",
    "unit",
    "used",
    "guaranteed",
    "of_guarantee_pct",
    "utilisation_pct",
    "lost_to_preemption",
)


def render_planning_csv(report: PlanningReport) -> str:
    """One row per department and resource (a department without resources: one row)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in [*report.departments, report.cluster]:
        head = [
            row.department,
            row.jobs,
            row.admitted,
            row.pending,
            "" if row.wait_mean_s is None else row.wait_mean_s,
            "" if row.wait_p95_s is None else row.wait_p95_s,
            "" if row.wait_max_s is None else row.wait_max_s,
            row.preemptions,
        ]
        uses: list[ResourceUse | None] = [*row.resources] or [None]
        for use in uses:
            tail = (
                ["", "", "", "", "", "", ""]
                if use is None
                else [
                    use.resource,
                    use.unit,
                    use.used,
                    use.guaranteed,
                    use.of_guarantee_pct or "",
                    use.utilisation_pct or "",
                    use.lost_to_preemption,
                ]
            )
            writer.writerow([*head, *tail])
    return out.getvalue()


__all__ = [
    "CLUSTER",
    "CSV_COLUMNS",
    "DepartmentStats",
    "PlanningReport",
    "ResourceUse",
    "RunRecord",
    "capacity_of",
    "department_of",
    "departments_of",
    "planning_report",
    "render_planning_csv",
    "render_planning_json",
    "render_planning_table",
    "wait_percentile",
]
