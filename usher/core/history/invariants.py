"""Log-level invariants: replay a decoded log and check quota safety at every entry.

What it does: walks the log once, in order, and reports every entry that breaks one of these
(each finding typed, with the numbers; never stopping at the first):

* ``over-commit``: the *running* usage of a node goes above ``floor(max x oversellRate)`` of
  the tree in force at an ``Admitted``. A workload runs, and counts on every node root..leaf of
  its ``Admitted``'s ``quota``, from its ``Admitted`` until its ``Released`` (whatever the
  cause): a preempted victim still runs, and counts, until its own ``Released``; capacity the
  ledger holds for a preemptor is not running and counts only from the preemptor's own
  ``Admitted``. A tree change never evicts, so usage above a (new, smaller) cap is a finding
  only where an ``Admitted`` adds to that node.
* ``already-admitted``: an ``Admitted`` for a workload whose earlier ``Admitted`` has no
  ``Released`` yet (a preempted victim is live until its ``Released``).
* ``preemption-refused``: a group of ``Preempted`` (the victims of one preemptor, consecutive
  among the ledger's entries: ``log_groups``) that ``Engine.check_preemption`` refuses on the
  state folded up to the group.
  ``preemption_refusal`` is that one check; ``usher audit`` uses the same function.
* ``admitted-while-held``: an ``Admitted`` below a node held or drained at that point of the
  log (R14), unless it is a preemptor whose victims were preempted before (the ledger held
  the capacity for it already). A drain's ``Preempted`` (a workload that is its own
  preemptor, R15) is checked by ``preemption-refused``: justified only when a drain over it
  ran out of grace by the entry's time.
* ``admitted-over-budget``: an ``Admitted`` below a node whose budget with action ``hold`` was
  spent at the entry's time (B1: the closed intervals booked and the running work up to
  then), with the same preemptor exception.
* ``requeue-unjustified``: a ``Requeued`` (R10) for a workload that was not admitted then,
  or whose ready deadline had not passed by the entry's time (its ``Admitted`` on the log plus
  the ready timeout of its leaf), or whose latest ``WorkloadProgress`` since that admission
  said every pod was ready. A requeued workload runs, and counts, until its own ``Released``,
  like a preempted victim.
* At the end of the log (optional: a log that is still moving can have workloads the next pass
  admits): ``stuck``, a workload waiting although nothing stops it (``Engine.reason_now`` says
  it fits now, or it waits for victims that have all been released) or without a reason; and
  ``never-released``, a workload that stopped (finished, deleted, preempted) while its
  ``Admitted`` was never followed by a ``Released``.

A ledger decision recorded twice under one event id is one decision: the repeat is skipped
here (``usher audit`` reports it as ``duplicate``).
What it must never do: perform I/O, read a clock or draw random numbers, decide anything, or
stop at the first finding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from schemas import (
    Admitted,
    Millis,
    Preempted,
    QuotaPath,
    QuotaTreeApplied,
    Reason,
    Released,
    Requeued,
    WorkloadKey,
)
from usher.core.engine.facade import Engine
from usher.core.history.replay import History, format_time
from usher.core.history.replayer import Observer, log_groups, replay_once
from usher.core.model import reasons
from usher.core.model.config import EngineConfig
from usher.core.protocol.log import LogEntry
from usher.core.rules.arbitration import effective_cap
from usher.core.rules.holds import hold_over
from usher.core.state.indexed import JobState
from usher.core.tree.budget_spec import BudgetAction
from usher.core.tree.quota_tree import iter_nodes, path_nodes

LEDGER_DECISIONS = (Admitted, Preempted, Released, Requeued)
HOLD = BudgetAction.HOLD

OVER_COMMIT = "over-commit"
ALREADY_ADMITTED = "already-admitted"
PREEMPTION_REFUSED = "preemption-refused"
STUCK = "stuck"
NEVER_RELEASED = "never-released"
REQUEUE_UNJUSTIFIED = "requeue-unjustified"
ADMITTED_WHILE_HELD = "admitted-while-held"
ADMITTED_OVER_BUDGET = "admitted-over-budget"


class Violation(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One broken invariant, where on the log, and the numbers behind it."""

    check: str
    """``over-commit``, ``already-admitted``, ``preemption-refused``, ``stuck`` or
    ``never-released``."""
    message: str
    decision: str
    """Type of the entry (``Admitted``, ``Preempted``), or ``end`` for the end-of-log check."""
    seq: int | None = None
    """Stream sequence of the entry; ``None`` for the end-of-log check."""
    event_id: str | None = None
    time_ms: Millis | None = None
    workload: WorkloadKey | None = None
    node: QuotaPath | None = None
    resource: str | None = None
    used: int | None = None
    """Running usage of ``node`` before the entry (canonical units: millicores, bytes)."""
    requested: int | None = None
    cap: int | None = None
    """``floor(max x oversellRate)`` of ``node`` in the tree in force."""


