"""Usage accounting (docs/admission-rules.md U1): resource x time each workload held, folded.

What it does: ``UsageFold`` folds the log, entry by entry, into each workload's *allocation
intervals*: one opens at the workload's ``Admitted`` decision (the ledger's grant time, which
the ledger stamps on the envelope) and closes at its first ``Preempted``, ``Requeued`` or
``Released`` decision (the ledger's ``preempted_at``/``released_at``); a partial admission
(R11) counts the ``requests`` it was admitted with. ``usage_totals`` sums intervals over a
window ``[since, until)`` into exact integers -- canonical units (millicores for cpu, base
units otherwise) x milliseconds -- per quota node (every node on the path root..leaf, so a
node's usage is the sum of its children's), per leaf queue or per namespace; an interval still
open accrues up to ``now``. ``usage_report`` wraps them in ``UsageRow``/``UsageReport``, with
the amount in hours of the resource's unit for people (CPU-hours, GiB-hours, GPU-hours);
``render_usage_table``/``_json``/``_csv`` print it and ``unit_seconds`` converts for counters.
``UsageMeter`` is the same fold kept small for a service's counters (what accrued since its
previous reading; ``held_now`` seeds it from an engine restored from a snapshot).

The fold reads only decisions, so the ledger's rows give the very same intervals (read by
``usher.adapters.pg.audit_reads``): ``compare_usage`` says where the two differ, for
``usher audit``.

What it must never do: read a clock (``now`` is passed in), perform I/O, use float arithmetic
on an amount, or change any decision (usage is an account, not an input of admission).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import msgspec

from schemas import (
    Admitted,
    Millis,
    Preempted,
    QueueName,
    QuotaPath,
    Released,
    Requeued,
    WorkloadKey,
)
from usher.core.engine.facade import Engine
from usher.core.history.fold import forged
from usher.core.history.replay import format_time
from usher.core.history.replayer import Observer
from usher.core.model.quantity import (  # re-exported: the units usage is read in (U1)
    BYTE_RESOURCES,
    CPU,
    GIB,
    MS_PER_HOUR,
    hours,
    unit_of,
)
from usher.core.protocol.log import LogEntry
from usher.core.rules.budgets import Window, accrued
from usher.core.state.indexed import JobState
from usher.core.tree.quota_tree import path_nodes

MS_PER_SECOND = 1000


class UsageBy(StrEnum):
    """What ``usage`` groups by: every quota node on the path, the leaf queue, the namespace."""

    NODE = "node"
    QUEUE = "queue"
    NAMESPACE = "namespace"


USAGE_BY = tuple(by.value for by in UsageBy)


class Interval(msgspec.Struct, frozen=True, kw_only=True):
    """One workload's allocation interval ``[start_ms, end_ms)``; ``end_ms`` None: still held."""

    workload: WorkloadKey
    quota: QuotaPath
    queue: QueueName
    requests: dict[str, int]
    start_ms: Millis
    end_ms: Millis | None = None


# ---------------------------------------------------------------------------- the fold


@dataclass
class UsageFold(Observer):
    """The log folded into allocation intervals, one entry at a time (pure, incremental); an
    observer of a replay too (``replay_once``: the audit folds the log once)."""

    open: dict[WorkloadKey, Interval] = field(default_factory=dict)
    closed: list[Interval] = field(default_factory=list)

    def admitted(self, decision: Admitted, at_ms: Millis) -> None:
        """An interval opens; a second ``Admitted`` while one is open changes nothing (the
        ledger holds one live allocation per workload; the audit reports the repeat)."""
        if decision.workload in self.open:
            return
        self.open[decision.workload] = Interval(
            workload=decision.workload,
            quota=decision.quota,
            queue=decision.queue,
            requests=dict(decision.requests),
            start_ms=at_ms,
        )

    def stopped(self, workload: WorkloadKey, at_ms: Millis) -> None:
        """The workload's open interval, if any, closes at ``at_ms`` (never before it opened:
        a stop stamped earlier, by a skewed clock, held nothing)."""
        interval = self.open.pop(workload, None)
        if interval is not None:
            self.closed.append(
                msgspec.structs.replace(interval, end_ms=max(at_ms, interval.start_ms))
            )

    def apply(self, event: object, at_ms: Millis) -> None:
        """One log event at its time: ``Admitted`` opens, ``Preempted``/``Requeued``/
        ``Released`` close (U1); every other event accrues nothing."""
        if isinstance(event, Admitted):
            self.admitted(event, at_ms)
        elif isinstance(event, Preempted | Requeued | Released):
            self.stopped(event.workload, at_ms)

    def folded(self, engine: Engine, item: LogEntry) -> None:
        """A replay folded ``item`` (its owner's, believed): fold it here too."""
        self.apply(item.event, item.time_ms)

    def apply_entries(self, items: Iterable[LogEntry]) -> None:
        """Entries of the log, as their owners made them: a forged decision opens nothing
        (``usher.core.history.fold``)."""
        for item in items:
            if forged(item) is None:
                self.apply(item.event, item.time_ms)

    def intervals(self) -> list[Interval]:
        """Closed intervals in the order they closed, then the open ones by start."""
        still = sorted(self.open.values(), key=lambda i: (i.start_ms, i.workload))
        return [*self.closed, *still]


