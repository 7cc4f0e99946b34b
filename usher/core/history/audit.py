"""Audit: is every decision on the log justified by the log before it, and does the ledger agree?

What "re-derive" checks. Decision passes are not on the log: a dequeuer decides at moments the
log does not record, on the state it had then, and the ledger publishes the outcome a little
later. So the audit does not re-run passes and compare lists (their timing alone would make
them differ). It walks the log once (``usher.core.history.replayer.replay_once``: the
invariant checker and the usage fold observe the same replay), folding every entry into the
same pure ``Engine`` the services use (built with the installation's settings), and checks
each recorded decision against the state *just before it*; its records and renderings are
``usher.core.history.audit_report``'s:

* ``Admitted``: the workload was observed and is waiting (pending in its queue, or holding
  capacity freed for it by a preemption); the decision's ``quota`` is the workload's leaf
  and ``queue`` that leaf's queue; ``requests`` equal the observed workload's (count x
  per-pod requests summed over pod sets; a partial admission's ``pod_counts`` within each
  set's declared minimum and count, R11) and ``zone`` its zone or one it accepts (Z2); and
  ``used + requested <= max x oversellRate`` on every node root..leaf
  (``Engine.admission_shortfall``: its own held capacity set aside, capacity held for another
  preemptor counted). Zone capacity is not checked: the ledger does not arbitrate it.
* ``Preempted``: each victim runs on the quota the decision names.
* ``Requeued`` (R10): the workload runs on the quota the decision names; whether it had been
  admitted long enough without every pod ready is an invariant (``requeue-unjustified``).
* ``Retried`` (R12, R13): a failed ``WorkloadFinished`` of an admitted job with retries is
  before it and not answered yet, and the decision is exactly the one that failure gives (the
  attempt, the limit, the next job or none, the cause, every container resized); else
  ``retry-unjustified`` or ``wrong-retry``.
* ``Released``: something was held (a live ``Admitted``, or a preemption hold), quota and
  requests are those of its ``Admitted``, and its cause is on the log since it was admitted
  (or held): ``Finished``/``Failed`` -> a ``WorkloadFinished`` (succeeded or not),
  ``Deleted`` -> a ``WorkloadDeleted``, ``Preempted`` -> its ``Preempted`` (or ``Requeued``)
  decision, then an observation of it stopped (suspended, or finished).
* ``Inadmissible``/``Unmapped``: the engine classifies the workload the same way at that point
  (same state and reason code; same quota for ``Inadmissible``). Classification happens when
  events are applied, not in passes, so this is exact.
* A ledger decision (``Admitted``/``Preempted``/``Released``) recorded twice under one event
  id is a finding too.
* The log-level invariants of ``usher.core.history.invariants``, each under its own check name:
  ``over-commit`` (running usage, preempted victims counted until their ``Released``, above
  ``max x oversellRate`` at an admission), ``already-admitted`` (an ``Admitted`` while the
  workload is live), ``preemption-refused`` (a group of ``Preempted``, the victims of one
  preemptor consecutive on the log, that ``Engine.check_preemption`` refuses on the state
  before it: the preemptor waits, every victim is admitted, past its minimum runtime, and
  borrowing what the preemptor within its ``min`` asks for, or of lower priority in the same
  leaf under ``LowerPriority``; and the preemptor fits once they are gone); and, only with
  ``quiescent`` (a log that has come to rest), ``stuck`` and ``never-released`` at its end.

Exact re-runs (D4): where the dequeuers recorded their passes (``PassRan``), every pass is
re-run on the log up to the sequence it recorded, at the ``now`` it recorded, and the ledger's
decisions of its zone must be exactly what it gives, in order, refusals accounted for
(``usher.core.history.pass_audit``: ``not-from-pass``, ``out-of-order``, ``differs``,
``partial-reclaim``, ``bad-pass``; each names the pass by its seq).

Entries of the log that are not valid envelopes are reported apart (``rejected``), not as
findings: they carry no decision and change no state (every reader decodes with the same
schema and parks what does not decode, so no service acted on them), and the log is
append-only, so a finding for one could never be cleared: anyone able to publish garbage on a
log subject would make the audit fail for ever. Forged entries that do decode are audited like
any other (a decision not written by the ledger's outbox stays a finding).

The window (``since_ms``) is in the log's own time: when the stream stored each entry
(``LogEntry.log_ms``), never the envelope's ``time``, which its sender chooses. An entry whose
log time is unknown (an export from before it was recorded) is always checked.

Known ways a finding can appear without a bug, so that findings can be judged: the services
ran with other settings than the audit was given (policy, oversell rate, within-quota, min
runtime), or a tree change reached the log after the ledger granted on the previous tree.

``check_ledger`` compares the ledger's rows with the log: every allocation that was admitted,
preempted or released has the matching ``ledger:<action>:<workload>:<allocation id>`` event
on the log; every such event on the log has its allocation (same workload; admitted/released
as the event says); decisions of those types not written by the ledger's outbox, and outbox
rows not published yet, are reported.

``check_usage`` compares usage accounting (U1) computed twice: from the log's decisions and
from the ledger's allocation intervals, per quota node and resource, over the audit's window
up to the last ledger decision on the log (intervals still open counted up to it on both
sides); where they differ (``usage-differs``) the finding names the node, resource, window,
both amounts and the workloads whose intervals differ.

What it must never do: perform I/O or read a clock, decide anything new, or stop at the first
finding (every finding is listed, in log order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from schemas import (
    DECISION_ACTIONS,
    LEDGER_DECISION_TYPES,
    Admitted,
    Inadmissible,
    Millis,
    Pending,
    Preempted,
    Released,
    Requeued,
    Retried,
    Unmapped,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
)
from usher.core.engine.facade import Engine
from usher.core.history.audit_report import (
    AllocationRecord,
    AuditReport,
    Finding,
    LedgerSnapshot,
    OutboxRecord,
    render_audit_json,
    render_audit_table,
)
from usher.core.history.fold import BAD_ENTRY_ERRORS, Verdict
from usher.core.history.invariants import Checker, Violation, as_preempted
from usher.core.history.pass_audit import PassFinding, PassStats, audit_passes
from usher.core.history.replay import (
    History,
    format_datetime,
    format_resources,
    format_time,
    to_datetime,
)
from usher.core.history.replayer import Observer, replay_once
from usher.core.history.usage import (
    Interval,
    UsageFold,
    compare_usage,
    hours,
    intervals_of,
    unit_of,
)
from usher.core.model.config import EngineConfig
from usher.core.protocol.log import BadEntry, LogEntry
from usher.core.rules import retry
from usher.core.state.indexed import JobState, shape_of

LEDGER_TYPES = LEDGER_DECISION_TYPES


# ---------------------------------------------------------------------------- the log part


@dataclass
class _Since:
    """What the log said about one workload since it was last admitted (or held)."""

    finished: bool = False
    failed: bool = False
    deleted: bool = False
    preempted_seq: int | None = None
    stopped_after_preempt: bool = False


@dataclass
class _Auditor(Observer):
    engine: Engine
    findings: list[Finding] = field(default_factory=list)
    observed: dict[WorkloadKey, WorkloadObserved] = field(default_factory=dict)
    live: dict[WorkloadKey, tuple[int, Admitted]] = field(default_factory=dict)
    held: set[WorkloadKey] = field(default_factory=set)
    since: dict[WorkloadKey, _Since] = field(default_factory=dict)
    seen_ids: dict[str, int] = field(default_factory=dict)
    decisions: int = 0
    since_ms: Millis | None = None

    def note(self, item: LogEntry, check: str, message: str) -> None:
        event = item.event
        workload = getattr(event, "workload", None)
        self.findings.append(
            Finding(
                check=check,
                message=message,
                decision=type(event).__name__,
                seq=item.seq,
                event_id=item.envelope.id,
                workload=workload,
                time=item.envelope.time,
            )
        )

    def before(self, engine: Engine, group: Sequence[LogEntry]) -> None:
        """One group of the replay, re-derived on the state before it (``replay_once``)."""
        if isinstance(group[0].event, Preempted):
            self.preempted(group)
        else:
            self.one(group[0])

    def refused(self, item: LogEntry) -> None:
        """The engine raised on ``item``: it was never believed, so nothing is found at it."""
        self.findings = [f for f in self.findings if f.seq != item.seq]

    def should_check(self, item: LogEntry, *, ledger: bool = True) -> bool:
        """Whether to re-derive ``item``: inside the window, and not a repeat of a decision.

        Decisions before ``since`` are only folded. A ledger decision whose event id was
        already on the log is a finding (``duplicate``) instead of being checked again.
        """
        first = self.seen_ids.setdefault(item.envelope.id, item.seq) if ledger else item.seq
        if not in_window(item, self.since_ms):
            return False
        self.decisions += 1
        if first != item.seq:
            self.note(item, "duplicate", f"recorded twice: the same decision is at seq {first}")
            return False
        return True

    def one(self, item: LogEntry) -> None:
        """Check one entry on the state before it and note what it says (the replay folds
        it afterwards)."""
        event = item.event
        match event:
            case Admitted():
                if self.should_check(item):
                    self.check_admitted(item, event)
                self.live[event.workload] = (item.seq, event)
                self.held.discard(event.workload)
                self.since[event.workload] = _Since()
            case Released():
                if self.should_check(item):
                    self.check_released(item, event)
                self.live.pop(event.workload, None)
                self.held.discard(event.workload)
            case Inadmissible() | Unmapped():
                if self.should_check(item, ledger=False):
                    self.check_classified(item, event)
            case Requeued():
                if self.should_check(item):
                    self.check_requeued(item, event)
                # Released like a preempted victim: once its pods are seen stopped (R7).
                self.since.setdefault(event.workload, _Since()).preempted_seq = item.seq
            case Retried():
                if self.should_check(item):
                    self.check_retried(item, event)
            case Pending():
                pass
            case _:
                self.track(event)

    def track(self, event: object) -> None:
        """Remember what cluster events say a ledger release may rely on."""
        if isinstance(event, WorkloadObserved):
            self.observed[event.workload] = event
            mark = self.since.get(event.workload)
            if event.suspended and mark is not None and mark.preempted_seq is not None:
                mark.stopped_after_preempt = True
        elif isinstance(event, WorkloadFinished):
            mark = self.since.setdefault(event.workload, _Since())
            mark.finished |= event.succeeded
            mark.failed |= not event.succeeded
            mark.stopped_after_preempt |= mark.preempted_seq is not None
        elif isinstance(event, WorkloadDeleted):
            self.since.setdefault(event.workload, _Since()).deleted = True

    # -- Admitted

    def check_admitted(self, item: LogEntry, event: Admitted) -> None:
        key = event.workload
        view = self.engine.job_state(key)
        observed = self.observed.get(key)
        if view is None or observed is None:
            self.note(item, "not-observed", f"{key} is not on the log before it (or was deleted)")
            return
        if key in self.live:
            return  # the invariants report it: already-admitted
        if view.state != JobState.PENDING:
            self.note(item, "not-pending", f"{key} was {view.state}, not waiting in a queue")
            return
        if view.quota != event.quota:
            self.note(item, "wrong-quota", f"quota {event.quota}, but its leaf is {view.quota}")
        elif view.queue != event.queue:
            self.note(item, "wrong-queue", f"queue {event.queue}, but its queue is {view.queue}")
        partial = _partial_problem(observed, event.pod_counts)
        if partial is not None:
            self.note(item, "wrong-requests", partial)
            return
        wanted = _observed_requests(observed, event.pod_counts)
        if shape_of(event.requests) != shape_of(wanted):
            self.note(
                item,
                "wrong-requests",
                f"requests {format_resources(event.requests)}, but the observed workload "
                f"requests {format_resources(wanted)}",
            )
        # Z2 (its own list), Z3 (its leaf's list).
        if event.zone != observed.zone and event.zone not in self.engine.accepted_zones(key):
            self.note(item, "wrong-zone", f"zone {event.zone}, but it is in zone {observed.zone}")
        shortfall = self.engine.admission_shortfall(key, event.quota, event.requests)
        if shortfall is not None:
            self.note(item, "over-quota", f"{shortfall.code}: {shortfall.message}")

    # -- Preempted

    def preempted(self, group: Sequence[LogEntry]) -> None:
        events = [as_preempted(item) for item in group]
        preemptor = events[0].preemptor
        for item, event in zip(group, events, strict=True):
            if self.should_check(item):
                self.check_preempted(item, event)
        for item, event in zip(group, events, strict=True):
            self.since.setdefault(event.workload, _Since()).preempted_seq = item.seq
        if [event.workload for event in events] == [preemptor]:
            return  # a drain's (R15): its own preemptor, nobody holds capacity for it
        self.held.add(preemptor)
        self.since[preemptor] = _Since()

    def check_preempted(self, item: LogEntry, event: Preempted) -> None:
        # Whether the preemption is justified is an invariant (preemption-refused).
        view = self.engine.job_state(event.workload)
        if view is not None and view.state == JobState.ADMITTED and view.quota != event.quota:
            self.note(item, "wrong-quota", f"quota {event.quota}, but it runs on {view.quota}")

    # -- Requeued

    def check_requeued(self, item: LogEntry, event: Requeued) -> None:
        # Whether the requeue is justified is an invariant (requeue-unjustified).
        view = self.engine.job_state(event.workload)
        if view is not None and view.state == JobState.ADMITTED and view.quota != event.quota:
            self.note(item, "wrong-quota", f"quota {event.quota}, but it runs on {view.quota}")

    # -- Retried

    def check_retried(self, item: LogEntry, event: Retried) -> None:
        """R12, R13: a failed finish of a job with retries is before it, unanswered, and the
        decision is exactly what follows from it (attempt, limit, next job, cause, sizes)."""
        failure = self.engine.state.failures.get(event.workload)
        if failure is None:
            self.note(
                item,
                "retry-unjustified",
                f"no failed finish of {event.workload} with retries awaits a Retried before it",
            )
            return
        expected = retry.retried(event.workload, failure)
        if expected != event:
            self.note(
                item,
                "wrong-retry",
                f"{event.reason.code}: {event.reason.message}; the failure before it gives "
                f"{expected.reason.code}: {expected.reason.message} (next {expected.job})",
            )

    # -- Released

    def check_released(self, item: LogEntry, event: Released) -> None:
        key = event.workload
        if key not in self.live and key not in self.held:
            self.note(
                item,
                "nothing-held",
                f"{key} held nothing: no Admitted or preemption hold without a Released before it",
            )
        elif key in self.live:
            seq, admitted = self.live[key]
            same_requests = shape_of(admitted.requests) == shape_of(event.requests)
            if admitted.quota != event.quota or not same_requests:
                self.note(
                    item,
                    "wrong-release",
                    f"releases {format_resources(event.requests)} on {event.quota}, but its "
                    f"Admitted at seq {seq} holds {format_resources(admitted.requests)} on "
                    f"{admitted.quota}",
                )
        missing = _missing_cause(event, self.since.get(key, _Since()))
        if missing is not None:
            self.note(item, "no-cause", missing)

    # -- Inadmissible / Unmapped

    def check_classified(self, item: LogEntry, event: Inadmissible | Unmapped) -> None:
        key = event.workload
        expected = type(event).__name__
        view = self.engine.job_state(key)
        if view is None:
            self.note(item, "unknown-workload", f"{key} is unknown (never observed, or deleted)")
            return
        if view.state != expected:
            why = self.engine.reason_now(key)
            detail = f" ({why.code}: {why.message})" if why is not None else ""
            self.note(item, "core-disagrees", f"the core has {key} {view.state}{detail}")
            return
        if view.reason is None or view.reason.code != event.reason.code:
            said = f"{view.reason.code}: {view.reason.message}" if view.reason else "no reason"
            self.note(
                item,
                "core-disagrees",
                f"the core says {said}; the decision says {event.reason.code}: "
                f"{event.reason.message}",
            )
            return
        quota = event.quota if isinstance(event, Inadmissible) else None
        if quota is not None and quota != view.quota:
            self.note(item, "wrong-quota", f"quota {quota}, but its leaf is {view.quota}")


def _observed_requests(
    event: WorkloadObserved, pod_counts: dict[str, int] | None = None
) -> dict[str, int]:
    """The observed request, with the pods of a partial admission where given (R11)."""
    total: dict[str, int] = {}
    counts = pod_counts or {}
    for pod_set in event.pod_sets:
        pods = counts.get(pod_set.name, pod_set.count)
        if pods <= 0:
            continue
        for resource, amount in pod_set.requests.items():
            total[resource] = total.get(resource, 0) + amount * pods
    return total


def _partial_problem(event: WorkloadObserved, pod_counts: dict[str, int] | None) -> str | None:
    """Why a partial admission's pods are not what the workload allows (R11), or None."""
    sets = {pod_set.name: pod_set for pod_set in event.pod_sets}
    for name, pods in sorted((pod_counts or {}).items()):
        pod_set = sets.get(name)
        if pod_set is None:
            return f"{pods} pods of pod set {name!r}, which the workload does not have"
        least = pod_set.min_count if pod_set.min_count is not None else pod_set.count
        if not least <= pods <= pod_set.count:
            return (
                f"{pods} pods of {name!r} admitted, but it may start with {least} to "
                f"{pod_set.count}"
            )
    return None