@dataclass
class _Running:
    """One live ``Admitted``: what it counts, and where on the log it was."""

    seq: int
    admitted: Admitted
    preempted_seq: int | None = None


@dataclass
class Checker(Observer):
    """The invariant checker: an observer of one replay into ``engine`` (``replay_once``),
    ``findings`` once it is over."""

    config: EngineConfig
    engine: Engine
    found: list[Violation] = field(default_factory=list)
    caps: dict[QuotaPath, tuple[dict[str, int], dict[str, int]]] = field(default_factory=dict)
    """Node -> (cap, max) of the tree in force."""
    used: dict[QuotaPath, dict[str, int]] = field(default_factory=dict)
    running: dict[WorkloadKey, _Running] = field(default_factory=dict)
    victims_of: dict[WorkloadKey, set[WorkloadKey]] = field(default_factory=dict)
    seen_ids: set[str] = field(default_factory=set)

    def note(
        self,
        item: LogEntry,
        check: str,
        message: str,
        *,
        node: QuotaPath | None = None,
        resource: str | None = None,
        used: int | None = None,
        requested: int | None = None,
        cap: int | None = None,
    ) -> None:
        event = item.event
        self.found.append(
            Violation(
                check=check,
                message=message,
                decision=type(event).__name__,
                seq=item.seq,
                event_id=item.envelope.id,
                time_ms=item.time_ms,
                workload=getattr(event, "workload", None),
                node=node,
                resource=resource,
                used=used,
                requested=requested,
                cap=cap,
            )
        )

    def repeated(self, item: LogEntry) -> bool:
        """A ledger decision already on the log under the same id (one decision, not two)."""
        if not isinstance(item.event, LEDGER_DECISIONS):
            return False
        if item.envelope.id in self.seen_ids:
            return True
        self.seen_ids.add(item.envelope.id)
        return False

    def before(self, engine: Engine, group: Sequence[LogEntry]) -> None:
        """One group of the replay, checked on the state before it (``replay_once``)."""
        fresh = [item for item in group if not self.repeated(item)]
        if not fresh:
            return
        event = fresh[0].event
        if isinstance(event, Preempted):
            self.preempted([(item, as_preempted(item)) for item in fresh])
            return
        item = fresh[0]
        if isinstance(event, Admitted):
            self.admitted(item, event)
        elif isinstance(event, Released):
            self.released(event)
        elif isinstance(event, Requeued):
            self.requeued(item, event)
        elif isinstance(event, QuotaTreeApplied):
            self.install(event)

    def refused(self, item: LogEntry) -> None:
        """The engine raised on ``item``: it was never believed, so nothing is found at it."""
        self.found = [v for v in self.found if v.seq != item.seq]

    def install(self, event: QuotaTreeApplied) -> None:
        rate = self.config.oversell_rate
        self.caps = {
            path: ({r: effective_cap(m, rate) for r, m in node.max.items()}, dict(node.max))
            for path, node, _ in iter_nodes(event.root)
        }

    # -- 1 and 2: running usage, and no admission while live

    def admitted(self, item: LogEntry, event: Admitted) -> None:
        earlier = self.running.get(event.workload)
        if earlier is not None:
            self.note(
                item,
                ALREADY_ADMITTED,
                f"{event.workload} is still live: its Admitted at seq {earlier.seq} has no "
                "Released yet" + _stopping(earlier),
            )
            self.count(earlier.admitted, -1)  # one allocation per workload: the new one counts
        self.over_commit(item, event)
        self.held(item, event)
        self.over_budget(item, event)
        self.count(event, 1)
        self.running[event.workload] = _Running(item.seq, event)

    def released(self, event: Released) -> None:
        # What stops counting is what was admitted (the audit checks the two agree).
        live = self.running.pop(event.workload, None)
        if live is not None:
            self.count(live.admitted, -1)

    def over_commit(self, item: LogEntry, event: Admitted) -> None:
        for node in reversed(path_nodes(event.quota)):
            caps, maxima = self.caps.get(node, ({}, {}))
            used = self.used.get(node, {})
            for resource, amount in sorted(event.requests.items()):
                cap = caps.get(resource)
                before = used.get(resource, 0)
                if cap is None or before + amount <= cap:
                    continue
                why = reasons.quota_exceeded(
                    node, resource, before, amount, maxima[resource], cap, self.config.oversell_rate
                ).message
                self.note(
                    item,
                    OVER_COMMIT,
                    f"running usage: {why}{self.stopping_on(node)}",
                    node=node,
                    resource=resource,
                    used=before,
                    requested=amount,
                    cap=cap,
                )

    def held(self, item: LogEntry, event: Admitted) -> None:
        """R14: nothing is admitted below a held node, but a preemptor whose capacity the
        ledger already holds (its victims were preempted before) may still be."""
        if event.workload in self.victims_of:
            return
        record = hold_over(self.engine.holds_in_force(), event.quota)
        if record is not None:
            why = record.pending_reason().message
            self.note(item, ADMITTED_WHILE_HELD, why, node=record.node)

    def over_budget(self, item: LogEntry, event: Admitted) -> None:
        """B1: nothing is admitted below a spent budget with action hold (preemptors whose
        capacity the ledger already held excepted, as for R14)."""
        if event.workload in self.victims_of or not self.engine.state.tree.budgets:
            return
        on_path = set(path_nodes(event.quota))
        for status in self.engine.budget_statuses(item.time_ms).values():
            budget = status.budget
            if budget.node in on_path and budget.action == HOLD and status.exhausted:
                why = status.pending_reason(item.time_ms).message
                self.note(
                    item,
                    ADMITTED_OVER_BUDGET,
                    why,
                    node=budget.node,
                    resource=budget.resource,
                    used=status.spent,
                    cap=budget.limit,
                )
                return

    def stopping_on(self, node: QuotaPath) -> str:
        """The preempted victims still counted on ``node`` (what an over-commit usually is)."""
        names = sorted(
            f"{key} (preempted at seq {live.preempted_seq})"
            for key, live in self.running.items()
            if live.preempted_seq is not None and node in path_nodes(live.admitted.quota)
        )
        return f"; not released yet after their Preempted: {', '.join(names)}" if names else ""

    def count(self, event: Admitted, sign: int) -> None:
        for node in path_nodes(event.quota):
            used = self.used.setdefault(node, {})
            for resource, amount in event.requests.items():
                used[resource] = used.get(resource, 0) + sign * amount

    # -- 3: every Preempted justified by the state before it

    def preempted(self, group: list[tuple[LogEntry, Preempted]]) -> None:
        refused = preemption_refusal(self.engine, group)
        if refused is not None:
            item, reason = refused
            self.note(item, PREEMPTION_REFUSED, f"{reason.code}: {reason.message}")
        for item, event in group:
            live = self.running.get(event.workload)
            if live is not None:
                live.preempted_seq = item.seq
            self.victims_of.setdefault(event.preemptor, set()).add(event.workload)
        # Running usage is unchanged: the victims run until their own Released.

    # -- 4: every Requeued justified by the state before it (R10)

    def requeued(self, item: LogEntry, event: Requeued) -> None:
        refused = requeue_refusal(self.engine, event, item.time_ms)
        if refused is not None:
            self.note(item, REQUEUE_UNJUSTIFIED, refused)
        live = self.running.get(event.workload)
        if live is not None:
            live.preempted_seq = item.seq
        # Running usage is unchanged: it runs until its own Released.

    # -- the end of the log

    def findings(self, *, at_end: bool) -> list[Violation]:
        """Every violation of the replay (in log order), with the end-of-log check if asked."""
        if at_end:
            self.end()
        return self.found

    def end(self) -> None:
        for key, view in self.engine.jobs().items():
            if view.state in (JobState.PENDING, JobState.INADMISSIBLE, JobState.UNMAPPED):
                why = self.engine.reason_now(key)
                problem = self.untrue(key, why)
                if problem is not None:
                    self.end_note(STUCK, key, f"{view.state}: {problem}")
        for key, live in sorted(self.running.items()):
            now = self.engine.job_state(key)
            state = now.state if now is not None else "deleted"
            if state != JobState.ADMITTED:
                self.end_note(
                    NEVER_RELEASED,
                    key,
                    f"{key} is {state}, but its Admitted at seq {live.seq} was never released"
                    + _stopping(live),
                )

    def untrue(self, key: WorkloadKey, why: Reason | None) -> str | None:
        """Why ``why`` does not explain the wait, or None when it does."""
        if why is None:
            return "no reason"
        if why.code == "NotYetEvaluated":
            return f"{why.code}: {why.message}, but no decision came"
        if why.code == "PreemptionInProgress":
            stopping = sorted(v for v in self.victims_of.get(key, set()) if v in self.running)
            if not stopping:
                return f"{why.code}, but every victim of its preemption was released"
        return None

    def end_note(self, check: str, key: WorkloadKey, message: str) -> None:
        self.found.append(Violation(check=check, message=message, decision="end", workload=key))


