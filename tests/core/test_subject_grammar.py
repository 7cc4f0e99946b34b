"""One subject grammar (issue 31): only decisions about workloads under ``<p>.decision.>``,
each ``<p>.decision.<zone>.<action>.<ns>.<name>``; holds, zone announcements and pass records
under subjects of their own, and still believed on their old ``decision.>`` subjects during
the migration window (``MIGRATION_WINDOW``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import (
    DEQUEUER_SOURCE,
    LEDGER_SOURCE,
    Envelope,
    EventId,
    Millis,
    NodeHeld,
    NodeResumed,
    PassRan,
    QuotaPath,
    Zone,
    ZoneServed,
)
from schemas.envelope import LogEvent
from tests.builders.log import BASE, BASE_MS, SUBJECTS, Log
from usher.core.engine.facade import Engine
from usher.core.history.fold import Verdict, fold_entry
from usher.core.history.replay import fold
from usher.core.model.config import EngineConfig
from usher.core.protocol.log import log_entry
from usher.core.protocol.subjects import (
    LOG_ROOTS,
    MIGRATION_WINDOW,
    Subjects,
    prefix_of,
    untoken,
)

S = Subjects("t")


def entry(event: LogEvent, source: str) -> Envelope:
    return Envelope(
        id=EventId("x"), time=datetime(2026, 1, 1, tzinfo=UTC), source=source, event=event
    )


HELD = NodeHeld(node=QuotaPath("root/a.b"), mode="Hold", by="admin", at_ms=Millis(1))
RESUMED = NodeResumed(node=QuotaPath("root/a.b"), by="admin", at_ms=Millis(2))
SERVED = ZoneServed(zone=Zone("east"), replica="r1")
PASS = PassRan(zone=Zone("east"), seq=3, now_ms=Millis(1))
DEQUEUER = f"{DEQUEUER_SOURCE}/east"

OWN_SUBJECTS = [
    (HELD, LEDGER_SOURCE, "t.hold.root/a%2Eb", "t.decision.hold.root/a%2Eb"),
    (RESUMED, LEDGER_SOURCE, "t.hold.root/a%2Eb", "t.decision.hold.root/a%2Eb"),
    (SERVED, DEQUEUER, "t.zone.east.served", "t.decision.east.zone.served"),
    (PASS, DEQUEUER, "t.pass.east.ran", "t.decision.east.pass.ran"),
]


@pytest.mark.parametrize(("event", "source", "home", "legacy"), OWN_SUBJECTS)
def test_holds_announcements_and_passes_have_subjects_of_their_own(
    event: LogEvent, source: str, home: str, legacy: str
) -> None:
    assert S.owner(event, Zone("east")) == (home, source)
    assert not S.is_decision(home)
    assert S.owner_problem(home, entry(event, source)) is None
    assert prefix_of(home) == "t"
    assert any(home.startswith(pattern[:-1]) for pattern in S.log_subjects)


@pytest.mark.parametrize(("event", "source", "home", "legacy"), OWN_SUBJECTS)
def test_their_old_subjects_are_still_read_during_the_migration_window(
    event: LogEvent, source: str, home: str, legacy: str
) -> None:
    assert S.legacy_home(event) == legacy
    assert S.owner_problem(legacy, entry(event, source)) is None
    assert S.owner_problem(legacy, entry(event, "usher/watcher")) is not None
    assert "0.3.0" in MIGRATION_WINDOW


def test_served_zone_reads_the_new_and_the_old_subject_only() -> None:
    assert S.served_zone(S.zone_served(Zone("a.b"))) == Zone("a.b")
    assert S.served_zone("t.decision.a%2Eb.zone.served") == Zone("a.b")
    assert S.served_zone("t.zone.a.b.served") is None
    assert S.served_zone("t.decision.a.admitted.zone.served") is None
    assert S.zones_served == "t.zone.*.served"


names = st.text(min_size=0, max_size=40)


@given(zone=names, namespace=names, name=names, node=names)
def test_every_decision_subject_parses_as_zone_action_namespace_name(
    zone: str, namespace: str, name: str, node: str
) -> None:
    """A reader that splits ``<p>.decision.<zone>.<action>.<ns>.<name>`` never meets
    anything else under ``decision.>``: nothing of ours is published there but decisions."""
    for action in ("admitted", "pending", "released"):
        subject = S.decision(Zone(zone), action, namespace, name)
        tokens = subject.split(".")
        assert tokens[:2] == ["t", "decision"] and len(tokens) == 6
        assert tokens[3] == action
        assert untoken(tokens[2]) == zone or tokens[2].startswith("%H")
    others = [S.hold(QuotaPath(node)), S.zone_served(Zone(zone)), S.pass_ran(Zone(zone))]
    assert not [s for s in others if S.is_decision(s)]


@pytest.mark.parametrize(
    ("subject", "verdict"),
    [
        ("t.hold.root", Verdict.FOLDED),
        ("t.decision.hold.root", Verdict.FOLDED),  # a log written by 0.1.0: still read
        ("t.decision.default.admitted.root.x", Verdict.FORGED),
        ("t.zone.root.served", Verdict.FORGED),
    ],
)
def test_every_reader_folds_a_hold_from_its_new_and_its_old_subject(
    subject: str, verdict: Verdict
) -> None:
    engine = Engine(EngineConfig())
    assert fold(engine, Log().tree(0).history().items) == []
    held = NodeHeld(node=QuotaPath("root"), mode="Hold", by="admin", at_ms=Millis(BASE_MS))
    envelope = Envelope(id=EventId("h"), time=BASE, source=LEDGER_SOURCE, event=held)
    outcome = fold_entry(
        engine, log_entry(9, subject.replace("t.", f"{SUBJECTS.prefix}.", 1), envelope)
    )
    assert outcome.verdict is verdict, outcome.reason
    assert (QuotaPath("root") in engine.state.holds) == (verdict is Verdict.FOLDED)


def first_root_prefix(subject: str) -> str | None:
    """``prefix_of`` as first written: each root's first place, the leftmost past the start."""
    found = [at for at in (subject.find(f".{root}.") for root in LOG_ROOTS) if at > 0]
    return subject[: min(found)] if found else None


@pytest.mark.parametrize(
    ("subject", "prefix"),
    [
        ("t.cluster.default.job.ns.name", "t"),
        ("a.b.decision.z.admitted.ns.pass", "a.b"),
        ("x.zone.pass.y", "x"),
        ("x.pass.zone.y", "x"),
        (".cluster.t.decision.x", ".cluster.t"),
        (".cluster.x.cluster.y", None),
        ("t.clusters.x", None),
        ("t", None),
    ],
)
def test_the_prefix_of_a_subject_is_before_its_first_root(subject: str, prefix: str | None) -> None:
    assert prefix_of(subject) == prefix == first_root_prefix(subject)


@given(
    st.lists(st.sampled_from([*LOG_ROOTS, "", "t", "a.b", "clusters", "zone-a", "%2E"]), max_size=8)
)
def test_the_prefix_of_any_subject_is_as_first_written(tokens: list[str]) -> None:
    subject = ".".join(tokens)
    assert prefix_of(subject) == first_root_prefix(subject)
