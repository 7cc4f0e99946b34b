"""The exact audit (D4): re-run every recorded pass and match what reached the log from it.

What it does: for each zone whose dequeuer recorded passes (``PassRan``), it keeps one engine
that does what that dequeuer's did: it folds the log up to the sequence the pass recorded,
runs ``decide`` at the recorded ``now``, and undoes what the ledger refused. What the pass
gives is put in the order its decisions reach the log (``pass_plan.on_the_log``: requeues,
drains, admissions, then each reclaim's victims), and the ledger's decisions of that zone on
the log (``Admitted`` and ``Requeued`` of the zone; ``Preempted`` of a preemptor in the zone,
or of a drained workload in it) are matched against it, in log order:

* A decision matches the first decision the pass gives for the same workload and type at or
  after the pass's cursor; those it skipped over are **refused** (the ledger refuses without
  writing to the log, so a refusal is a gap). The engine then undoes them as the dequeuer did
  (``revert_admission``, ``revert_preemption``), so the next pass starts from the same state.
* The matched decision must say what the pass gives (``differs``: quota, queue, zone,
  requests, pods; the victim's quota and preemptor).
* A decision the pass gives at a position already passed is **out of order**
  (``out-of-order``: two admissions swapped, names both and the pass).
* A decision the pass does not give at all (``not-from-pass``: a higher-ranked job skipped,
  a job no rule admits then) names the pass and what it gives.
* Which pass a decision answers: the last ``PassRan`` of its zone before it, unless it was
  granted (the ledger's stamp, its envelope time) at or after the ``now`` of a later
  ``PassRan`` that is also before it: the dequeuer waits for every answer before its next
  pass, so a pass's answers are stamped before the next one begins, even when the ledger's
  outbox publishes them after the next ``PassRan``.
* A reclaim's victims are all on the log or none (``partial-reclaim``). Its preemptor's
  ``Admitted`` is not matched: the ledger gives it once its victims stop (R7); nor is an
  admission of a workload holding freed capacity (a preemptor) outside a pass's list.

Before a zone's first ``PassRan`` (a log written by an older dequeuer) decisions are counted as
``unrecorded`` and left to the per-decision checks. A ``PassRan`` not from its zone's dequeuer,
or recording a sequence that is not before it, is a finding and is not re-run. A new replica
starts from the log alone (its predecessor's passes in flight are not in its engine), so the
engine is rebuilt from the log when the recorded replica changes.

Known ways a finding can appear without a bug: the services ran with other settings than the
audit was given; the ledger granted a request again after a lost reply (no new entry on the log,
counted as refused); the clocks of the ledger's database and a dequeuer disagree by more than
the time between two passes (a decision is then taken for the other pass's).

What it must never do: perform I/O or read a clock, decide anything the engine would not, or
stop at the first mismatch (every one is listed, in log order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import msgspec

from schemas import (
    DEQUEUER_SOURCE,
    Admitted,
    Millis,
    PassRan,
    Preempted,
    Requeued,
    WorkloadKey,
    WorkloadObserved,
    Zone,
)
from usher.core.engine.facade import Engine
from usher.core.engine.pass_plan import LedgerProposal, PassPlan, on_the_log, plan_pass
from usher.core.history.replay import format_time
from usher.core.model import reasons
from usher.core.model.config import EngineConfig
from usher.core.protocol.log import LogEntry


class PassFinding(msgspec.Struct, frozen=True, kw_only=True):
    """A decision on the log that is not what its pass gives, or a pass record not believed."""

    check: str
    """``not-from-pass``, ``out-of-order``, ``differs``, ``partial-reclaim`` or ``bad-pass``."""
    message: str
    entry: LogEntry
    """The log entry it is about (the decision, or the ``PassRan``)."""
    pass_seq: int
    """Where the pass's ``PassRan`` is on the log."""