def _missing_cause(event: Released, mark: _Since) -> str | None:
    """Why the release has no cause on the log, or None when it has one."""
    since = "since it was admitted"
    if event.cause == "Finished" and not mark.finished:
        return f"released as Finished, but no WorkloadFinished (succeeded) {since}"
    if event.cause == "Failed" and not mark.failed:
        return f"released as Failed, but no failed WorkloadFinished {since}"
    if event.cause == "Deleted" and not mark.deleted:
        return f"released as Deleted, but no WorkloadDeleted {since}"
    if event.cause == "Preempted":
        if mark.preempted_seq is None:
            return f"released as Preempted, but no Preempted or Requeued decision for it {since}"
        # Finished or deleted before the ledger read it: the ledger preempted what it still
        # held, and released it once it read that the pods had stopped (R7).
        ended = mark.finished or mark.failed or mark.deleted
        if not mark.stopped_after_preempt and not ended:
            return (
                "released as Preempted, but it was not seen stopped (suspended or finished) "
                f"after its Preempted decision at seq {mark.preempted_seq}"
            )
    return None


def in_window(item: LogEntry, since_ms: Millis | None) -> bool:
    """At or after ``since_ms`` by the log's own time (an envelope's time can be forged); an
    entry whose log time is unknown is checked rather than hidden."""
    return since_ms is None or item.log_ms is None or item.log_ms >= since_ms


