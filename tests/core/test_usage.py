"""Usage accounting (U1): what accrues when, over which window, in which unit, exactly."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import (
    Admitted,
    Millis,
    Preempted,
    QueueName,
    QuotaPath,
    QuotaTreeApplied,
    Reason,
    Released,
    Requeued,
    WorkloadKey,
    Zone,
)
from tests.builders.events import CORE, GI, admitted, observed
from tests.builders.log import BASE_MS, QA, QB, A, B, Log, walkthrough_reclaim
from tests.builders.trees import two_leaf_tree
from usher.core.engine.facade import Engine
from usher.core.history import audit
from usher.core.history.sim import check, load_scenario, run
from usher.core.history.usage import (
    Interval,
    UsageBy,
    UsageFold,
    UsageMeter,
    held_now,
    hours,
    render_usage_csv,
    render_usage_json,
    render_usage_table,
    unit_of,
    unit_seconds,
    usage_report,
    usage_totals,
)
from usher.core.model.config import EngineConfig
from usher.core.model.errors import ScenarioError

S = 1000  # one second in ms
WHY = Reason(code="Reclaim", message="test")


def preempted(key: str, quota: str = "root/A") -> Preempted:
    return Preempted(
        workload=WorkloadKey(key),
        queue=QueueName("q"),
        quota=QuotaPath(quota),
        preemptor=WorkloadKey("ns/other"),
        reason=WHY,
    )


def requeued(key: str, quota: str = "root/A") -> Requeued:
    return Requeued(
        workload=WorkloadKey(key),
        queue=QueueName("q"),
        quota=QuotaPath(quota),
        zone=Zone("default"),
        requests={"cpu": CORE},
        ready=0,
        total=1,
        attempt=1,
        max_attempts=3,
        retry_after_ms=None,
        reason=WHY,
    )


def released(key: str, quota: str = "root/A") -> Released:
    return Released(
        workload=WorkloadKey(key), quota=QuotaPath(quota), requests={"cpu": CORE}, cause="Finished"
    )


def fold(*events: tuple[int, object]) -> list[Interval]:
    usage = UsageFold()
    for at_s, event in events:
        usage.apply(event, Millis(at_s * S))
    return usage.intervals()


def cpu_seconds(totals: dict[tuple[str, str], int], group: str) -> int:
    amount = totals.get((group, "cpu"), 0)
    assert amount % (CORE * S) == 0
    return amount // (CORE * S)


# (what happened, window since..until, now) -> core-seconds on root/A
CASES = [
    pytest.param([(10, admitted("ns/a", 2))], None, 100, 100, 180, id="running-accrues-to-now"),
    pytest.param([(10, admitted("ns/a", 2))], None, 100, 50, 80, id="running-not-past-now"),
    pytest.param(
        [(10, admitted("ns/a", 2)), (30, preempted("ns/a")), (40, released("ns/a"))],
        None,
        100,
        100,
        40,
        id="preempted-ends-at-preemption",
    ),
    pytest.param(
        [(10, admitted("ns/a", 1)), (70, requeued("ns/a")), (90, admitted("ns/a", 1))],
        None,
        100,
        100,
        70,
        id="requeued-ends-then-restarts",
    ),
    pytest.param(
        [(10, admitted("ns/a", 4)), (20, released("ns/a"))], None, 100, 100, 40, id="finished"
    ),
    pytest.param(
        [(10, admitted("ns/a", 4)), (20, released("ns/a"))], 15, 18, 100, 12, id="window-inside"
    ),
    pytest.param(
        [(10, admitted("ns/a", 4)), (20, released("ns/a"))], 20, 30, 100, 0, id="window-after"
    ),
    pytest.param(
        [(10, admitted("ns/a", 4)), (20, released("ns/a"))], 0, 10, 100, 0, id="window-before"
    ),
    pytest.param(
        [(10, admitted("ns/a", 1)), (12, admitted("ns/a", 1)), (20, released("ns/a"))],
        None,
        100,
        100,
        10,
        id="second-admitted-while-live-ignored",
    ),
    pytest.param([(10, released("ns/a"))], None, 100, 100, 0, id="release-of-nothing"),
]


@pytest.mark.parametrize(("events", "since", "until", "now", "expected"), CASES)
def test_what_accrues_when(
    events: list[tuple[int, object]], since: int | None, until: int, now: int, expected: int
) -> None:
    totals = usage_totals(
        fold(*events),
        since_ms=Millis(since * S) if since is not None else None,
        until_ms=Millis(until * S),
        now_ms=Millis(now * S),
    )
    assert cpu_seconds(totals, "root/A") == expected
    assert cpu_seconds(totals, "root") == expected


def test_partial_admission_counts_what_was_admitted() -> None:
    # R11: 6 of 8 pods admitted; the decision's requests already count only those 6.
    partial = Admitted(
        workload=WorkloadKey("ns/t"),
        queue=QueueName("q"),
        quota=QuotaPath("root/A"),
        zone=Zone("default"),
        requests={"nvidia.com/gpu": 6},
        pod_counts={"main": 6},
    )
    totals = usage_totals(
        fold((0, partial)), since_ms=None, until_ms=Millis(3600 * S), now_ms=Millis(3600 * S)
    )
    assert totals[("root/A", "nvidia.com/gpu")] == 6 * 3600 * S
    assert hours("nvidia.com/gpu", totals[("root/A", "nvidia.com/gpu")]) == 6


@pytest.mark.parametrize(
    ("by", "groups"),
    [
        (UsageBy.NODE, {"root", "root/A", "root/A/x", "root/B"}),
        (UsageBy.QUEUE, {"qa", "qb"}),
        (UsageBy.NAMESPACE, {"team-1", "team-2"}),
    ],
)
def test_groupings(by: UsageBy, groups: set[str]) -> None:
    intervals = fold(
        (0, admitted("team-1/a", 1, quota="root/A/x", queue="qa")),
        (0, admitted("team-2/b", 2, quota="root/B", queue="qb")),
    )
    totals = usage_totals(
        intervals, since_ms=None, until_ms=Millis(10 * S), now_ms=Millis(10 * S), by=by
    )
    assert {group for group, _ in totals} == groups
    # Node: 1 core x 10 s on each of root, root/A, root/A/x; 2 cores x 10 s on root, root/B.
    core_seconds = 70 if by is UsageBy.NODE else 30
    assert sum(totals.values()) == core_seconds * CORE * S


@pytest.mark.parametrize(
    ("resource", "amount_ms", "unit", "shown"),
    [
        ("cpu", 1500 * 3_600_000, "CPU", "1.500"),
        ("memory", 2 * GI * 3_600_000, "GiB", "2.000"),
        ("nvidia.com/gpu", 8 * 1_800_000, "GPU", "4.000"),
        ("pods", 3 * 3_600_000, "pods", "3.000"),
    ],
)
def test_units_for_people(resource: str, amount_ms: int, unit: str, shown: str) -> None:
    assert unit_of(resource)[0] == unit
    assert str(hours(resource, amount_ms)) == shown


def test_unit_seconds_for_counters() -> None:
    assert unit_seconds("cpu", 2 * CORE * 5 * S) == 10.0
    assert unit_seconds("nvidia.com/gpu", 3 * 2 * S) == 6.0


def test_report_renderings() -> None:
    intervals = fold((0, admitted("ns/a", 1, memory_gi=2)), (1800, released("ns/a")))
    report = usage_report(
        intervals, since_ms=None, until_ms=None, now_ms=Millis(7200 * S), by=UsageBy.NAMESPACE
    )
    assert [(r.group, r.resource, r.hours, r.unit) for r in report.rows] == [
        ("ns", "cpu", "0.500", "CPU-hours"),
        ("ns", "memory", "1.000", "GiB-hours"),
    ]
    assert "ns" in render_usage_table(report) and "GiB-hours" in render_usage_table(report)
    assert '"amount_ms": 1800000000' in render_usage_json(report)
    assert render_usage_csv(report).splitlines() == [
        "namespace,resource,amount_ms,hours,unit",
        "ns,cpu,1800000000,0.500,CPU-hours",
        f"ns,memory,{2 * GI * 1800 * S},1.000,GiB-hours",
    ]


# ---------------------------------------------------------------------------- properties

LEAVES = ["root/A/x", "root/A/y", "root/B"]

steps = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=50),  # seconds after the previous step
        st.sampled_from(["admit", "preempt", "requeue", "release"]),
        st.integers(min_value=0, max_value=4),  # which workload
        st.integers(min_value=1, max_value=8),  # cores
    ),
    max_size=40,
)


def play(stream: list[tuple[int, str, int, int]]) -> tuple[list[Interval], int]:
    usage = UsageFold()
    now = 0
    for gap, kind, which, cores in stream:
        now += gap * S
        key = f"ns{which % 2}/w{which}"
        leaf = LEAVES[which % len(LEAVES)]
        event: object = {
            "admit": admitted(key, cores, quota=leaf, queue=f"q{which % len(LEAVES)}"),
            "preempt": preempted(key, leaf),
            "requeue": requeued(key, leaf),
            "release": released(key, leaf),
        }[kind]
        usage.apply(event, Millis(now))
    return usage.intervals(), now


@settings(max_examples=200, deadline=None)
@given(steps, st.lists(st.integers(min_value=0, max_value=2500), min_size=1, max_size=5))
def test_disjoint_windows_add_up_to_their_union(
    stream: list[tuple[int, str, int, int]], cuts: list[int]
) -> None:
    intervals, end = play(stream)
    now = Millis(end + 10 * S)
    bounds = sorted({0, *(c * S for c in cuts)})
    for by in UsageBy:
        union = usage_totals(
            intervals, since_ms=Millis(bounds[0]), until_ms=Millis(bounds[-1]), now_ms=now, by=by
        )
        summed: dict[tuple[str, str], int] = {}
        for since, until in pairwise(bounds):
            part = usage_totals(
                intervals, since_ms=Millis(since), until_ms=Millis(until), now_ms=now, by=by
            )
            for key, amount in part.items():
                summed[key] = summed.get(key, 0) + amount
        assert summed == union


@settings(max_examples=200, deadline=None)
@given(steps, st.integers(min_value=0, max_value=2500))
def test_a_node_is_the_sum_of_its_children(
    stream: list[tuple[int, str, int, int]], until_s: int
) -> None:
    intervals, end = play(stream)
    totals = usage_totals(
        intervals, since_ms=None, until_ms=Millis(until_s * S), now_ms=Millis(end)
    )
    children = {"root": ["root/A", "root/B"], "root/A": ["root/A/x", "root/A/y"]}
    for parent, kids in children.items():
        for resource in ("cpu",):
            assert totals.get((parent, resource), 0) == sum(
                totals.get((kid, resource), 0) for kid in kids
            )
    # Every grouping accounts for the same total: the root's.
    root = totals.get(("root", "cpu"), 0)
    for by in (UsageBy.QUEUE, UsageBy.NAMESPACE):
        grouped = usage_totals(
            intervals, since_ms=None, until_ms=Millis(until_s * S), now_ms=Millis(end), by=by
        )
        assert sum(grouped.values()) == root


# ---------------------------------------------------------------------------- audit: log vs ledger


def ledger_intervals(log: Log, *, borrow_end: float = 3.1) -> list[Interval]:
    """walkthrough_reclaim's allocations as the ledger's rows give them (stamps = envelope
    times)."""

    def at(seconds: float) -> Millis:
        return Millis(BASE_MS + int(seconds * 1000))

    return [
        Interval(
            workload=WorkloadKey("user-a/big"),
            quota=A,
            queue=QA,
            requests={"cpu": 60 * CORE},
            start_ms=at(1.1),
        ),
        Interval(
            workload=WorkloadKey("user-b/borrow"),
            quota=A,
            queue=QA,
            requests={"cpu": 40 * CORE},
            start_ms=at(2.1),
            end_ms=at(borrow_end),
        ),
        Interval(
            workload=WorkloadKey("user-c/urgent"),
            quota=B,
            queue=QB,
            requests={"cpu": 10 * CORE},
            start_ms=at(3.3),
        ),
    ]


def test_audit_usage_agrees_with_the_ledgers_intervals() -> None:
    log = walkthrough_reclaim()
    assert audit.check_usage(log.history(), ledger_intervals(log)) == []
    # The window ends at the last ledger decision on the log: 3.3 s.
    assert audit.usage_until(log.history()) == BASE_MS + 3300


def test_audit_usage_names_node_resource_window_and_workload_where_they_differ() -> None:
    log = walkthrough_reclaim()
    findings = audit.check_usage(log.history(), ledger_intervals(log, borrow_end=3.3))
    assert [(f.check, f.decision) for f in findings] == [("usage-differs", "usage")] * 2
    first, second = (f.message for f in findings)
    assert first.startswith("root cpu from the beginning until 2024-05-01T12:00:03.300Z")
    assert second.startswith("root/Department-a cpu")
    assert "intervals differ for user-b/borrow" in second
    # user-a/big 60 cpu x 2.2 s on both sides; user-b/borrow 40 cpu x 1 s vs x 1.2 s.
    assert "the log says 0.048 CPU-hours (172000000 unit-ms)" in second
    assert "the ledger's intervals 0.050 CPU-hours (180000000 unit-ms)" in second


def test_audit_compares_usage_only_when_the_ledger_gave_its_intervals() -> None:
    log = walkthrough_reclaim()
    rows = audit.LedgerSnapshot(allocations=[], unpublished=[], intervals=[])
    report = audit.audit(log.history(), EngineConfig(), ledger=rows)
    assert "usage-differs" in {f.check for f in report.findings}
    without = audit.LedgerSnapshot(allocations=[], unpublished=[])
    report = audit.audit(log.history(), EngineConfig(), ledger=without)
    assert "usage-differs" not in {f.check for f in report.findings}


# ---------------------------------------------------------------------------- counters


def test_the_meter_counts_from_its_start_and_what_accrued_since_each_reading() -> None:
    meter = UsageMeter(counted_ms=Millis(10 * S))
    meter.apply(admitted("ns/a", 2), Millis(0))  # before the meter started: counted from 10 s
    assert meter.read(Millis(20 * S)) == {
        ("root", "cpu"): 20 * CORE * S,
        ("root/A", "cpu"): 20 * CORE * S,
    }
    meter.apply(admitted("ns/b", 1), Millis(22 * S))
    meter.apply(released("ns/b"), Millis(25 * S))
    assert not meter.fold.closed  # a closed interval is counted at once, not kept
    assert meter.read(Millis(30 * S))[("root/A", "cpu")] == (2 * 10 + 1 * 3) * CORE * S
    assert meter.read(Millis(29 * S)) == {}  # a clock going back counts nothing twice
    meter.apply(preempted("ns/a"), Millis(35 * S))
    assert meter.read(Millis(40 * S))[("root", "cpu")] == 2 * 5 * CORE * S
    assert meter.read(Millis(50 * S)) == {}


def test_a_meter_seeded_from_a_restored_engine_counts_what_already_ran() -> None:
    engine = Engine(EngineConfig())
    engine.apply(QuotaTreeApplied(root=two_leaf_tree()), Millis(0))
    engine.apply(observed("a1", "w", 30), Millis(0))
    engine.apply(admitted("a1/w", 30, quota="root/A", queue="root-a-a1"), Millis(5 * S))
    [held] = held_now(engine)
    assert (held.workload, held.quota, held.queue, held.requests, held.start_ms) == (
        "a1/w",
        "root/A",
        "root-a-a1",
        {"cpu": 30 * CORE},
        5 * S,
    )
    meter = UsageMeter(counted_ms=Millis(10 * S))
    meter.seed([held])
    assert meter.read(Millis(12 * S))[("root/A", "cpu")] == 30 * 2 * CORE * S


class _WalkingMeter(UsageMeter):
    """The reference: each reading sums every open interval (``usage_totals``), as the meter
    did before it kept a per-node rate."""

    def read(self, now_ms: Millis) -> dict[tuple[str, str], int]:
        now = Millis(max(now_ms, self.counted_ms))
        self._add(
            usage_totals(
                self.fold.open.values(), since_ms=self.counted_ms, until_ms=now, now_ms=now
            )
        )
        totals, self.pending = self.pending, {}
        self.counted_ms = now
        return totals


meter_steps = st.lists(
    st.tuples(
        st.sampled_from(["admit", "admit", "release", "preempt", "read", "read", "seed"]),
        st.integers(0, 5),  # which workload
        st.integers(-3, 40),  # seconds: the log's time may run behind the meter's reading
        st.sampled_from(["root/A", "root/B"]),
        st.integers(0, 4),  # cores (0: a request of nothing)
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 20), meter_steps)
def test_the_meter_reads_what_summing_every_open_interval_reads(
    start_s: int, steps: list[tuple[str, int, int, str, int]]
) -> None:
    """Per reading, the kept rate plus the intervals opened since gives exactly what summing
    every open interval gives, whatever the order of openings, closings, seeds and readings
    (a reading at a time before the last one, a decision stamped before the meter started)."""
    ours, walking = UsageMeter(Millis(start_s * S)), _WalkingMeter(Millis(start_s * S))
    for kind, n, at_s, quota, cores in steps:
        key, at = f"ns/w{n}", Millis(at_s * S)
        if kind == "read":
            assert ours.read(at) == walking.read(at)
            continue
        if kind == "seed":
            held = Interval(
                workload=WorkloadKey(key),
                quota=QuotaPath(quota),
                queue=QueueName("q"),
                requests={"cpu": cores * CORE, "memory": cores * GI},
                start_ms=at,
            )
            ours.seed([held])
            walking.seed([held])
            continue
        event: Admitted | Released | Preempted = (
            admitted(key, cores, quota=quota)
            if kind == "admit"
            else released(key, quota)
            if kind == "release"
            else preempted(key, quota)
        )
        ours.apply(event, at)
        walking.apply(event, at)
    assert ours.read(Millis(60 * S)) == walking.read(Millis(60 * S))


# ---------------------------------------------------------------------------- scenario format


def test_a_bad_usage_expectation_names_every_bad_field() -> None:
    data = {
        "name": "bad-usage",
        "expect": {
            "usage": {
                "bogus": 1,
                "node": {"root": {"cpu": "lots", "memory": -1}},
                "queue": {"q": {"cpu": 0.0000001}},
            }
        },
    }
    with pytest.raises(ScenarioError) as caught:
        load_scenario(data, "bad.yaml")
    assert sorted((e.path, e.code) for e in caught.value.errors) == [
        ("expect.usage.at", "missing-at"),
        ("expect.usage.bogus", "unknown-key"),
        ("expect.usage.node.root.cpu", "invalid-number"),
        ("expect.usage.node.root.memory", "invalid-usage"),
        ("expect.usage.queue.q.cpu", "invalid-usage"),
    ]


def test_a_usage_expectation_is_checked_against_the_run() -> None:
    data = {
        "name": "usage",
        "objects": [],
        "expect": {"usage": {"at": 1.5, "namespace": {"a1": {"cpu": 3}}}},
    }
    scenario = load_scenario(data, "u.yaml")
    assert scenario.expect is not None and scenario.expect.usage is not None
    assert scenario.expect.usage.at_ms == 1500
    assert scenario.expect.usage.groups == {UsageBy.NAMESPACE: {"a1": {"cpu": 3 * CORE * S}}}
    assert check(scenario, run(scenario)) == [
        "usage namespace a1 cpu at 1.5: expected 3, got 0 (unit-seconds)"
    ]
