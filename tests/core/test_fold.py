"""The one fold every reader uses (usher/core/history/fold.py): only the owner's decisions count,
and
no entry can crash it.

Every decision type, put on the log by someone other than its owner (a cluster subject, the
wrong source, the subject of another workload, zone or action), is refused as forged and the
engine's state is byte for byte what it was (its snapshot). The same decisions from their
owner are folded. Hostile entries (values no parser should let through, fed straight to the
core as if a watcher had put them on the log) never raise out of the fold, and a plain job is
admitted after them. Subject tokens stay bounded whatever a name holds.
"""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import (
    DEQUEUER_SOURCE,
    LEDGER_SOURCE,
    Admitted,
    Envelope,
    EventId,
    Inadmissible,
    LogEvent,
    Millis,
    NodeHeld,
    NodeResumed,
    PassRan,
    Pending,
    Preempted,
    QuotaPath,
    QuotaTreeApplied,
    Reason,
    Released,
    Requeued,
    Retried,
    Unmapped,
    WorkloadKey,
    Zone,
    ZoneServed,
)
from tests.builders.hostile import hostile_jobs, hostile_trees
from tests.builders.log import BASE, BASE_MS, CPU, QA, SUBJECTS, A, Log
from tests.builders.trees import departments_tree
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import snapshot
from usher.core.history.explain import explain
from usher.core.history.fold import Verdict, fold_entry
from usher.core.history.replay import fold, render_replay_table, replay
from usher.core.model.config import EngineConfig
from usher.core.protocol.log import LogEntry, log_entry
from usher.core.protocol.subjects import MAX_TOKEN_NAME, owner_problem, token
from usher.core.state.indexed import JobState

ZONE = Zone("default")
KEY = WorkloadKey("user-a/first")
REASON = Reason(code="Test", message="test")


def decisions() -> list[LogEvent]:
    """One decision of every type, about ``KEY`` in ``ZONE``."""
    return [
        Admitted(workload=KEY, queue=QA, quota=A, zone=ZONE, requests={"cpu": 60 * CPU}),
        Preempted(workload=KEY, queue=QA, quota=A, preemptor=WorkloadKey("c/x"), reason=REASON),
        Released(workload=KEY, quota=A, requests={"cpu": 60 * CPU}, cause="Finished"),
        Requeued(
            workload=KEY, queue=QA, quota=A, zone=ZONE, requests={"cpu": 60 * CPU}, ready=0,
            total=1, attempt=1, max_attempts=3, retry_after_ms=None, reason=REASON,
        ),
        Retried(
            workload=KEY, queue=QA, quota=A, zone=ZONE, first=KEY, attempt=1, limit=3,
            job=WorkloadKey("user-a/first-2"), cause="Failed", resized=[], reason=REASON,
        ),
        Pending(workload=KEY, queue=QA, quota=A, position=1, reason=REASON),
        Inadmissible(workload=KEY, queue=QA, quota=A, reason=REASON),
        Unmapped(workload=KEY, zone=ZONE, reason=REASON),
        PassRan(zone=ZONE, seq=3, now_ms=Millis(BASE_MS)),
        ZoneServed(zone=ZONE),
        NodeHeld(node=A, mode="Drain", by="admin", at_ms=Millis(BASE_MS)),
        NodeResumed(node=QuotaPath("root"), by="admin", at_ms=Millis(BASE_MS)),
    ]  # fmt: skip


def running_engine() -> tuple[Engine, int]:
    """A tree, one admitted job, one waiting and one hold: every decision could change it."""
    log = (
        Log()
        .tree(0)
        .job(1, "user-a/first", 60)
        .admitted(1.1, "user-a/first", 60)
        .job(2, "user-a/second", 60)
        .add(3, NodeHeld(node=QuotaPath("root"), mode="Hold", by="admin", at_ms=Millis(BASE_MS)))
    )
    engine = Engine(EngineConfig())
    assert fold(engine, log.history().items) == []
    return engine, len(log.entries)


def entry(seq: int, subject: str, event: LogEvent, source: str) -> LogEntry:
    envelope = Envelope(
        id=EventId(f"forged-{seq}"), time=BASE + timedelta(seconds=10), source=source, event=event
    )
    return log_entry(seq, subject, envelope)