def audit_log(
    history: History,
    config: EngineConfig,
    *,
    since_ms: Millis | None = None,
    quiescent: bool = False,
) -> tuple[list[Finding], int]:
    """Findings of the log part (in log order) and how many decisions were re-derived.

    The invariants' findings are included (from ``since_ms`` on); ``quiescent`` adds their
    end-of-log check, after every other finding. The exact re-runs of recorded passes are
    ``audit_recorded_passes``'s.
    """
    replayed = _replay(history, config, since_ms=since_ms, quiescent=quiescent)
    return replayed.findings, replayed.decisions


@dataclass
class _Replayed:
    """What the audit's one replay of the log gives: the log the fold believes, the findings of
    the per-decision checks and the invariants, and the usage fold's intervals (U1)."""

    history: History
    findings: list[Finding]
    decisions: int
    intervals: list[Interval]


def _replay(
    history: History, config: EngineConfig, *, since_ms: Millis | None, quiescent: bool
) -> _Replayed:
    """Fold the log once (``replay_once``) with the per-decision checks, the invariant
    checker and the usage fold as its observers."""
    engine = Engine(config)
    auditor = _Auditor(engine=engine, since_ms=since_ms)
    checker = Checker(config=config, engine=engine)
    usage = UsageFold()
    believed = replay_once(history, engine, [auditor, checker, usage])
    violations = checker.findings(at_end=quiescent)
    # The window is the log's own time (never the envelope's, which its sender chooses).
    by_seq = {item.seq: item for item in believed.items}
    at_entries = [
        _finding(v)
        for v in violations
        if v.seq is not None and (v.seq not in by_seq or in_window(by_seq[v.seq], since_ms))
    ]
    at_end = [_finding(v) for v in violations if v.seq is None]
    findings = sorted(auditor.findings + at_entries, key=lambda f: f.seq or 0)
    return _Replayed(believed, findings + at_end, auditor.decisions, usage.intervals())