class PassStats(msgspec.Struct, frozen=True, kw_only=True):
    """What the exact audit did: passes re-run, decisions matched and refused."""

    passes: int = 0
    matched: int = 0
    refused: int = 0
    """Decisions a pass gives that never reached the log (the ledger refused them)."""
    unrecorded: int = 0
    """Ledger decisions before their zone's first ``PassRan``: not re-run, checked one by one."""


def proposal_kind(decision: LedgerProposal) -> str:
    """The kind a proposal is matched by (with its workload)."""
    if isinstance(decision, Admitted):
        return "Admitted"
    if isinstance(decision, Requeued):
        return "Requeued"
    return "Drained" if decision.preemptor == decision.workload else "Preempted"


def what_differs(given: LedgerProposal, recorded: LedgerProposal) -> str | None:
    """Which fields of ``recorded`` are not what the pass gives (None: none)."""
    fields: tuple[str, ...]
    if isinstance(given, Admitted):
        fields = ("queue", "quota", "zone", "requests", "pod_counts", "topology")
    elif isinstance(given, Preempted):
        fields = ("quota", "preemptor")
    else:
        fields = ("quota", "zone", "requests")
    wrong = [
        f"{name} {getattr(recorded, name)!r}, the pass gives {getattr(given, name)!r}"
        for name in fields
        if getattr(recorded, name) != getattr(given, name)
    ]
    return "; ".join(wrong) or None


def describe(proposals: Sequence[LedgerProposal]) -> str:
    """``Admitted a/x, Preempted b/y`` (what a pass gives, for a message)."""
    shown = [f"{proposal_kind(p)} {p.workload}" for p in proposals[:8]]
    more = f" and {len(proposals) - 8} more" if len(proposals) > 8 else ""
    return (", ".join(shown) + more) if shown else "nothing for the ledger"


@dataclass
class _Given:
    """One re-run pass: where its record is, what it gives, and how far the log matched it."""

    entry: LogEntry
    record: PassRan
    plan: PassPlan
    proposals: list[LedgerProposal]
    matched: list[bool]
    cursor: int = 0

    def find(self, kind: str, workload: WorkloadKey, start: int) -> int | None:
        for index in range(start, len(self.proposals)):
            proposal = self.proposals[index]
            if proposal.workload == workload and proposal_kind(proposal) == kind:
                return index
        return None


@dataclass
class _Zone:
    """One zone's dequeuer as the audit re-runs it."""

    zone: Zone
    config: EngineConfig
    items: Sequence[LogEntry]
    engine: Engine = field(init=False)
    folded: int = 0
    """How many of ``items`` the engine has applied."""
    replica: str | None = None
    held_preemptors: set[WorkloadKey] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.engine = Engine(self.config)

    def fold_to(self, seq: int, replica: str) -> None:
        if self.replica is not None and replica != self.replica:
            # Another process: its engine started from the log, not from its predecessor's.
            self.engine, self.folded = Engine(self.config), 0
            self.held_preemptors.clear()
        self.replica = replica
        while self.folded < len(self.items) and self.items[self.folded].seq <= seq:
            item = self.items[self.folded]
            self.engine.apply(item.event, item.time_ms)
            self.folded += 1

    def rerun(self, entry: LogEntry, record: PassRan) -> _Given:
        self.fold_to(record.seq, record.replica)
        plan = plan_pass(self.engine.decide(record.now_ms))
        proposals = on_the_log(plan)
        return _Given(entry, record, plan, proposals, [False] * len(proposals))

    def undo_refused(self, given: _Given) -> int:
        """Undo in the engine what the ledger refused, as the dequeuer did; how many."""
        refused = [p for p, ok in zip(given.proposals, given.matched, strict=True) if not ok]
        missing = {(proposal_kind(p), p.workload) for p in refused}
        for admitted in given.plan.admissions:
            if ("Admitted", admitted.workload) in missing:
                why = reasons.stale_view(admitted.workload, "refused by the ledger")
                self.engine.revert_admission(admitted.workload, why)
        for preemptor, victims in given.plan.reclaims:
            if all(("Preempted", v.workload) in missing for v in victims):
                why = reasons.stale_view(preemptor.workload, "refused")
                self.engine.revert_preemption(preemptor.workload, victims, why)
            else:
                self.held_preemptors.add(preemptor.workload)
        return len(refused)

    def admits_a_preemptor(self, entry: LogEntry) -> bool:
        """An ``Admitted`` the ledger gives a preemptor once its victims stopped (R7)."""
        event = entry.event
        if not isinstance(event, Admitted):
            return False
        key = event.workload
        state = self.engine.state
        if key in self.held_preemptors or key in state.preemptors or key in state.held:
            self.held_preemptors.discard(key)
            return True
        return False