def forgeries(event: LogEvent) -> list[tuple[str, str, str]]:
    """(what, subject, source) of every way to put ``event`` where its owner would not."""
    home, owner = SUBJECTS.owner(event, ZONE)
    other_zone, _ = SUBJECTS.owner(_elsewhere(event, Zone("b")), Zone("b"))
    out = [
        ("on a cluster subject", "usher.cluster.default.job.user-a.first", owner),
        ("from the watcher", home, "usher/watcher"),
        ("from another zone's dequeuer", home, f"{DEQUEUER_SOURCE}/b"),
    ]
    if owner != LEDGER_SOURCE:
        out.append(("from the ledger", home, LEDGER_SOURCE))
    if home != other_zone and (isinstance(event, Admitted) or owner != LEDGER_SOURCE):
        out.append(("on another zone's subject", other_zone, owner))
    if hasattr(event, "workload"):
        other = msgspec.structs.replace(event, workload=WorkloadKey("user-c/victim"))  # type: ignore[type-var]
        out.append(("on another workload's subject", SUBJECTS.owner(other, ZONE)[0], owner))
        head, _, tail = home.partition(".decision.")
        for action in ("admitted", "retried", "inadmissible", "requeued"):
            zone, _, rest = tail.partition(".")
            moved = f"{head}.decision.{zone}.{action}.{rest.partition('.')[2]}"
            if moved != home:
                out.append((f"on the {action} subject", moved, owner))
    else:
        out.append(
            ("on a workload's subject", SUBJECTS.decision(ZONE, "admitted", "a", "b"), owner)
        )
    return out


def _elsewhere(event: LogEvent, zone: Zone) -> LogEvent:
    """``event`` about ``zone`` (the zone of its subject, where it names none itself)."""
    return msgspec.structs.replace(event, zone=zone) if hasattr(event, "zone") else event  # type: ignore[type-var]


CASES = [
    pytest.param(event, what, subject, source, id=f"{type(event).__name__}-{what}")
    for event in decisions()
    for what, subject, source in forgeries(event)
]


@pytest.mark.parametrize(("event", "what", "subject", "source"), CASES)
def test_a_decision_not_made_by_its_owner_is_refused_and_changes_nothing(
    event: LogEvent, what: str, subject: str, source: str
) -> None:
    engine, seq = running_engine()
    before = snapshot(engine)
    outcome = fold_entry(engine, entry(seq + 1, subject, event, source))
    assert outcome.verdict is Verdict.FORGED, what
    assert outcome.reason and outcome.decisions == []
    assert snapshot(engine) == before


@pytest.mark.parametrize("event", decisions(), ids=lambda e: type(e).__name__)
def test_the_same_decision_from_its_owner_is_folded(event: LogEvent) -> None:
    engine, seq = running_engine()
    home, owner = SUBJECTS.owner(event, ZONE)
    assert fold_entry(engine, entry(seq + 1, home, event, owner)).verdict is Verdict.FOLDED


def test_a_forged_admission_takes_no_quota_and_the_job_that_fits_is_admitted() -> None:
    """The issue's attack: the watcher's identity publishes an admission on a cluster
    subject; no reader believes it, so the 60-cpu job that fits is admitted."""
    log = Log().tree(0).job(1, "user-c/big", 100)
    log.add(
        1.5,
        Admitted(workload=WorkloadKey("user-c/big"), queue=QA, quota=A, zone=ZONE,
                 requests={"cpu": 100 * CPU}),
        subject="usher.cluster.default.job.user-c.big", source="usher/watcher",
    )  # fmt: skip
    log.job(2, "user-a/fits", 60)
    engine = Engine(EngineConfig())
    refused = fold(engine, log.history().items)
    assert [(bad.seq, bad.error) for bad in refused] == [(3, "ForgedDecision")]
    admitted = [d for d in engine.decide(Millis(BASE_MS + 3000)) if isinstance(d, Admitted)]
    assert [d.workload for d in admitted] == [WorkloadKey("user-a/fits")]
    explained = explain(log.history(), EngineConfig(), WorkloadKey("user-c/big"), Millis(0))
    assert explained.state == JobState.PENDING and len(explained.history) == 1
    state = replay(log.history(), EngineConfig())
    assert state.refused == 1
    assert "1 refused (forged or unfoldable) skipped" in render_replay_table(state)


# ---------------------------------------------------------------------------- hostile

HUGE = "9" * 100_000


def test_hostile_entries_never_crash_the_fold_and_a_plain_job_is_admitted_after() -> None:
    log = Log().tree(0)
    for tree in hostile_trees():
        log.add(1, QuotaTreeApplied(root=tree))
    log.tree(2)  # the plain tree again: the last valid one is in force
    for job in hostile_jobs():
        log.add(3, job)
    log.job(4, "user-a/plain", 10)
    engine = Engine(EngineConfig())
    outcomes = [fold_entry(engine, item) for item in log.history().items]
    assert all(o.verdict in (Verdict.FOLDED, Verdict.UNFOLDABLE) for o in outcomes)
    assert all(o.reason for o in outcomes if o.verdict is Verdict.UNFOLDABLE)
    admitted = [d for d in engine.decide(Millis(BASE_MS + 5000)) if isinstance(d, Admitted)]
    assert WorkloadKey("user-a/plain") in [d.workload for d in admitted]
    # Every reader of the log gets there: replay too (it used to raise).
    state = replay(log.history(), EngineConfig())
    assert WorkloadKey("user-a/plain") in [job.job for job in state.jobs]