def audit_recorded_passes(
    history: History, config: EngineConfig, *, since_ms: Millis | None = None
) -> tuple[list[Finding], PassStats]:
    """Re-run every recorded pass (D4) over the whole log; its findings from ``since_ms`` on."""
    found, stats = audit_passes(history.items, config)
    return [_pass_finding(f) for f in found if in_window(f.entry, since_ms)], stats


def _pass_finding(found: PassFinding) -> Finding:
    """A mismatch of a re-run pass as an audit finding (the message names the pass)."""
    entry = found.entry
    return Finding(
        check=found.check,
        message=found.message,
        decision=type(entry.event).__name__,
        seq=entry.seq,
        event_id=entry.envelope.id,
        workload=getattr(entry.event, "workload", None),
        time=entry.envelope.time,
    )


def _finding(violation: Violation) -> Finding:
    """An invariant's violation as an audit finding (its numbers are in the message)."""
    when = violation.time_ms
    return Finding(
        check=violation.check,
        message=violation.message,
        decision=violation.decision,
        seq=violation.seq,
        event_id=violation.event_id,
        workload=violation.workload,
        time=to_datetime(when) if when is not None else None,
    )


# ---------------------------------------------------------------------------- the ledger part


def parse_ledger_id(event_id: str) -> tuple[str, WorkloadKey, int] | None:
    """``ledger:<action>:<namespace/name>:<allocation id>`` -> its parts, or None."""
    head, sep, allocation = event_id.rpartition(":")
    kind, _, rest = head.partition(":")
    action, _, workload = rest.partition(":")
    if not sep or kind != "ledger" or not workload or not allocation.isdigit():
        return None
    return action, WorkloadKey(workload), int(allocation)


