"""Who may record a pass (D4): only the dequeuer of its zone, on that zone's ``pass.ran``."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schemas import DEQUEUER_SOURCE, Envelope, EventId, Millis, PassRan, Zone
from usher.adapters.nats.permissions import dequeuer
from usher.adapters.nats.subjects import Subjects

S = Subjects("t")


def record(zone: str = "a", source: str = f"{DEQUEUER_SOURCE}/a") -> Envelope:
    return Envelope(
        id=EventId("p"),
        time=datetime(2026, 1, 1, tzinfo=UTC),
        source=source,
        event=PassRan(zone=Zone(zone), seq=3, now_ms=Millis(1)),
    )


@pytest.mark.parametrize(
    ("subject", "envelope", "problem"),
    [
        ("t.pass.a.ran", record(), None),
        ("t.pass.b.ran", record(), "it belongs on 't.pass.a.ran'"),
        ("t.pass.a.ran", record(source="usher/watcher"), "only 'usher/dequeuer/a'"),
        ("t.pass.b.ran", record("b"), "only 'usher/dequeuer/b'"),
        # Its subject before it left decision.> is read during the migration window.
        ("t.decision.a.pass.ran", record(), None),
        ("t.decision.b.pass.ran", record(), "it belongs on 't.pass.a.ran'"),
        ("t.decision.a.pass.ran", record(source="usher/watcher"), "only 'usher/dequeuer/a'"),
    ],
)
def test_only_the_zones_dequeuer_records_its_passes(
    subject: str, envelope: Envelope, problem: str | None
) -> None:
    found = S.owner_problem(subject, envelope)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_the_dequeuer_of_a_zone_may_publish_its_pass_records_only() -> None:
    allowed = dequeuer(S, "a").publish
    assert S.pass_ran(Zone("a")) in allowed
    assert S.pass_ran(Zone("b")) not in allowed
