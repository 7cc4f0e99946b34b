"""What ``usher audit`` reads and reports: findings, the ledger's rows, the report and its
renderings (``usher.core.history.audit`` fills them).

What it must never do: perform I/O, read a clock, or judge anything (it only holds and prints).
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from schemas import QuotaPath, WorkloadKey
from usher.core.history.pass_audit import PassStats
from usher.core.history.replay import format_datetime
from usher.core.history.usage import Interval
from usher.core.protocol.log import BadEntry


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One decision (or ledger row) that is not justified, and exactly why."""

    check: str
    """Stable code: ``not-pending``, ``over-quota``, ``wrong-requests``, ``no-cause``, ..."""
    message: str
    decision: str
    """``Admitted``, ``Preempted``, ``Released``, ``Inadmissible``, ``Unmapped``, ``entry``,
    ``allocation`` or ``outbox``."""
    seq: int | None = None
    event_id: str | None = None
    workload: WorkloadKey | None = None
    time: datetime | None = None


class AllocationRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the ledger's ``allocations`` table, as the audit needs it."""

    id: int
    workload: WorkloadKey
    quota: QuotaPath
    state: str
    reserved_at: datetime | None = None
    admitted_at: datetime | None = None
    preempted_at: datetime | None = None
    released_at: datetime | None = None
    release_cause: str | None = None
    preemptor: WorkloadKey | None = None


class OutboxRecord(msgspec.Struct, frozen=True, kw_only=True):
    """An outbox row not published yet."""

    id: int
    event_id: str
    subject: str
    created_at: datetime | None = None


class LedgerSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """What the ledger holds: every allocation and the unpublished outbox rows."""

    allocations: list[AllocationRecord]
    unpublished: list[OutboxRecord]
    intervals: list[Interval] | None = None
    """The allocation intervals (U1), for the usage comparison; None: not read."""


class AuditReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``usher audit`` prints: counts and every finding."""

    entries: int
    decisions: int
    """Decisions re-derived (at or after ``since``)."""
    allocations: int | None
    """Allocations compared with the log; ``None`` when the ledger was not checked."""
    since: datetime | None
    findings: list[Finding]
    rejected: list[BadEntry] = msgspec.field(default_factory=list)
    """Entries that are not valid envelopes: listed apart, not findings (module docstring)."""
    passes: PassStats = msgspec.field(default_factory=PassStats)
    """The exact re-runs of recorded passes (D4): passes, decisions matched and refused."""


def render_audit_json(report: AuditReport) -> str:
    """One JSON object: counts and every finding."""
    return msgspec.json.format(msgspec.json.encode(report).decode(), indent=2) + "\n"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def render_audit_table(report: AuditReport) -> str:
    """One block per finding, naming the decision (seq, id, workload) and why."""
    ledger = (
        f"; ledger: {report.allocations} allocations compared"
        if report.allocations is not None
        else "; ledger not checked"
    )
    window = f" since {format_datetime(report.since)}" if report.since else ""
    lines = [
        f"audited {_count(report.entries, 'log entry', 'log entries')}{window}: "
        f"{_count(report.decisions, 'decision', 'decisions')} re-derived{ledger}"
    ]
    exact = report.passes
    if exact.passes:
        lines.append(
            f"re-ran {_count(exact.passes, 'recorded pass', 'recorded passes')} exactly: "
            f"{_count(exact.matched, 'decision', 'decisions')} as given, "
            f"{exact.refused} refused by the ledger"
            + (f", {exact.unrecorded} before any recorded pass" if exact.unrecorded else "")
        )
    for finding in report.findings:
        where = f"seq {finding.seq}" if finding.seq is not None else finding.decision
        what = finding.decision if finding.seq is not None else ""
        ident = f"  ({finding.event_id})" if finding.event_id else ""
        lines.append(f"  {where:<9} {what:<12} {finding.workload or '-'}{ident}".rstrip())
        lines.append(f"      {finding.check}: {finding.message}")
    if report.rejected:
        lines.append(
            f"rejected input, not findings: {_count(len(report.rejected), 'entry', 'entries')} "
            "not valid envelopes (no service acted on them; their readers parked them)"
        )
    for bad in report.rejected:
        lines.append(f"  seq {bad.seq:<5} {bad.subject}")
        lines.append(f"      {bad.error}: {bad.detail}")
    if report.findings:
        lines.append(_count(len(report.findings), "finding", "findings"))
    else:
        lines.append("OK: every decision is justified by the log before it")
    return "\n".join(lines) + "\n"


__all__ = [
    "AllocationRecord",
    "AuditReport",
    "Finding",
    "LedgerSnapshot",
    "OutboxRecord",
    "render_audit_json",
    "render_audit_table",
]