_SAME_ROW: dict[str, tuple[str, ...]] = {"requeued": ("requeued", "preempted")}
"""Actions one allocation state can stand for: preempted for itself is a requeue (R10) or a
drain's preemption (R15)."""


def _expected_events(row: AllocationRecord) -> list[tuple[str, datetime | None]]:
    expected: list[tuple[str, datetime | None]] = []
    if row.admitted_at is not None:
        expected.append(("admitted", row.admitted_at))
    if row.preempted_at is not None:
        # A requeue for readiness is the allocation preempted for itself (R10); so is a
        # drain's preemption (R15), recorded as ``preempted``: ``_SAME_ROW`` accepts either.
        action = "requeued" if row.preemptor == row.workload else "preempted"
        expected.append((action, row.preempted_at))
    if row.state == "released":
        expected.append(("released", row.released_at))
    return expected


def check_ledger(
    history: History, ledger: LedgerSnapshot, *, since_ms: Millis | None = None
) -> list[Finding]:
    """Where the ledger's allocations and outbox disagree with the log."""
    on_log = {
        item.envelope.id: item for item in history.items if isinstance(item.event, LEDGER_TYPES)
    }
    unpublished = {row.event_id for row in ledger.unpublished}
    since = to_datetime(since_ms) if since_ms is not None else None
    findings: list[Finding] = []
    for row in ledger.allocations:
        for action, when in _expected_events(row):
            ids = [f"ledger:{a}:{row.workload}:{row.id}" for a in _SAME_ROW.get(action, (action,))]
            if any(i in on_log or i in unpublished for i in ids):
                continue
            event_id = ids[0]
            if since is not None and when is not None and when < since:
                continue
            stamp = format_datetime(when) if when is not None else "an unknown time"
            findings.append(
                Finding(
                    check="missing-on-log",
                    message=f"allocation {row.id} ({row.state}, {row.quota}) was {action} at "
                    f"{stamp}, but {event_id} is not on the log",
                    decision="allocation",
                    event_id=event_id,
                    workload=row.workload,
                    time=when,
                )
            )
    allocations = {row.id: row for row in ledger.allocations}
    for item in on_log.values():
        if in_window(item, since_ms):
            findings.extend(_against_allocation(item, allocations))
    for outbox in ledger.unpublished:
        findings.append(
            Finding(
                check="unpublished",
                message=f"outbox row {outbox.id} on {outbox.subject} is not published yet",
                decision="outbox",
                event_id=outbox.event_id,
                time=outbox.created_at,
            )
        )
    return findings