def intervals_of(items: Iterable[LogEntry]) -> list[Interval]:
    """Every allocation interval the log records (U1)."""
    fold = UsageFold()
    fold.apply_entries(items)
    return fold.intervals()


# ---------------------------------------------------------------------------- summing


Totals = dict[tuple[str, str], int]
"""(group, resource) -> canonical units x milliseconds."""


def overlap_ms(
    interval: Interval, since_ms: Millis | None, until_ms: Millis, now_ms: Millis
) -> int:
    """How long ``interval`` was held inside ``[since, until)``; an open one up to ``now``
    (what a budget's window accrues, B1: the same ``accrued``)."""
    end = interval.end_ms if interval.end_ms is not None else max(now_ms, interval.start_ms)
    window = Window(interval.start_ms if since_ms is None else since_ms, until_ms, "")
    return accrued(1, interval.start_ms, window, end)


def groups_of(interval: Interval, by: UsageBy) -> list[str]:
    """The groups an interval counts in: each node root..leaf, its queue, or its namespace."""
    if by is UsageBy.NODE:
        return list(path_nodes(interval.quota))
    if by is UsageBy.QUEUE:
        return [interval.queue]
    return [interval.workload.partition("/")[0]]


def usage_totals(
    intervals: Iterable[Interval],
    *,
    since_ms: Millis | None,
    until_ms: Millis,
    now_ms: Millis,
    by: UsageBy = UsageBy.NODE,
) -> Totals:
    """Exact canonical-units x ms per (group, resource) over ``[since, until)``."""
    totals: Totals = {}
    for interval in intervals:
        held = overlap_ms(interval, since_ms, until_ms, now_ms)
        if held <= 0:
            continue
        for group in groups_of(interval, by):
            for resource, amount in interval.requests.items():
                if amount:
                    key = (group, resource)
                    totals[key] = totals.get(key, 0) + amount * held
    return totals


# ---------------------------------------------------------------------------- counters


