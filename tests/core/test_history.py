"""Replay, audit, what-if and explain on logs built in memory (pure core, no servers)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from fractions import Fraction

import msgspec
import pytest

from schemas import (
    Admitted,
    FieldError,
    Inadmissible,
    Millis,
    PodSet,
    QuotaNode,
    Reason,
    Unmapped,
    WorkloadDeleted,
    WorkloadKey,
    WorkloadObserved,
    WorkloadRejected,
    Zone,
    ZoneServed,
)
from schemas.events import CLUSTER_EVENT_TYPES
from schemas.holds import HOLD_EVENT_TYPES
from tests.builders.log import (
    BASE,
    BASE_MS,
    CPU,
    QA,
    QB,
    A,
    B,
    Log,
    walkthrough_reclaim,
    walkthrough_round,
)
from tests.builders.trees import departments_tree
from usher.core.engine.facade import Engine
from usher.core.history import audit, explain, whatif
from usher.core.history import replay as history
from usher.core.model.config import EngineConfig

# ---------------------------------------------------------------------------- replay


def test_replay_rebuilds_queues_reasons_and_quota() -> None:
    state = history.replay(walkthrough_round().history(), EngineConfig())
    jobs = {row.job: row for row in state.jobs}
    assert jobs[WorkloadKey("user-a/first")].state == "Admitted"
    second = jobs[WorkloadKey("user-a/second")]
    assert (second.state, second.queue, second.position) == ("Pending", QA, 1)
    assert second.reason is not None
    assert second.reason.message == "root/Department-a cpu 60 used + 60 requested > max 100 x 1.0"
    assert (second.reason.node, second.reason.used, second.reason.limit) == (A, 60_000, 100_000)
    assert [(q.queue, [e.job for e in q.jobs]) for q in state.queues] == [
        (QA, ["user-a/second"]),
        (QB, []),
    ]
    quota = {row.path: row for row in state.quota}
    assert quota[A].used == {"cpu": "60"}
    assert (quota[A].min, quota[A].max) == ({"cpu": "60"}, {"cpu": "100"})
    assert (state.seq, state.entries) == (5, 5)


@pytest.mark.parametrize(
    ("until_seq", "until_at", "expected"),
    [
        (0, None, {}),
        (2, None, {"user-a/first": ("Pending", "NotYetEvaluated")}),
        (3, None, {"user-a/first": ("Admitted", None)}),
        (None, 1.15, {"user-a/first": ("Admitted", None)}),
        (
            None,
            2.0,
            {"user-a/first": ("Admitted", None), "user-a/second": ("Pending", "QuotaExceeded")},
        ),
    ],
)
def test_replay_stops_at_a_seq_or_a_time(
    until_seq: int | None, until_at: float | None, expected: dict[str, tuple[str, str | None]]
) -> None:
    until_ms = Millis(BASE_MS + int(until_at * 1000)) if until_at is not None else None
    state = history.replay(
        walkthrough_round().history(), EngineConfig(), until_seq=until_seq, until_ms=until_ms
    )
    got = {row.job: (row.state, row.reason.code if row.reason else None) for row in state.jobs}
    assert got == expected


def test_replay_under_block_names_the_head_and_a_held_preemptor() -> None:
    log = walkthrough_round().job(3, "user-a/third", 10)
    state = history.replay(log.history(), EngineConfig(policy="Block"))
    third = next(r for r in state.jobs if r.job == "user-a/third")
    assert third.reason is not None and third.reason.code == "BlockedByHead"
    assert third.reason.blocker == "user-a/second"
    held = history.replay(walkthrough_reclaim().history(), EngineConfig(), until_seq=8)
    urgent = next(r for r in held.jobs if r.job == "user-c/urgent")
    assert urgent.reason is not None and urgent.reason.code == "PreemptionInProgress"


def test_replay_of_a_thousand_workloads_is_well_under_a_second() -> None:
    log = Log().tree(0)
    for i in range(1000):
        key = f"user-{'abc'[i % 3]}/job-{i}"
        log.job(1 + i / 1000, key, 1)
        if i % 2 == 0:
            log.admitted(1 + i / 1000, key, 1, A if i % 3 != 2 else B)
    data = history.encode_export(
        history.ExportHeader(prefix="usher", stream="USHER_LOG", entries=len(log.entries)),
        [
            history.exported_entry(i, s, msgspec.json.encode(e))
            for i, (s, e) in enumerate(log.entries, 1)
        ],
    )
    started = time.perf_counter()
    _, entries = history.decode_export(data)
    state = history.replay(history.decode_history(entries), EngineConfig())
    elapsed = time.perf_counter() - started
    assert len(state.jobs) == 1000
    assert elapsed < 1.0, f"replay of 1,000 workloads took {elapsed:.3f}s"


# ---------------------------------------------------------------------------- time and format


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [
        ("2024-05-01T12:00:00Z", BASE_MS),
        ("2024-05-01T12:00:00", BASE_MS),
        ("2024-05-01T14:00:00+02:00", BASE_MS),
        ("2024-05-01T12:00:01.500Z", BASE_MS + 1500),
        ("-10m", BASE_MS + 3_600_000 - 600_000),
        ("-90s", BASE_MS + 3_600_000 - 90_000),
        ("-2h", BASE_MS + 3_600_000 - 7_200_000),
        ("-1d", BASE_MS + 3_600_000 - 86_400_000),
        ("-250ms", BASE_MS + 3_600_000 - 250),
    ],
)
def test_parse_time(text: str, expected_ms: int) -> None:
    assert history.parse_time(text, Millis(BASE_MS + 3_600_000)) == expected_ms


@pytest.mark.parametrize("text", ["yesterday", "10m", "-10 minutes", "2024-13-01", ""])
def test_parse_time_rejects_bad_input(text: str) -> None:
    with pytest.raises(history.TimeError) as info:
        history.parse_time(text, Millis(BASE_MS))
    assert info.value.text == text


def test_relative_time_needs_a_log() -> None:
    with pytest.raises(history.TimeError, match="at least one entry"):
        history.parse_time("-1m", None)


def test_export_round_trip_keeps_payloads_byte_for_byte() -> None:
    envelope = msgspec.json.encode(walkthrough_round().entries[0][1])
    entries = [
        history.exported_entry(1, "usher.cluster.quota", envelope),
        history.exported_entry(2, "usher.cluster.x", b"\xff not json"),
        history.exported_entry(5, "usher.cluster.y", b'{"pretty":\n 1}'),
    ]
    header = history.ExportHeader(prefix="usher", stream="USHER_LOG", entries=3, last_seq=5)
    again_header, again = history.decode_export(history.encode_export(header, entries))
    assert again_header == header
    assert [history.payload(e) for e in again] == [envelope, b"\xff not json", b'{"pretty":\n 1}']
    decoded = history.decode_history(again)
    assert [i.seq for i in decoded.items] == [1]
    assert [b.seq for b in decoded.bad] == [2, 5]


@pytest.mark.parametrize(
    ("blob", "line", "detail"),
    [
        (b"", 1, "empty file"),
        (b'{"hello": 1}\n', 1, "header"),
        (b'{"prefix":"u","stream":"U_LOG","entries":1}\nnot json\n', 2, "not a log entry"),
        (
            b'{"prefix":"u","stream":"U_LOG","entries":2}\n'
            b'{"seq":2,"subject":"u.a","envelope":{}}\n{"seq":2,"subject":"u.a","envelope":{}}\n',
            3,
            "does not follow",
        ),
    ],
)
def test_decode_export_names_the_bad_line(blob: bytes, line: int, detail: str) -> None:
    with pytest.raises(history.ExportFormatError) as info:
        history.decode_export(blob)
    assert info.value.line == line
    assert detail in info.value.detail


# ---------------------------------------------------------------------------- audit


def _findings(log: Log, config: EngineConfig | None = None) -> list[tuple[int | None, str]]:
    report = audit.audit(log.history(), config or EngineConfig())
    return [(f.seq, f.check) for f in report.findings]


def test_a_recorded_run_is_justified() -> None:
    assert _findings(walkthrough_round()) == []
    assert _findings(walkthrough_reclaim()) == []
    finished = (
        walkthrough_round()
        .finished(5, "user-a/first")
        .released(5.1, "user-a/first", 60, "Finished")
    )
    assert _findings(finished.admitted(5.2, "user-a/second", 60)) == []


TAMPERED: list[tuple[str, Callable[[], Log], list[tuple[int | None, str]]]] = [
    (
        "second admitted although it does not fit",
        lambda: walkthrough_round().admitted(3, "user-a/second", 60),
        # The ledger's view (over-quota), then the running usage on the leaf and the root.
        [(6, "over-quota"), (6, "over-commit"), (6, "over-commit")],
    ),
    (
        "admitted twice",
        lambda: walkthrough_round().add(
            3,
            Admitted(
                workload=WorkloadKey("user-a/first"),
                queue=QA,
                quota=A,
                zone=Zone("default"),
                requests={"cpu": 60 * CPU},
            ),
            id="ledger:admitted:user-a/first:9",
        ),
        [(6, "already-admitted")],
    ),
    (
        "same decision recorded twice",
        lambda: walkthrough_round().admitted(1.15, "user-a/first", 60),
        [(6, "duplicate")],
    ),
    (
        "requests do not match the workload",
        lambda: Log().tree().job(1, "user-a/x", 60).admitted(2, "user-a/x", 30),
        [(3, "wrong-requests")],
    ),
    (
        "quota is not the workload's leaf",
        lambda: Log().tree().job(1, "user-a/x", 10).admitted(2, "user-a/x", 10, B),
        [(3, "wrong-quota")],
    ),
    (
        "never observed",
        lambda: Log().tree().admitted(2, "user-a/ghost", 10),
        [(2, "not-observed")],
    ),
    (
        "released without a cause",
        lambda: walkthrough_round().released(3, "user-a/first", 60, "Finished"),
        [(6, "no-cause")],
    ),
    (
        "released as failed after a success",
        lambda: (
            walkthrough_round()
            .finished(3, "user-a/first")
            .released(4, "user-a/first", 60, "Failed")
        ),
        [(7, "no-cause")],
    ),
    (
        "released what was never held",
        lambda: (
            walkthrough_round()
            .finished(3, "user-a/second")
            .released(4, "user-a/second", 60, "Finished")
        ),
        [(7, "nothing-held")],
    ),
    (
        "released other requests than admitted",
        lambda: (
            walkthrough_round()
            .finished(3, "user-a/first")
            .released(4, "user-a/first", 50, "Finished")
        ),
        [(7, "wrong-release")],
    ),
    (
        "preempted although nobody borrows",
        lambda: (
            Log()
            .tree()
            .job(1, "user-a/small", 30)
            .admitted(1.1, "user-a/small", 30)
            .job(2, "user-c/want", 10)
            .preempted(3, "user-a/small", "user-c/want")
        ),
        [(5, "preemption-refused")],
    ),
    (
        "released as preempted before it was seen stopped",
        lambda: (
            Log()
            .tree()
            .job(1, "user-a/big", 100)
            .admitted(1.1, "user-a/big", 100)
            .job(2, "user-c/want", 10)
            .preempted(3, "user-a/big", "user-c/want")
            .released(3.1, "user-a/big", 100, "Preempted")
        ),
        [(6, "no-cause")],
    ),
    (
        "inadmissible that fits",
        lambda: walkthrough_round().add(
            3,
            Inadmissible(
                workload=WorkloadKey("user-a/second"),
                queue=QA,
                quota=A,
                reason=Reason(code="ExceedsMax", message="too big"),
            ),
        ),
        [(6, "core-disagrees")],
    ),
    (
        "unmapped that is mapped",
        lambda: walkthrough_round().add(
            3,
            Unmapped(
                workload=WorkloadKey("user-a/second"),
                zone=Zone("default"),
                reason=Reason(code="NoLeaf", message="no leaf"),
            ),
        ),
        [(6, "core-disagrees")],
    ),
]


@pytest.mark.parametrize(("case", "build", "expected"), TAMPERED, ids=[t[0] for t in TAMPERED])
def test_audit_names_each_unjustified_decision(
    case: str, build: Callable[[], Log], expected: list[tuple[int | None, str]]
) -> None:
    assert _findings(build()) == expected


def test_audit_agrees_with_inadmissible_and_unmapped_the_core_would_announce() -> None:
    log = (
        Log()
        .tree()
        .job(1, "user-a/huge", 200)
        .add(
            1.1,
            Inadmissible(
                workload=WorkloadKey("user-a/huge"),
                queue=QA,
                quota=A,
                reason=Reason(code="ExceedsMax", message="too big"),
            ),
        )
        .job(2, "nobody/lost", 1)
        .add(
            2.1,
            Unmapped(
                workload=WorkloadKey("nobody/lost"),
                zone=Zone("default"),
                reason=Reason(code="NoLeaf", message="no leaf"),
            ),
        )
    )
    assert _findings(log) == []


def test_preemption_within_min_runtime_is_refused() -> None:
    log = walkthrough_reclaim()
    assert _findings(log, EngineConfig(min_runtime_ms=60_000)) == [(8, "preemption-refused")]
    report = audit.audit(log.history(), EngineConfig(min_runtime_ms=60_000))
    assert "within its minimum runtime" in report.findings[0].message


def test_audit_since_only_reports_later_decisions_but_folds_everything() -> None:
    log = Log().tree().job(1, "user-a/x", 60).admitted(2, "user-a/x", 30).job(5, "user-a/y", 80)
    log.admitted(6, "user-a/y", 80)
    history_ = log.history()
    assert [f.check for f in audit.audit(history_, EngineConfig()).findings] == [
        "wrong-requests",
        "over-quota",
        "over-commit",
        "over-commit",
    ]
    since = Millis(BASE_MS + 3000)
    report = audit.audit(history_, EngineConfig(), since_ms=since)
    assert [(f.seq, f.check) for f in report.findings] == [
        (5, "over-quota"),
        (5, "over-commit"),
        (5, "over-commit"),
    ]
    assert report.decisions == 1


def test_undecodable_entries_are_reported_apart_not_as_findings() -> None:
    entries = [
        history.exported_entry(
            1, "usher.cluster.quota", msgspec.json.encode(Log().tree().entries[0][1])
        ),
        history.exported_entry(2, "usher.cluster.x", b'{"type": "envelope.v1"}'),
    ]
    report = audit.audit(history.decode_history(entries), EngineConfig())
    assert report.findings == []
    assert [(b.seq, b.subject, b.error) for b in report.rejected] == [
        (2, "usher.cluster.x", "ValidationError")
    ]
    table = audit.render_audit_table(report)
    assert "rejected input, not findings: 1 entry not valid envelopes" in table
    assert "seq 2     usher.cluster.x" in table
    assert table.rstrip().endswith("OK: every decision is justified by the log before it")
    doc = msgspec.json.decode(audit.render_audit_json(report))
    assert (doc["findings"], doc["rejected"][0]["seq"]) == ([], 2)


def _stored(log: Log, stored_s: list[float]) -> history.History:
    """``log`` as read from a stream that stored entry i at ``BASE + stored_s[i]``."""
    return history.decode_history(
        history.exported_entry(
            i,
            subject,
            msgspec.json.encode(envelope),
            history.to_datetime(BASE_MS + int(stored_s[i - 1] * 1000)),
        )
        for i, (subject, envelope) in enumerate(log.entries, start=1)
    )


def test_audit_since_is_the_log_time_not_the_envelope_time() -> None:
    # The second admission is over quota and claims (forges) a time long before the window;
    # the first claims one inside it, but the log stored them the other way round.
    log = Log().tree(0).job(1, "user-a/x", 60).admitted(99, "user-a/x", 60)
    log.job(3, "user-a/y", 60).admitted(-999, "user-a/y", 60)
    stored = _stored(log, [0, 1, 2, 3, 100])
    since = Millis(BASE_MS + 50_000)
    report = audit.audit(stored, EngineConfig(), since_ms=since)
    # Only the second admission is in the window: the ledger's rule (over-quota) and the
    # running-usage invariant (over-commit, once per node over its cap) both name it.
    assert {(f.seq, f.workload) for f in report.findings} == {(5, "user-a/y")}
    assert {f.check for f in report.findings} == {"over-quota", "over-commit"}
    assert report.decisions == 1
    # The relative base is the log's last stored time too (-60s from 100 s, not from 99 s).
    assert (stored.log_end_ms, stored.end_ms) == (BASE_MS + 100_000, BASE_MS - 999_000)
    relative = history.parse_time("-60s", stored.log_end_ms)
    assert {f.seq for f in audit.audit(stored, EngineConfig(), since_ms=relative).findings} == {5}
    # Entries with no recorded log time are never hidden by a window.
    unknown = history.decode_history(
        history.exported_entry(i, subject, msgspec.json.encode(envelope))
        for i, (subject, envelope) in enumerate(log.entries, start=1)
    )
    assert not unknown.log_times_known and stored.log_times_known
    found = audit.audit(unknown, EngineConfig(), since_ms=Millis(BASE_MS + 10**9)).findings
    assert {f.seq for f in found} == {5}
    assert audit.audit(unknown, EngineConfig(), since_ms=Millis(BASE_MS + 10**9)).decisions == 2


def _allocation(
    id: int, key: str, state: str, *, admitted: bool = True, preempted: bool = False
) -> audit.AllocationRecord:
    return audit.AllocationRecord(
        id=id,
        workload=WorkloadKey(key),
        quota=A if key.startswith("user-a") or key.startswith("user-b") else B,
        state=state,
        admitted_at=BASE if admitted else None,
        preempted_at=BASE if preempted else None,
        released_at=BASE if state == "released" else None,
    )


LEDGER_CASES: list[tuple[str, list[audit.AllocationRecord], list[str], list[tuple[str, str]]]] = [
    (
        "agrees",
        [
            _allocation(1, "user-a/big", "admitted"),
            _allocation(2, "user-b/borrow", "released", preempted=True),
            _allocation(3, "user-c/urgent", "admitted"),
        ],
        [],
        [],
    ),
    (
        "an allocation without its Admitted",
        [
            _allocation(1, "user-a/big", "admitted"),
            _allocation(2, "user-b/borrow", "released", preempted=True),
            _allocation(3, "user-c/urgent", "admitted"),
            _allocation(4, "user-a/extra", "admitted"),
        ],
        [],
        [("missing-on-log", "ledger:admitted:user-a/extra:4")],
    ),
    (
        "an unpublished outbox row explains a missing event",
        [
            _allocation(1, "user-a/big", "released"),
            _allocation(2, "user-b/borrow", "released", preempted=True),
            _allocation(3, "user-c/urgent", "admitted"),
        ],
        ["ledger:released:user-a/big:1"],
        [("unpublished", "ledger:released:user-a/big:1")],
    ),
    (
        "an Admitted without its allocation, a release the ledger never made",
        [
            _allocation(1, "user-a/big", "admitted"),
            _allocation(2, "user-b/borrow", "preempting", preempted=True),
        ],
        [],
        [
            ("allocation-mismatch", "ledger:released:user-b/borrow:2"),
            ("no-allocation", "ledger:admitted:user-c/urgent:3"),
        ],
    ),
]


@pytest.mark.parametrize(
    ("case", "rows", "unpublished", "expected"), LEDGER_CASES, ids=[c[0] for c in LEDGER_CASES]
)
def test_ledger_and_log_agree(
    case: str,
    rows: list[audit.AllocationRecord],
    unpublished: list[str],
    expected: list[tuple[str, str]],
) -> None:
    snapshot = audit.LedgerSnapshot(
        allocations=rows,
        unpublished=[
            audit.OutboxRecord(id=i, event_id=e, subject="usher.decision")
            for i, e in enumerate(unpublished)
        ],
    )
    findings = audit.check_ledger(walkthrough_reclaim().history(), snapshot)
    assert sorted((f.check, f.event_id or "") for f in findings) == sorted(expected)


def test_decisions_not_written_by_the_ledger_are_reported() -> None:
    log = (
        Log()
        .tree()
        .job(1, "user-a/x", 10)
        .add(
            2,
            Admitted(
                workload=WorkloadKey("user-a/x"),
                queue=QA,
                quota=A,
                zone=Zone("default"),
                requests={"cpu": 10 * CPU},
            ),
            id="forged-1",
        )
    )
    empty = audit.LedgerSnapshot(allocations=[], unpublished=[])
    assert [f.check for f in audit.check_ledger(log.history(), empty)] == ["not-from-ledger"]


@pytest.mark.parametrize(
    ("event_id", "parsed"),
    [
        ("ledger:admitted:user-a/pi:12", ("admitted", "user-a/pi", 12)),
        ("ledger:released:ns/a.b-c:1", ("released", "ns/a.b-c", 1)),
        ("ledger:admitted:user-a/pi:x", None),
        ("dequeuer:default:unmapped:a/b:3", None),
        ("ledger:admitted::3", None),
    ],
)
def test_parse_ledger_id(event_id: str, parsed: tuple[str, str, int] | None) -> None:
    assert audit.parse_ledger_id(event_id) == parsed


def test_audit_table_names_the_decision_and_why() -> None:
    report = audit.audit(
        walkthrough_round().admitted(3, "user-a/second", 60).history(), EngineConfig()
    )
    text = audit.render_audit_table(report)
    assert "seq 6" in text and "user-a/second" in text and "ledger:admitted:user-a/second:2" in text
    assert "over-quota: QuotaExceeded: root/Department-a cpu 60 used + 60 requested" in text
    assert msgspec.json.decode(audit.render_audit_json(report))["findings"][0]["seq"] == 6


# ---------------------------------------------------------------------------- what-if


def _compare(log: Log, changed: EngineConfig, **kwargs: object) -> whatif.WhatIfReport:
    spec = whatif.WhatIfSpec(
        baseline=whatif.Variant(config=EngineConfig()),
        changed=whatif.Variant(config=changed, **kwargs),  # type: ignore[arg-type]
    )
    return whatif.what_if(log.history(), spec)


def test_what_if_oversell_two_admits_both_walkthrough_jobs() -> None:
    report = _compare(walkthrough_round(), EngineConfig(oversell_rate=Fraction(2)))
    assert (report.overall.baseline.admitted, report.overall.whatif.admitted) == (1, 2)
    assert (report.overall.baseline.pending_at_end, report.overall.whatif.pending_at_end) == (1, 0)
    assert [(d.workload, d.action, d.baseline_at, d.whatif_quota) for d in report.differences] == [
        ("user-a/second", "admit", None, A)
    ]
    assert report.differences[0].whatif_at == BASE + timedelta(seconds=2)
    assert report.inputs == 4  # the tree and three observations; recorded decisions ignored


def test_what_if_ignores_recorded_decisions() -> None:
    forged = walkthrough_round().admitted(3, "user-a/second", 60)
    report = _compare(forged, EngineConfig())
    assert report.overall.baseline.admitted == 1
    assert report.differences_total == 0


def test_what_if_with_another_tree() -> None:
    report = _compare(
        walkthrough_round(), EngineConfig(), tree=departments_tree(a_max=200), tree_label="big.yaml"
    )
    # Root max stays 100: a bigger Department-a alone does not admit the second job.
    assert report.overall.whatif.admitted == 1
    bigger = QuotaNode(
        name="root",
        min={"cpu": 200 * CPU},
        max={"cpu": 200 * CPU},
        children=[
            QuotaNode(name="Department-a", min={"cpu": 160 * CPU}, max={"cpu": 200 * CPU},
                      namespaces=["user-a", "user-b"]),
            QuotaNode(name="Department-b", min={"cpu": 40 * CPU}, max={"cpu": 100 * CPU},
                      namespaces=["user-c"]),
        ],
    )  # fmt: skip
    report = _compare(walkthrough_round(), EngineConfig(), tree=bigger, tree_label="bigger.yaml")
    assert report.overall.whatif.admitted == 2
    assert report.whatif.tree.startswith("bigger.yaml")


def test_what_if_block_stops_the_small_job_behind() -> None:
    log = walkthrough_round().job(3, "user-a/small", 10)
    report = _compare(log, EngineConfig(policy="Block"))
    assert (report.overall.baseline.admitted, report.overall.whatif.admitted) == (2, 1)
    assert [(d.workload, d.action) for d in report.differences] == [("user-a/small", "admit")]


def test_what_if_within_quota_preempts_lower_priority() -> None:
    log = (
        Log()
        .tree()
        .job(1, "user-a/low", 100)
        .job(5, "user-a/high", 50, priority=5)
        .finished(9, "user-a/low")
    )
    report = _compare(log, EngineConfig(within_quota="LowerPriority"))
    assert (report.overall.baseline.preemptions, report.overall.whatif.preemptions) == (0, 1)
    baseline_wait = report.overall.baseline.mean_wait_s
    assert baseline_wait is not None and report.overall.whatif.mean_wait_s is not None
    # high waits 4 s for the finish at t=9 in the baseline, nothing with LowerPriority.
    assert report.overall.whatif.mean_wait_s < baseline_wait


def test_what_if_groups_events_that_arrived_together() -> None:
    log = Log().tree(0).job(1.000, "user-a/a", 60).job(1.010, "user-a/b", 60).job(2, "user-a/c", 1)
    spec = whatif.WhatIfSpec(
        baseline=whatif.Variant(config=EngineConfig()),
        changed=whatif.Variant(config=EngineConfig(policy="Block")),
    )
    assert whatif.what_if(log.history(), spec).groups == 3
    narrow = whatif.WhatIfSpec(baseline=spec.baseline, changed=spec.changed, window_ms=0)
    assert whatif.what_if(log.history(), narrow).groups == 4


def test_what_if_since_starts_from_the_recorded_state() -> None:
    log = walkthrough_round().job(10, "user-a/late", 60)
    spec = whatif.WhatIfSpec(
        baseline=whatif.Variant(config=EngineConfig()),
        changed=whatif.Variant(config=EngineConfig(oversell_rate=Fraction(2))),
        since_ms=Millis(BASE_MS + 5000),
    )
    report = whatif.what_if(log.history(), spec)
    assert report.inputs == 1
    # At t=5 first runs (recorded) and second waits: with rate 2 both waiting ones get in.
    assert (report.overall.baseline.admitted, report.overall.whatif.admitted) == (0, 2)


def test_what_if_replays_every_cluster_event_type() -> None:
    from usher.core.history.whatif import _INPUTS

    # And operators' holds, drains and resumes (R14/R15): inputs too, never decisions.
    assert set(_INPUTS) == set(CLUSTER_EVENT_TYPES) | set(HOLD_EVENT_TYPES)


def test_what_if_renders_a_table_and_json() -> None:
    report = _compare(walkthrough_round(), EngineConfig(oversell_rate=Fraction(2)))
    table = whatif.render_whatif_table(report)
    assert "1 -> 2" in table and "user-a/second" in table and "oversell 2.0" in table
    doc = msgspec.json.decode(whatif.render_whatif_json(report))
    assert doc["overall"]["whatif"]["admitted"] == 2


# ---------------------------------------------------------------------------- explain


def test_explain_the_walkthrough_reclaim_victim() -> None:
    log = walkthrough_reclaim()
    e = explain.explain(log.history(), EngineConfig(), WorkloadKey("user-b/borrow"), Millis(0))
    assert (e.state, e.queue, e.position) == ("Pending", QA, 1)
    assert e.reason is not None and e.reason.code == "QuotaExceeded"
    assert e.reason.message == "root cpu 70 used + 40 requested > max 100 x 1.0"
    assert [line.what for line in e.history] == [
        "observed",
        "Admitted",
        "observed",
        "Preempted",
        "observed",
        "Released",
    ]
    preempted = e.history[3]
    assert preempted.reason is not None and preempted.reason.code == "Reclaim"
    assert e.reclaim is not None and not e.reclaim.possible
    assert "min 60" in e.reclaim.detail
    text = explain.render_explain_table(e)
    assert "Preempted" in text and "Reclaim: user-c/urgent reclaims" in text


def test_explain_the_preemptor_shows_whom_it_preempted() -> None:
    e = explain.explain(
        walkthrough_reclaim().history(), EngineConfig(), WorkloadKey("user-c/urgent"), Millis(0)
    )
    assert e.state == "Admitted" and e.reclaim is None
    assert [line.what for line in e.history] == ["observed", "preempts", "Admitted"]


def _rejected(key: str) -> WorkloadRejected:
    error = FieldError(
        path="spec.template.spec.containers[0].resources.requests.cpu",
        code="invalid-quantity",
        message="quantity 'ten' is not Kubernetes notation",
    )
    return WorkloadRejected(workload=WorkloadKey(key), kind="batch/v1/Job", errors=[error])


@pytest.mark.parametrize("observed_first", [False, True])
def test_explain_a_rejected_job_that_still_exists_says_rejected(observed_first: bool) -> None:
    # Issue 14 item 8: it said Deleted (the engine never queued it, or forgot nothing).
    log = Log().tree()
    if observed_first:
        log.job(1, "user-a/bad", 10)
    log.add(2, _rejected("user-a/bad"))
    e = explain.explain(log.history(), EngineConfig(), WorkloadKey("user-a/bad"), Millis(0))
    assert e.state == "Rejected"
    assert e.reason is not None and e.reason.code == "Rejected"
    assert e.reason.message == (
        "spec.template.spec.containers[0].resources.requests.cpu: quantity 'ten' is not "
        "Kubernetes notation [invalid-quantity]"
    )
    assert e.queue is None and e.reclaim is None
    assert [line.what for line in e.history][-1] == "rejected"
    assert "user-a/bad  Rejected" in explain.render_explain_table(e)


def test_explain_a_rejected_job_then_deleted_or_fixed() -> None:
    log = (
        Log()
        .tree()
        .add(1, _rejected("user-a/bad"))
        .add(2, WorkloadDeleted(workload=WorkloadKey("user-a/bad")))
    )
    e = explain.explain(log.history(), EngineConfig(), WorkloadKey("user-a/bad"), Millis(0))
    assert e.state == "Deleted"
    log.job(3, "user-a/bad", 10)
    e = explain.explain(log.history(), EngineConfig(), WorkloadKey("user-a/bad"), Millis(0))
    assert e.state == "Pending" and e.queue is not None


def test_explain_names_a_zone_no_dequeuer_serves() -> None:
    log = Log().tree().add(0.5, ZoneServed(zone=Zone("default")))
    log.add(
        1,
        WorkloadObserved(
            workload=WorkloadKey("user-c/zoned"),
            namespace="user-c",
            name="zoned",
            kind="batch/v1/Job",
            zone=Zone("zzz"),
            created_ms=Millis(BASE_MS + 1000),
            pod_sets=[PodSet(name="main", count=1, requests={"cpu": CPU})],
        ),
    )
    e = explain.explain(log.history(), EngineConfig(), WorkloadKey("user-c/zoned"), Millis(0))
    assert e.state == "Pending"
    assert e.reason is not None and e.reason.code == "ZoneNotServed"
    assert "(served zones: default)" in e.reason.message


def test_explain_a_workload_that_may_reclaim_leaves_the_engine_unchanged() -> None:
    log = Log().tree().job(1, "user-a/big", 100).admitted(1.1, "user-a/big", 100)
    log.job(2, "user-c/want", 10)
    now = Millis(BASE_MS + 3000)
    e = explain.explain(log.history(), EngineConfig(), WorkloadKey("user-c/want"), now)
    assert e.reclaim is not None and e.reclaim.possible
    assert [(v.workload, v.reason.code) for v in e.reclaim.victims] == [("user-a/big", "Reclaim")]

    def engine() -> Engine:
        built = Engine(EngineConfig())
        history.fold(built, log.history().items)
        return built

    previewed, untouched = engine(), engine()
    why, victims = previewed.reclaim_preview(WorkloadKey("user-c/want"), Millis(BASE_MS + 3000))
    assert why is None and len(victims) == 1
    assert previewed.jobs() == untouched.jobs()
    assert previewed.queues() == untouched.queues()
    assert previewed.quota_used() == untouched.quota_used()
    now = Millis(BASE_MS + 4000)
    assert previewed.decide(now) == untouched.decide(now)


@pytest.mark.parametrize(
    ("log", "key", "why"),
    [
        (walkthrough_round(), "user-a/first", "not waiting"),
        (walkthrough_round().job(3, "user-a/tiny", 1), "user-a/tiny", "fits without preempting"),
        (walkthrough_round(), "user-a/second", "within-quota preemption is Never"),
    ],
)
def test_reclaim_preview_says_why_not(log: Log, key: str, why: str) -> None:
    engine = Engine(EngineConfig())
    history.fold(engine, log.history().items)
    reason, victims = engine.reclaim_preview(WorkloadKey(key), Millis(BASE_MS + 10_000))
    assert reason is not None and why in reason and victims == []


def test_admission_shortfall_sets_a_held_preemptors_own_hold_aside() -> None:
    engine = Engine(EngineConfig())
    items = walkthrough_reclaim().history().items
    history.fold(engine, items[:9])  # preempted, victim not seen stopped yet
    urgent = WorkloadKey("user-c/urgent")
    assert engine.admission_shortfall(urgent, B, {"cpu": 10 * CPU}) is None
    other = engine.admission_shortfall(WorkloadKey("user-a/big"), A, {"cpu": 40 * CPU})
    # The victim's pods may still run: its usage counts on its own department until released.
    assert other is not None and other.code == "QuotaExceeded" and other.node == A
    history.fold(engine, items[9:10])  # its Released: stopped; the preemptor is not admitted yet
    assert engine.admission_shortfall(urgent, B, {"cpu": 10 * CPU}) is None
    other = engine.admission_shortfall(WorkloadKey("user-a/big"), A, {"cpu": 40 * CPU})
    assert other is not None and other.code == "HeldForPreemptor" and other.blocker == urgent


def test_explain_a_deleted_and_an_unknown_workload() -> None:
    log = walkthrough_round().add(3, WorkloadDeleted(workload=WorkloadKey("user-a/second")))
    e = explain.explain(log.history(), EngineConfig(), WorkloadKey("user-a/second"), Millis(0))
    assert e.state == "Deleted" and e.history[-1].what == "deleted"
    with pytest.raises(explain.UnknownWorkload):
        explain.explain(log.history(), EngineConfig(), WorkloadKey("user-a/nobody"), Millis(0))