def _against_allocation(item: LogEntry, allocations: dict[int, AllocationRecord]) -> list[Finding]:
    event = item.event
    assert isinstance(event, LEDGER_TYPES)

    def finding(check: str, message: str) -> list[Finding]:
        return [
            Finding(
                check=check,
                message=message,
                decision=type(event).__name__,
                seq=item.seq,
                event_id=item.envelope.id,
                workload=event.workload,
                time=item.envelope.time,
            )
        ]

    parsed = parse_ledger_id(item.envelope.id)
    if parsed is None:
        return finding(
            "not-from-ledger", "its id is not ledger:<action>:<workload>:<allocation id>"
        )
    action, workload, allocation_id = parsed
    row = allocations.get(allocation_id)
    if row is None:
        return finding("no-allocation", f"the ledger has no allocation {allocation_id}")
    if action != DECISION_ACTIONS[type(event)] or workload != event.workload:
        return finding("allocation-mismatch", f"its id does not describe this {action} decision")
    if row.workload != event.workload or row.quota != event.quota:
        return finding(
            "allocation-mismatch",
            f"allocation {row.id} is {row.workload} on {row.quota}, "
            f"the decision says {event.workload} on {event.quota}",
        )
    if action == "admitted" and row.admitted_at is None:
        return finding("allocation-mismatch", f"allocation {row.id} was never admitted")
    if action == "released" and row.state != "released":
        return finding("allocation-mismatch", f"allocation {row.id} is still {row.state}")
    return []


