"""The one fold every reader of the log uses: believe an entry only from its owner, and never
let one entry stop the fold.

What it does: ``fold_entry(engine, entry)`` gives one decoded log entry a verdict and folds it
only when it deserves it: ``FORGED`` when it is not what its owner would have put on the log
(``usher.core.protocol.subjects.owner_problem``: subject, type and source must agree: only the
ledger's
admissions count), ``UNFOLDABLE`` when it is input the engine refuses (a tree T1 refuses, a
job observation out of the registry's bounds: ``invalid_input``) or ``Engine.apply`` raised
on it, else ``FOLDED``. Every
reader (the services' projections, the watcher's, the client's ``PeopleProjection``, replay,
explain, what-if and the audit through ``usher.core.history.replay``) folds through it; the services
park what is not folded on the DLQ as they park undecodable entries (``refused_entry`` makes
the same ``BadEntry`` of it), the others count and show it.

The state an unfoldable entry leaves: a new tree (the entry most values of an operator reach
the engine in) is first folded alone into a fresh engine, so a tree the engine cannot take is
refused before anything changes and the previous tree stays in force; the engine also
validates what it parses before it changes anything where it can (a new tree is compiled
before it replaces the one in force). When ``apply`` raised after it had changed the durable
state anyway, the
engine keeps that durable state (``EngineState``: what a snapshot stores) and everything
derived is recomputed from it (``Engine.rebuild_derived``, as a restore of its own snapshot
would): the engine is consistent, and every reader of the same log, whether it folded live
or restored a snapshot taken later, is in the same state, because the same code folds the
same entries (deterministic, never half-applied silently: the verdict says so).
What it must never do: raise on an entry, fold a forged one, read a clock or do I/O.
"""

from __future__ import annotations

from enum import StrEnum

import msgspec

from schemas import Decision, LogEvent, QuotaTreeApplied, WorkloadObserved, encode
from usher.core.engine.facade import Engine
from usher.core.intake.workload import observed_errors
from usher.core.protocol.log import BadEntry, LogEntry
from usher.core.protocol.subjects import owner_problem
from usher.core.tree.quota_tree import validate_tree

MAX_REASON = 500
"""Characters of an exception's text kept in a verdict (a hostile value can be 100 KB)."""


class Verdict(StrEnum):
    FOLDED = "folded"
    FORGED = "forged"
    """Not its owner's (wrong subject, type or source): it decided nothing."""
    UNFOLDABLE = "unfoldable"
    """The engine could not fold it (``reason`` says why)."""


BAD_ENTRY_ERRORS = {Verdict.FORGED: "ForgedDecision", Verdict.UNFOLDABLE: "UnfoldableEntry"}
"""The ``error`` of the ``BadEntry`` (and of its dead letter) of each refusal."""


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """What folding one entry did."""

    verdict: Verdict
    reason: str = ""
    decisions: list[Decision] = msgspec.field(default_factory=list)
    """The immediate decisions ``Engine.apply`` returned (folded entries only)."""

    @property
    def folded(self) -> bool:
        return self.verdict is Verdict.FOLDED


def forged(entry: LogEntry) -> Outcome | None:
    """The ``FORGED`` verdict of ``entry``, or None when its owner put it on the log."""
    problem = owner_problem(entry.subject, entry.envelope)
    return None if problem is None else Outcome(verdict=Verdict.FORGED, reason=problem)


def fold_entry(engine: Engine, entry: LogEntry) -> Outcome:
    """Fold ``entry`` into ``engine`` if its owner made it; never raises (module docstring)."""
    refused = refusal(engine, entry)
    return refused if refused is not None else apply_entry(engine, entry)


def fold_believed(engine: Engine, entry: LogEntry) -> Outcome:
    """Fold an entry whose owner the caller has already checked (``forged``)."""
    refused = refused_input(engine, entry)
    return refused if refused is not None else apply_entry(engine, entry)


def refusal(engine: Engine, entry: LogEntry) -> Outcome | None:
    """The verdict of ``entry`` that needs no folding (forged, or input the engine refuses
    whatever its state), or None: only ``apply_entry`` can tell then."""
    refused = forged(entry)
    return refused if refused is not None else refused_input(engine, entry)


def refused_input(engine: Engine, entry: LogEntry) -> Outcome | None:
    """``UNFOLDABLE`` for input the engine refuses whatever its state (``invalid_input``, a
    tree a fresh engine refuses); None otherwise. ``engine`` is only read for its config."""
    event = entry.envelope.event
    invalid = invalid_input(event)
    if invalid is not None:  # the engine would ignore it: say so rather than call it folded
        return Outcome(verdict=Verdict.UNFOLDABLE, reason=invalid)
    if isinstance(event, QuotaTreeApplied):
        try:  # a tree is tried alone first: a refused one leaves the engine untouched
            Engine(engine.config).apply(event, entry.time_ms)
        except Exception as exc:
            return Outcome(verdict=Verdict.UNFOLDABLE, reason=_reason(exc))
    return None


def apply_entry(engine: Engine, entry: LogEntry) -> Outcome:
    """Apply a believed entry (``refusal`` said None); ``UNFOLDABLE`` if the engine raised."""
    event = entry.envelope.event
    try:
        decisions = engine.apply(event, entry.time_ms)
    except Exception as exc:  # any error of the core on one entry: refuse the entry, go on
        reason = _reason(exc)
        try:
            engine.rebuild_derived()
        except Exception as again:  # the durable state contradicts itself: say so
            reason += f"; the engine state it left is inconsistent: {_reason(again)}"
        return Outcome(verdict=Verdict.UNFOLDABLE, reason=reason)
    return Outcome(verdict=Verdict.FOLDED, decisions=decisions)


def invalid_input(event: LogEvent) -> str | None:
    """Why the engine keeps ``event`` out of its state (a tree T1 refuses, a job observation
    no manifest could give: only a forged entry carries them), naming the fields; None when
    it takes it. The engine applies the same checks itself, so that folding stays safe for a
    caller that bypasses this function."""
    if isinstance(event, QuotaTreeApplied):
        errors = validate_tree(event.root)
    elif isinstance(event, WorkloadObserved):
        errors = observed_errors(event)
    else:
        return None
    if not errors:
        return None
    shown = "; ".join(f"{e.path}: {e.message}" for e in errors[:5])
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    text = f"refused input: {shown}{more}"
    return text if len(text) <= MAX_REASON else text[:MAX_REASON] + "..."


def _reason(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MAX_REASON else text[:MAX_REASON] + "..."


def refused_entry(entry: LogEntry, outcome: Outcome) -> BadEntry:
    """A refused entry as the ``BadEntry`` the services park and the readers report."""
    return BadEntry(
        seq=entry.seq,
        subject=entry.subject,
        error=BAD_ENTRY_ERRORS.get(outcome.verdict, outcome.verdict.value),
        detail=outcome.reason,
        data=encode(entry.envelope),
    )


__all__ = [
    "BAD_ENTRY_ERRORS",
    "Outcome",
    "Verdict",
    "apply_entry",
    "fold_believed",
    "fold_entry",
    "forged",
    "invalid_input",
    "refusal",
    "refused_entry",
    "refused_input",
]