def _stream_zone(entry: LogEntry, zones: dict[WorkloadKey, Zone]) -> Zone | None:
    """The zone whose pass a ledger decision on the log comes from; None if none does."""
    event = entry.event
    if isinstance(event, Admitted | Requeued):
        return event.zone
    if isinstance(event, Preempted):
        return zones.get(event.preemptor)
    return None


def _bad_record(entry: LogEntry, record: PassRan) -> str | None:
    """Why a ``PassRan`` cannot be believed; None when it can."""
    owner = f"{DEQUEUER_SOURCE}/{record.zone}"
    if entry.envelope.source != owner:
        return f"a pass of zone {record.zone!r} from {entry.envelope.source!r}; only {owner!r}"
    if record.seq >= entry.seq:
        return f"it records log sequence {record.seq}, which is not before it"
    return None


@dataclass
class _Run:
    config: EngineConfig
    items: Sequence[LogEntry]
    findings: list[PassFinding] = field(default_factory=list)
    passes: int = 0
    matched: int = 0
    refused: int = 0
    unrecorded: int = 0

    def zone_streams(
        self,
    ) -> tuple[dict[Zone, list[LogEntry]], dict[Zone, list[tuple[LogEntry, PassRan]]]]:
        """Per zone: its ledger decisions from its first pass on, and its believed passes."""
        zones: dict[WorkloadKey, Zone] = {}
        streams: dict[Zone, list[LogEntry]] = {}
        passes: dict[Zone, list[tuple[LogEntry, PassRan]]] = {}
        for entry in self.items:
            event = entry.event
            if isinstance(event, WorkloadObserved):
                zones[event.workload] = event.zone
            elif isinstance(event, PassRan):
                bad = _bad_record(entry, event)
                if bad is not None:
                    self.findings.append(PassFinding(
                        check="bad-pass", message=bad, entry=entry, pass_seq=entry.seq
                    ))  # fmt: skip
                    continue
                passes.setdefault(event.zone, []).append((entry, event))
            else:
                zone = _stream_zone(entry, zones)
                if zone is None:
                    continue
                if zone in passes:
                    streams.setdefault(zone, []).append(entry)
                else:
                    self.unrecorded += 1
        return streams, passes

    def run(self) -> None:
        streams, passes = self.zone_streams()
        for zone in sorted(passes):
            self.run_zone(zone, streams.get(zone, []), passes[zone])
        self.findings.sort(key=lambda f: f.entry.seq)

    def run_zone(
        self, zone: Zone, stream: list[LogEntry], recorded: list[tuple[LogEntry, PassRan]]
    ) -> None:
        mirror = _Zone(zone, replace(self.config, zones=frozenset({zone})), self.items)
        at = 0
        for index, (entry, record) in enumerate(recorded):
            given = mirror.rerun(entry, record)
            self.passes += 1
            following = (
                (recorded[index + 1][0].seq, recorded[index + 1][1].now_ms)
                if index + 1 < len(recorded)
                else None
            )
            at = self.match(mirror, given, stream, at, following)
            self.refused += mirror.undo_refused(given)

    def match(
        self,
        mirror: _Zone,
        given: _Given,
        stream: list[LogEntry],
        at: int,
        following: tuple[int, Millis] | None,
    ) -> int:
        """Match the zone's decisions from ``at`` against ``given``; where the next pass starts.

        ``following``: where the zone's next ``PassRan`` is and its ``now``. A decision after
        it was granted by the ledger either for this pass (published late by the outbox) or
        for a later one; the ledger's stamp says which: this pass's answers were all in before
        the next pass began (the dequeuer waits for them), the next pass's come after.
        """
        while at < len(stream):
            entry = stream[at]
            event = entry.event
            assert isinstance(event, Admitted | Preempted | Requeued)
            kind = proposal_kind(event)
            if self.answers_a_later_pass(entry, following):
                return at
            found = given.find(kind, event.workload, given.cursor)
            at += 1
            if found is not None:
                self.matched_one(given, found, entry, event)
            elif mirror.admits_a_preemptor(entry):
                continue
            else:
                self.unexpected(given, entry, kind, event.workload)
        return at

    @staticmethod
    def answers_a_later_pass(entry: LogEntry, following: tuple[int, Millis] | None) -> bool:
        """After the zone's next ``PassRan`` and granted once that pass began."""
        return following is not None and entry.seq > following[0] and entry.time_ms >= following[1]

    def matched_one(
        self, given: _Given, index: int, entry: LogEntry, event: LedgerProposal
    ) -> None:
        given.matched[index] = True
        given.cursor = index + 1
        self.matched += 1
        wrong = what_differs(given.proposals[index], event)
        if wrong is not None:
            self.note(given, entry, "differs", f"{proposal_kind(event)} {event.workload}: {wrong}")
        for _, victims in given.plan.reclaims:
            positions = [given.proposals.index(v) for v in victims]
            if index == positions[-1] and not all(given.matched[i] for i in positions):
                self.note(
                    given,
                    entry,
                    "partial-reclaim",
                    f"only some victims of {victims[0].preemptor} are on the log; the pass "
                    f"gives {describe(victims)}",
                )

    def unexpected(self, given: _Given, entry: LogEntry, kind: str, workload: WorkloadKey) -> None:
        earlier = given.find(kind, workload, 0)
        if earlier is not None and given.matched[earlier]:
            return  # a repeat of a matched decision: ``duplicate``/``already-admitted`` say so
        if earlier is not None:
            # It did reach the log (late): not a refusal the engine must undo.
            given.matched[earlier] = True
            after = next(
                (p for i, p in enumerate(given.proposals) if i > earlier and given.matched[i]),
                None,
            )
            before = f" before {proposal_kind(after)} {after.workload}" if after else ""
            self.note(
                given,
                entry,
                "out-of-order",
                f"{kind} {workload} comes too late: the pass gives it{before} "
                f"({describe(given.proposals)})",
            )
            return
        self.note(
            given,
            entry,
            "not-from-pass",
            f"the pass does not give {kind} {workload}; it gives {describe(given.proposals)}",
        )

    def note(self, given: _Given, entry: LogEntry, check: str, message: str) -> None:
        record = given.record
        where = (
            f"pass at seq {given.entry.seq} (zone {record.zone}, log up to seq {record.seq}, "
            f"now {format_time(record.now_ms)})"
        )
        self.findings.append(
            PassFinding(
                check=check, message=f"{where}: {message}", entry=entry, pass_seq=given.entry.seq
            )
        )


def audit_passes(
    items: Sequence[LogEntry], config: EngineConfig
) -> tuple[list[PassFinding], PassStats]:
    """Re-run every recorded pass of ``items`` (the whole log, in order) under ``config``."""
    run = _Run(config, items)
    run.run()
    stats = PassStats(
        passes=run.passes, matched=run.matched, refused=run.refused, unrecorded=run.unrecorded
    )
    return run.findings, stats


__all__ = ["PassFinding", "PassStats", "audit_passes", "proposal_kind", "what_differs"]