# ---------------------------------------------------------------------------- usage


def usage_until(history: History) -> Millis:
    """Where the usage comparison stops: the last ledger decision on the log (what the log
    has seen of the ledger), else the log's end."""
    decided = [item.time_ms for item in history.items if isinstance(item.event, LEDGER_TYPES)]
    return max(decided, default=history.end_ms or Millis(0))


def check_usage(
    history: History,
    ledger: Sequence[Interval],
    *,
    since_ms: Millis | None = None,
    intervals: Sequence[Interval] | None = None,
) -> list[Finding]:
    """Where usage folded from the log and from the ledger's intervals differ (U1);
    ``intervals``: the log's, when a replay has folded them already."""
    until = usage_until(history)
    mine = intervals_of(history.items) if intervals is None else intervals
    window = (
        f"from {format_time(since_ms) if since_ms is not None else 'the beginning'} "
        f"until {format_time(until)}"
    )
    findings: list[Finding] = []
    for diff in compare_usage(mine, ledger, since_ms=since_ms, until_ms=until):
        unit = f"{unit_of(diff.resource)[0]}-hours"
        shown = ", ".join(diff.workloads[:5]) + (" ..." if len(diff.workloads) > 5 else "")
        findings.append(
            Finding(
                check="usage-differs",
                message=f"{diff.node} {diff.resource} {window}: the log says "
                f"{hours(diff.resource, diff.log_ms)} {unit} ({diff.log_ms} unit-ms), the "
                f"ledger's intervals {hours(diff.resource, diff.ledger_ms)} {unit} "
                f"({diff.ledger_ms} unit-ms); intervals differ for {shown}",
                decision="usage",
                time=to_datetime(until),
            )
        )
    return findings