@dataclass
class UsageMeter:
    """Usage per node and resource accrued since the previous ``read``: what a counter adds.

    Counts from ``counted_ms`` on (a service's start: a counter never reports the history
    before it) and keeps only the intervals still open; a closed one is added to ``pending``
    at once, so a long replay holds no more than what runs. A reading costs what changed since
    the previous one, not what runs: the open intervals that started by ``counted_ms`` accrue
    together, their requests summed per node and resource (``rate``), and only those opened
    since (``fresh``) are summed one by one -- the same exact totals ``usage_totals`` gives over
    the open intervals (a dequeuer's gauges walked every running workload at each reading, a
    pause on the decision path that grew with what runs).
    """

    def __init__(self, counted_ms: Millis) -> None:
        self.counted_ms = counted_ms
        self.fold = UsageFold()
        self.pending: Totals = {}
        self.rate: Totals = {}
        """Per (node, resource), the requests of the open intervals started by ``counted_ms``."""
        self.fresh: dict[WorkloadKey, Interval] = {}
        """The open intervals started after ``counted_ms``."""

    def apply(self, event: object, at_ms: Millis) -> None:
        workload = getattr(event, "workload", None)
        was = self.fold.open.get(workload) if workload is not None else None
        self.fold.apply(event, at_ms)
        now = self.fold.open.get(workload) if workload is not None else None
        if was is not now:
            if was is not None:
                self._forget(was)
            if now is not None:
                self._track(now)
        if self.fold.closed:
            until = max(i.end_ms or i.start_ms for i in self.fold.closed)
            self._add(
                usage_totals(
                    self.fold.closed, since_ms=self.counted_ms, until_ms=until, now_ms=until
                )
            )
            self.fold.closed.clear()

    def seed(self, intervals: Iterable[Interval]) -> None:
        """Intervals already open when the fold started (an engine restored from a snapshot)."""
        for interval in intervals:
            if interval.workload not in self.fold.open:
                self.fold.open[interval.workload] = interval
                self._track(interval)

    def read(self, now_ms: Millis) -> Totals:
        """What accrued since the previous reading (running workloads up to ``now``)."""
        now = Millis(max(now_ms, self.counted_ms))
        elapsed = now - self.counted_ms
        if elapsed:
            self._add({key: amount * elapsed for key, amount in self.rate.items()})
        self._add(
            usage_totals(self.fresh.values(), since_ms=self.counted_ms, until_ms=now, now_ms=now)
        )
        self.counted_ms = now
        for interval in [i for i in self.fresh.values() if i.start_ms <= now]:
            del self.fresh[interval.workload]
            self._shift(interval, 1)
        totals, self.pending = self.pending, {}
        return totals

    def _track(self, interval: Interval) -> None:
        if interval.start_ms <= self.counted_ms:
            self._shift(interval, 1)
        else:
            self.fresh[interval.workload] = interval

    def _forget(self, interval: Interval) -> None:
        if self.fresh.get(interval.workload) is interval:
            del self.fresh[interval.workload]
        else:
            self._shift(interval, -1)

    def _shift(self, interval: Interval, sign: int) -> None:
        rate = self.rate
        for group in groups_of(interval, UsageBy.NODE):
            for resource, amount in interval.requests.items():
                if amount:
                    key = (group, resource)
                    left = rate.get(key, 0) + sign * amount
                    if left:
                        rate[key] = left
                    else:
                        del rate[key]

    def _add(self, totals: Totals) -> None:
        for key, amount in totals.items():
            if amount:
                self.pending[key] = self.pending.get(key, 0) + amount


def held_now(engine: Engine) -> list[Interval]:
    """Every workload admitted in ``engine`` as an open interval from its admission: what a
    fold that starts after a snapshot has not seen open (requests as its usage counts them)."""
    out: list[Interval] = []
    for key, job in sorted(engine.state.jobs.items()):
        view = engine.job_state(key)
        if job.state != JobState.ADMITTED or job.used_path is None or view is None:
            continue
        out.append(
            Interval(
                workload=key,
                quota=job.used_path,
                queue=view.queue or QueueName(""),
                requests=dict(job.used_shape),
                start_ms=job.admitted_ms,
            )
        )
    return out


# ---------------------------------------------------------------------------- log vs ledger


class UsageDifference(msgspec.Struct, frozen=True, kw_only=True):
    """A node and resource whose usage the log and the ledger count differently."""

    node: QuotaPath
    resource: str
    log_ms: int
    ledger_ms: int
    workloads: list[WorkloadKey]
    """The workloads whose intervals on that node differ (what to look at first)."""


def _per_workload(
    intervals: Iterable[Interval], since_ms: Millis | None, until_ms: Millis
) -> dict[tuple[QuotaPath, str, WorkloadKey], int]:
    """``usage_totals`` by node, kept apart per workload (open intervals up to ``until``)."""
    totals: dict[tuple[QuotaPath, str, WorkloadKey], int] = {}
    for interval in intervals:
        one = usage_totals([interval], since_ms=since_ms, until_ms=until_ms, now_ms=until_ms)
        for (node, resource), amount in one.items():
            key = (QuotaPath(node), resource, interval.workload)
            totals[key] = totals.get(key, 0) + amount
    return totals


def compare_usage(
    log: Iterable[Interval],
    ledger: Iterable[Interval],
    *,
    since_ms: Millis | None,
    until_ms: Millis,
) -> list[UsageDifference]:
    """Where the log's and the ledger's usage differ over ``[since, until)`` (open intervals
    counted up to ``until`` on both sides), per node and resource, sorted."""
    mine = _per_workload(log, since_ms, until_ms)
    theirs = _per_workload(ledger, since_ms, until_ms)
    by_node: dict[tuple[QuotaPath, str], tuple[int, int, set[WorkloadKey]]] = {}
    for key in mine.keys() | theirs.keys():
        node, resource, workload = key
        said, held = mine.get(key, 0), theirs.get(key, 0)
        total_log, total_ledger, differing = by_node.get((node, resource), (0, 0, set()))
        if said != held:
            differing = differing | {workload}
        by_node[(node, resource)] = (total_log + said, total_ledger + held, differing)
    return [
        UsageDifference(
            node=node,
            resource=resource,
            log_ms=said,
            ledger_ms=held,
            workloads=sorted(differing),
        )
        for (node, resource), (said, held, differing) in sorted(by_node.items())
        if differing
    ]