def test_an_unfoldable_tree_is_reported_with_its_reason_and_the_previous_tree_stays() -> None:
    """The issue's first poison: a 100,000-digit retry limit (the engine raised on it)."""
    bad = msgspec.structs.replace(departments_tree(), attributes={"usher.io/retry-limit": HUGE})
    log = Log().tree(0).add(1, QuotaTreeApplied(root=bad)).job(2, "user-a/plain", 10)
    engine = Engine(EngineConfig())
    [tree, poison, job] = log.history().items
    assert fold_entry(engine, tree).folded
    before = snapshot(engine)
    outcome = fold_entry(engine, poison)
    assert outcome.verdict is Verdict.UNFOLDABLE  # refused, naming the attribute
    assert "spec.root.attributes.usher.io/retry-limit" in outcome.reason
    assert snapshot(engine) == before  # refused before anything changed
    assert fold_entry(engine, job).folded
    admitted = [d for d in engine.decide(Millis(BASE_MS + 3000)) if isinstance(d, Admitted)]
    assert [d.workload for d in admitted] == [WorkloadKey("user-a/plain")]


# ---------------------------------------------------------------------------- subjects


@pytest.mark.parametrize(
    "name", ["x" * 100_000, "z" * (MAX_TOKEN_NAME + 1), "a\nb", "tab\there", "\x00", "é" * 300]
)
def test_a_subject_token_is_bounded_and_never_splits_whatever_the_name(name: str) -> None:
    made = token(name)
    assert len(made) <= 3 * MAX_TOKEN_NAME
    assert made.isprintable() and not any(c in made for c in " .*>")
    assert token(name) == made and token(name + "!") != made  # stable, and names differ
    subject = SUBJECTS.job(Zone(name), name, name)
    assert len(subject.encode()) < 4096 and len(subject.split(".")) == 6


def test_a_dns_name_is_spelled_out_as_before() -> None:
    assert token("user-a") == "user-a" and token("job.v1") == "job%2Ev1"
    assert token("n" * MAX_TOKEN_NAME) == "n" * MAX_TOKEN_NAME


def test_an_admission_of_a_workload_with_a_hashed_name_is_its_owners() -> None:
    key = WorkloadKey(f"user-a/{'n' * 1000}")
    event = Admitted(workload=key, queue=QA, quota=A, zone=Zone("z" * 500), requests={})
    home, owner = SUBJECTS.owner(event, ZONE)
    envelope = entry(1, home, event, owner).envelope
    assert owner_problem(home, envelope) is None
    other = msgspec.structs.replace(event, workload=WorkloadKey(f"user-a/{'n' * 1001}"))
    assert owner_problem(home, msgspec.structs.replace(envelope, event=other)) is not None


# ---------------------------------------------------------------------------- properties

NAMES = st.text(min_size=0, max_size=400) | st.sampled_from(["a.b", "%25", "*", ">", "%Hx", ""])


@settings(max_examples=300, deadline=None)
@given(namespace=NAMES, name=NAMES, zone=NAMES, other=NAMES, number=st.integers(0, 11))
def test_only_the_owners_subject_and_source_are_believed(
    namespace: str, name: str, zone: str, other: str, number: int
) -> None:
    """Whatever the names: a decision is believed on its owner's subject from its owner's
    source, and on no other subject that names another workload or zone."""
    event = _about(decisions()[number], WorkloadKey(f"{namespace}/{name}"), Zone(zone))
    home, owner = SUBJECTS.owner(event, Zone(zone))
    envelope = entry(1, home, event, owner).envelope
    assert owner_problem(home, envelope) is None
    assert len(home.encode()) < 4096 and home.isprintable() and " " not in home
    moved = _about(event, WorkloadKey(f"{namespace}/{other}"), Zone(other))
    elsewhere, _ = SUBJECTS.owner(moved, Zone(other))
    # The ledger files these under the allocation's zone, which they do not carry.
    zone_free = isinstance(event, Preempted | Released | Requeued)
    if elsewhere != home and not (zone_free and moved.workload == event.workload):  # type: ignore[attr-defined]
        assert owner_problem(elsewhere, envelope) is not None
    assert owner_problem(home, msgspec.structs.replace(envelope, source=f"{owner}x")) is not None


def _about(event: LogEvent, key: WorkloadKey, zone: Zone) -> LogEvent:
    changes: dict[str, object] = {}
    if hasattr(event, "workload"):
        changes["workload"] = key
    if hasattr(event, "zone"):
        changes["zone"] = zone
    return msgspec.structs.replace(event, **changes)  # type: ignore[type-var]