# ---------------------------------------------------------------------------- both


def audit(
    history: History,
    config: EngineConfig,
    *,
    since_ms: Millis | None = None,
    ledger: LedgerSnapshot | None = None,
    quiescent: bool = False,
) -> AuditReport:
    """The whole audit: the log part, and the ledger part when a snapshot is given.

    ``quiescent``: the log has come to rest, so its end is checked too (nothing stuck).
    Entries the fold every reader uses refuses (``usher.core.history.fold``) are left out of every
    check, as the services leave them out: a forged one (not its owner's subject, type or
    source) is a finding (``forged``), an unfoldable one is rejected input.
    """
    everything = history
    replayed = _replay(history, config, since_ms=since_ms, quiescent=quiescent)
    history, findings, decisions = replayed.history, replayed.findings, replayed.decisions
    exact, passes = audit_recorded_passes(history, config, since_ms=since_ms)
    if exact:
        at_end = [f for f in findings if f.seq is None]
        findings = sorted(
            [f for f in findings if f.seq is not None] + exact, key=lambda f: f.seq or 0
        )
        findings += at_end
    at_entries = [f for f in findings if f.seq is not None] + _forged_findings(
        everything, history.bad, since_ms
    )
    findings = sorted(at_entries, key=lambda f: f.seq or 0) + [f for f in findings if f.seq is None]
    if ledger is not None:
        findings += check_ledger(history, ledger, since_ms=since_ms)
        if ledger.intervals is not None:
            findings += check_usage(
                history, ledger.intervals, since_ms=since_ms, intervals=replayed.intervals
            )
    return AuditReport(
        entries=len(history.items) + len(history.bad),
        decisions=decisions,
        allocations=len(ledger.allocations) if ledger is not None else None,
        since=to_datetime(since_ms) if since_ms is not None else None,
        findings=findings,
        rejected=[bad for bad in history.bad if bad.error != FORGED],
        passes=passes,
    )


FORGED = BAD_ENTRY_ERRORS[Verdict.FORGED]


def _forged_findings(
    history: History, refused: Sequence[BadEntry], since_ms: Millis | None
) -> list[Finding]:
    """A finding for each forged entry in the window: a decision its owner did not make (an
    identity published what it may not decide); no reader folded it."""
    by_seq = {item.seq: item for item in history.items}
    findings = []
    for bad in refused:
        item = by_seq.get(bad.seq)
        if bad.error != FORGED or item is None or not in_window(item, since_ms):
            continue
        event = item.event
        findings.append(
            Finding(
                check="forged",
                message=f"not believed by any reader: {bad.detail}",
                decision=type(event).__name__,
                seq=item.seq,
                event_id=item.envelope.id,
                workload=getattr(event, "workload", None),
                time=item.envelope.time,
            )
        )
    return findings


__all__ = [
    "AllocationRecord",
    "AuditReport",
    "Finding",
    "LedgerSnapshot",
    "OutboxRecord",
    "audit",
    "audit_log",
    "audit_recorded_passes",
    "check_ledger",
    "check_usage",
    "in_window",
    "parse_ledger_id",
    "render_audit_json",
    "render_audit_table",
]