# ---------------------------------------------------------------------------- units


def unit_seconds(resource: str, amount_ms: int) -> float:
    """Canonical units x ms as seconds of the resource's base unit (core-seconds, byte-seconds,
    GPU-seconds): what a Prometheus counter carries."""
    scale = 1000 if resource == CPU else 1
    return amount_ms / (scale * MS_PER_SECOND)


# ---------------------------------------------------------------------------- report


class UsageRow(msgspec.Struct, frozen=True, kw_only=True):
    """One group's usage of one resource in the window."""

    group: str
    resource: str
    amount_ms: int
    """Canonical units (millicores for cpu, base units otherwise) x milliseconds, exact."""
    hours: str
    """``amount_ms`` in hours of ``unit`` (e.g. ``12.500``)."""
    unit: str
    """``CPU-hours``, ``GiB-hours``, ``GPU-hours``..."""


class UsageReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``usher usage`` prints: the window, the grouping and one row per group/resource."""

    by: str
    since_ms: Millis | None
    until_ms: Millis
    now_ms: Millis
    rows: list[UsageRow]


def usage_rows(totals: Totals) -> list[UsageRow]:
    """Rows sorted by group then resource."""
    rows: list[UsageRow] = []
    for (group, resource), amount in sorted(totals.items()):
        unit, _ = unit_of(resource)
        rows.append(
            UsageRow(
                group=group,
                resource=resource,
                amount_ms=amount,
                hours=str(hours(resource, amount)),
                unit=f"{unit}-hours",
            )
        )
    return rows


def usage_report(
    intervals: Sequence[Interval],
    *,
    since_ms: Millis | None,
    until_ms: Millis | None,
    now_ms: Millis,
    by: UsageBy,
) -> UsageReport:
    """The report over ``[since, until)``; ``until`` None means ``now``."""
    until = now_ms if until_ms is None else until_ms
    totals = usage_totals(intervals, since_ms=since_ms, until_ms=until, now_ms=now_ms, by=by)
    return UsageReport(
        by=by.value, since_ms=since_ms, until_ms=until, now_ms=now_ms, rows=usage_rows(totals)
    )


def _stamp(ms: Millis | None) -> str:
    return "the beginning" if ms is None else format_time(ms)


def render_usage_table(report: UsageReport) -> str:
    """One line per group and resource: hours in the resource's unit."""
    lines = [
        f"usage by {report.by} from {_stamp(report.since_ms)} until {_stamp(report.until_ms)}",
        f"  {report.by.upper():<40} {'RESOURCE':<20} {'HOURS':>14}  UNIT",
    ]
    for row in report.rows:
        lines.append(f"  {row.group:<40} {row.resource:<20} {row.hours:>14}  {row.unit}")
    if not report.rows:
        lines.append("  (nothing was admitted in this window)")
    return "\n".join(lines) + "\n"


def render_usage_json(report: UsageReport) -> str:
    """One JSON object: the window and every row (``amount_ms`` exact)."""
    return json.dumps(msgspec.to_builtins(report), indent=2, sort_keys=True) + "\n"


def render_usage_csv(report: UsageReport) -> str:
    """A header and one line per row: group,resource,amount_ms,hours,unit."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([report.by, "resource", "amount_ms", "hours", "unit"])
    for row in report.rows:
        writer.writerow([row.group, row.resource, row.amount_ms, row.hours, row.unit])
    return out.getvalue()


__all__ = [
    "BYTE_RESOURCES",
    "GIB",
    "MS_PER_HOUR",
    "USAGE_BY",
    "Interval",
    "Totals",
    "UsageBy",
    "UsageDifference",
    "UsageFold",
    "UsageMeter",
    "UsageReport",
    "UsageRow",
    "compare_usage",
    "groups_of",
    "held_now",
    "hours",
    "intervals_of",
    "overlap_ms",
    "render_usage_csv",
    "render_usage_json",
    "render_usage_table",
    "unit_of",
    "unit_seconds",
    "usage_report",
    "usage_rows",
    "usage_totals",
]