def _stopping(live: _Running) -> str:
    if live.preempted_seq is None:
        return ""
    return f" (preempted at seq {live.preempted_seq})"


def as_preempted(item: LogEntry) -> Preempted:
    event = item.event
    assert isinstance(event, Preempted)
    return event


def preemption_refusal(
    engine: Engine, group: Sequence[tuple[LogEntry, Preempted]]
) -> tuple[LogEntry, Reason] | None:
    """Whether one preemptor's group of ``Preempted`` is refused on ``engine``'s state.

    ``engine`` holds the log folded up to (not including) the group; the check is
    ``Engine.check_preemption`` at the group's time. The refusal is pinned on the victim it
    names, else on the group's first entry. The state is left unchanged.
    """
    first = group[0][0]
    preemptor = group[0][1].preemptor
    victims = [event.workload for _, event in group]
    refusal = engine.check_preemption(preemptor, victims, first.time_ms)
    if refusal is None:
        return None
    blamed = next((item for item, event in group if event.workload == refusal.blocker), first)
    return blamed, refusal


def requeue_refusal(engine: Engine, event: Requeued, at_ms: Millis) -> str | None:
    """Why ``event`` is not justified on ``engine``'s state (the log before it), or None.

    Justified: the workload is admitted with a ready deadline running (so no progress since
    its admission said every pod was ready) and that deadline is not after ``at_ms``.
    """
    job = engine.state.jobs.get(event.workload)
    if job is None or job.state != JobState.ADMITTED:
        state = "unknown" if job is None else job.state
        return f"{event.workload} was {state}, not admitted"
    record = job.readiness
    if record is None or not record.deadline_ms:
        if record is not None and record.total and record.ready >= record.total:
            return f"{record.ready}/{record.total} pods were ready before it"
        return f"{event.workload} had no ready timeout running"
    if record.deadline_ms > at_ms:
        early = format_time(Millis(record.deadline_ms))
        return f"its ready deadline is {early}, after the requeue at {format_time(at_ms)}"
    return None


def check_log(
    items: Sequence[LogEntry], config: EngineConfig, *, at_end: bool = True
) -> list[Violation]:
    """Every violation on the log (in log order, end-of-log findings last).

    ``items`` are the decoded entries in log order; ``config`` the installation's settings
    (its oversell rate gives the caps; policy, within-quota and min runtime the preemption
    rules). ``at_end`` adds the end-of-log check: give it only for a log that has come to rest.
    """
    checker = Checker(config=config, engine=Engine(config))
    replay_once(History(items=list(items), bad=[]), checker.engine, [checker])
    return checker.findings(at_end=at_end)


def render_violations(found: Sequence[Violation]) -> str:
    """One line per violation, for test failures and reports."""
    lines = []
    for v in found:
        where = f"seq {v.seq} {v.decision}" if v.seq is not None else "end of log"
        when = f" at {format_time(v.time_ms)}" if v.time_ms is not None else ""
        lines.append(f"{where}{when} {v.workload or '-'}: {v.check}: {v.message}")
    return "\n".join(lines)


__all__ = [
    "ADMITTED_OVER_BUDGET",
    "ADMITTED_WHILE_HELD",
    "ALREADY_ADMITTED",
    "NEVER_RELEASED",
    "OVER_COMMIT",
    "PREEMPTION_REFUSED",
    "REQUEUE_UNJUSTIFIED",
    "STUCK",
    "Checker",
    "Violation",
    "as_preempted",
    "check_log",
    "log_groups",
    "preemption_refusal",
    "render_violations",
    "requeue_refusal",
]
