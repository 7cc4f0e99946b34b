"""Engine APIs and reasons, table-driven by scenario name."""

from __future__ import annotations

from fractions import Fraction

import pytest

from schemas import (
    Admitted,
    Inadmissible,
    Millis,
    NodeName,
    NodeObserved,
    Preempted,
    PriorityClassObserved,
    QueueName,
    QuotaPath,
    QuotaTreeApplied,
    QuotaTreeRejected,
    Reason,
    Released,
    Unmapped,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    Zone,
    ZoneServed,
)
from schemas.decisions import ReleaseCause
from tests.builders.events import admitted, cpu, observed
from tests.builders.trees import two_leaf_tree
from usher.core.engine.facade import Engine
from usher.core.model.config import EngineConfig, format_rate

A = QuotaPath("root/A")
QA = QueueName("root-a-a1")


def engine_with(*events: object, config: EngineConfig | None = None) -> Engine:
    engine = Engine(config)
    engine.apply(QuotaTreeApplied(root=two_leaf_tree(("a1", "a2"))), Millis(0))
    for event in events:
        engine.apply(event, Millis(0))  # type: ignore[arg-type]
    return engine


def key(text: str) -> WorkloadKey:
    return WorkloadKey(text)


@pytest.mark.parametrize(
    ("name", "config", "jobs", "probe", "code", "fields"),
    [
        (
            "quota-exceeded-names-nearest-node",
            EngineConfig(),
            [("a1", "big", 60, 0), ("a1", "next", 60, 1)],
            "a1/next",
            "QuotaExceeded",
            {
                "node": "root/A",
                "resource": "cpu",
                "used": 60000,
                "requested": 60000,
                "limit": 100000,
                "message": "root/A cpu 60 used + 60 requested > max 100 x 1.0",
            },
        ),
        (
            "oversell-limit-in-reason",
            EngineConfig(oversell_rate=Fraction(3, 2)),
            [("a1", "big", 100, 0), ("a1", "next", 60, 1)],
            "a1/next",
            "QuotaExceeded",
            {"limit": 150000, "message": "root/A cpu 100 used + 60 requested > max 100 x 1.5"},
        ),
        (
            "block-names-the-head",
            EngineConfig(policy="Block"),
            [("a1", "big", 60, 0), ("a1", "head", 60, 1), ("a1", "small", 10, 2)],
            "a1/small",
            "BlockedByHead",
            {"blocker": "a1/head"},
        ),
    ],
)
def test_pending_reasons(
    name: str,
    config: EngineConfig,
    jobs: list[tuple[str, str, int, int]],
    probe: str,
    code: str,
    fields: dict[str, object],
) -> None:
    engine = Engine(config)
    engine.apply(QuotaTreeApplied(root=two_leaf_tree(("a1", "a2"))), Millis(0))
    for namespace, job, cores, created in jobs:
        engine.apply(observed(namespace, job, cores, created=created), Millis(created))
    engine.decide(Millis(5))
    reason = engine.reason(key(probe))
    assert reason is not None, name
    assert reason.code == code, (name, reason)
    for field, value in fields.items():
        assert getattr(reason, field) == value, (name, field, reason)


def test_not_yet_evaluated_before_first_pass_then_a_real_reason() -> None:
    engine = engine_with(observed("a1", "big", 60), observed("a1", "next", 60, created=1))
    reason = engine.reason(key("a1/next"))
    assert reason is not None and reason.code == "NotYetEvaluated"
    engine.decide(Millis(1))
    reason = engine.reason(key("a1/next"))
    assert reason is not None and reason.code == "QuotaExceeded"


def test_every_pending_workload_has_a_reason_after_a_pass() -> None:
    engine = engine_with(
        *[observed("a1", f"j{i}", 30, created=i) for i in range(6)],
        config=EngineConfig(policy="Block"),
    )
    engine.decide(Millis(1))
    for view in engine.jobs().values():
        if view.state == "Pending":
            assert view.reason is not None


def test_unmapped_and_inadmissible_are_emitted_once() -> None:
    engine = engine_with(observed("nowhere", "x", 1), observed("a1", "giant", 500))
    first = engine.decide(Millis(1))
    assert [type(d) for d in first] == [Unmapped, Inadmissible]
    assert engine.decide(Millis(2)) == []
    state = engine.job_state(key("a1/giant"))
    assert state is not None and state.state == "Inadmissible"
    assert state.reason is not None and state.reason.code == "ExceedsMax"


def test_unknown_quota_label_is_unmapped_with_its_own_code() -> None:
    engine = engine_with(observed("a1", "x", 1, quota_name="Nope"))
    engine.decide(Millis(1))
    reason = engine.reason(key("a1/x"))
    assert reason is not None and reason.code == "UnknownQuota"


def test_no_tree_yet_is_unmapped() -> None:
    engine = Engine()
    engine.apply(observed("a1", "x", 1), Millis(0))
    decisions = engine.decide(Millis(0))
    assert isinstance(decisions[0], Unmapped) and decisions[0].reason.code == "NoTree"
    engine.apply(QuotaTreeApplied(root=two_leaf_tree(("a1", "a2"))), Millis(1))
    assert [type(d) for d in engine.decide(Millis(1))] == [Admitted]


def test_rejected_tree_changes_nothing() -> None:
    engine = engine_with(observed("a1", "x", 50))
    engine.apply(QuotaTreeRejected(errors=[]), Millis(1))
    assert [type(d) for d in engine.decide(Millis(1))] == [Admitted]


def test_revert_admission_puts_it_back_at_its_place_with_the_reason() -> None:
    engine = engine_with(observed("a1", "first", 30), observed("a1", "second", 30, created=1))
    engine.decide(Millis(1))
    refused = Reason(code="QuotaExceeded", message="ledger: root cpu over-committed")
    engine.revert_admission(key("a1/first"), refused)
    view = engine.job_state(key("a1/first"))
    assert view is not None and view.state == "Pending" and view.position == 1
    assert view.reason == refused
    assert engine.quota_used()[A] == cpu(30)
    assert [d.workload for d in engine.decide(Millis(2)) if isinstance(d, Admitted)] == ["a1/first"]


def test_foreign_admitted_is_counted_and_idempotent() -> None:
    engine = engine_with(observed("a1", "x", 40))
    admitted = Admitted(
        workload=key("a1/x"), queue=QA, quota=A, zone=Zone("other"), requests=cpu(40)
    )
    engine.apply(admitted, Millis(1))
    engine.apply(admitted, Millis(2))
    assert engine.quota_used()[A] == cpu(40)
    assert engine.quota_used()[QuotaPath("root")] == cpu(40)
    view = engine.job_state(key("a1/x"))
    assert view is not None and view.state == "Admitted"
    assert engine.decide(Millis(3)) == []


def test_foreign_admitted_of_unknown_workload_still_counts() -> None:
    engine = engine_with()
    engine.apply(
        Admitted(workload=key("a2/ghost"), queue=QA, quota=A, zone=Zone("z"), requests=cpu(10)),
        Millis(0),
    )
    assert engine.quota_used()[A] == cpu(10)


def test_zones_filter_decides_only_its_zone_but_counts_others() -> None:
    config = EngineConfig(zones=frozenset({Zone("z1")}))
    engine = engine_with(
        observed("a1", "mine", 30, zone="z1"),
        observed("a1", "theirs", 30, zone="z2", created=1),
        config=config,
    )
    decisions = engine.decide(Millis(1))
    assert [d.workload for d in decisions] == ["a1/mine"]
    other = engine.reason(key("a1/theirs"))
    assert other is not None and "zone z2" in other.message
    engine.apply(
        Admitted(workload=key("a1/theirs"), queue=QA, quota=A, zone=Zone("z2"), requests=cpu(30)),
        Millis(2),
    )
    assert engine.quota_used()[A] == cpu(60)


def test_a_zone_no_dequeuer_serves_is_named_and_decided_once_one_appears() -> None:
    # Issue 14 item 2: an engine deciding for every zone (people's views) admitted a job of a
    # zone nobody serves, so its reason said "fits now" while nothing would ever admit it.
    engine = engine_with(
        ZoneServed(zone=Zone("default")),
        ZoneServed(zone=Zone("east")),
        observed("a1", "zoned", 10, zone="zzz"),
        observed("a1", "plain", 10, created=1),
    )
    decisions = engine.decide(Millis(1))
    assert [d.workload for d in decisions] == ["a1/plain"]
    for why in (engine.reason(key("a1/zoned")), engine.reason_now(key("a1/zoned"))):
        assert why is not None and why.code == "ZoneNotServed"
        assert "zone zzz" in why.message and "served zones: default, east" in why.message
    assert engine.served_zones() == [Zone("default"), Zone("east")]
    engine.apply(ZoneServed(zone=Zone("zzz")), Millis(2))
    assert [d.workload for d in engine.decide(Millis(3))] == ["a1/zoned"]


def test_served_zones_are_unknown_until_the_first_announcement() -> None:
    # A log written before ZoneServed existed: no zone is called unserved.
    engine = engine_with(observed("a1", "zoned", 10, zone="zzz"))
    assert [d.workload for d in engine.decide(Millis(1))] == ["a1/zoned"]


def test_a_dequeuer_serves_its_own_zone_before_its_announcement_is_read() -> None:
    config = EngineConfig(zones=frozenset({Zone("z1")}))
    engine = engine_with(
        ZoneServed(zone=Zone("default")),
        observed("a1", "mine", 10, zone="z1"),
        observed("a1", "lost", 10, zone="z9", created=1),
        config=config,
    )
    assert [d.workload for d in engine.decide(Millis(1))] == ["a1/mine"]
    lost = engine.reason(key("a1/lost"))
    assert lost is not None and lost.code == "ZoneNotServed"


def test_finish_and_delete_release_at_once_in_scenarios() -> None:
    engine = engine_with(
        observed("a1", "x", 40),
        observed("a1", "y", 40, created=1),
        config=EngineConfig(instant_release=True),
    )
    engine.decide(Millis(1))
    released = engine.apply(WorkloadFinished(workload=key("a1/x")), Millis(2))
    assert released == [Released(workload=key("a1/x"), quota=A, requests=cpu(40), cause="Finished")]
    released = engine.apply(WorkloadDeleted(workload=key("a1/y")), Millis(3))
    assert [r.cause for r in released if isinstance(r, Released)] == ["Deleted"]
    assert key("a1/y") not in engine.jobs()
    assert engine.jobs()[key("a1/x")].state == "Finished"
    assert engine.quota_used()[A] == {}


def test_a_finished_or_deleted_workload_counts_until_the_ledger_releases_it() -> None:
    """R7: the ledger frees usage when it reads the event; every engine counts what it counts."""
    engine = engine_with(observed("a1", "x", 40), observed("a1", "y", 40, created=1))
    engine.decide(Millis(1))
    engine.apply(WorkloadFinished(workload=key("a1/x")), Millis(2))
    engine.apply(WorkloadDeleted(workload=key("a1/y")), Millis(3))
    assert engine.jobs()[key("a1/x")].state == "Finished"
    assert key("a1/y") not in engine.jobs()
    assert engine.quota_used()[A] == cpu(80)
    # Nothing new fits on that usage meanwhile, and nobody can be preempted for it.
    engine.apply(observed("a1", "z", 30, created=4), Millis(4))
    assert not [d for d in engine.decide(Millis(4)) if isinstance(d, Admitted)]
    for name, cause in (("x", "Finished"), ("y", "Deleted")):
        engine.apply(
            Released(workload=key(f"a1/{name}"), quota=A, requests=cpu(40), cause=cause),
            Millis(5),
        )
    assert engine.quota_used()[A] == {}
    assert [d.workload for d in engine.decide(Millis(6)) if isinstance(d, Admitted)] == ["a1/z"]


def test_priority_class_event_reorders_pending() -> None:
    engine = engine_with(
        observed("a1", "fill", 100),
        observed("a1", "p", 10, created=1),
        observed("a1", "q", 10, created=2, priority_class="hot"),
    )
    engine.decide(Millis(3))
    assert [e.job for e in engine.queues()[QA]] == ["a1/p", "a1/q"]
    engine.apply(PriorityClassObserved(name="hot", value=7), Millis(4))
    assert [(e.job, e.priority) for e in engine.queues()[QA]] == [("a1/q", 7), ("a1/p", 0)]


def test_reobserving_keeps_state_and_place() -> None:
    engine = engine_with(
        observed("a1", "fill", 100),
        observed("a1", "p", 10, created=1),
        observed("a1", "q", 10, created=2),
    )
    engine.decide(Millis(3))
    engine.apply(observed("a1", "p", 10, created=1), Millis(4))
    engine.apply(observed("a1", "fill", 100), Millis(4))
    assert [e.job for e in engine.queues()[QA]] == ["a1/p", "a1/q"]
    assert engine.jobs()[key("a1/fill")].state == "Admitted"
    assert engine.quota_used()[A] == cpu(100)


def test_next_wakeup_is_the_end_of_min_runtime() -> None:
    engine = Engine(EngineConfig(min_runtime_ms=60_000))
    engine.apply(QuotaTreeApplied(root=two_leaf_tree(("a1", "a2"))), Millis(0))
    engine.apply(observed("a1", "x", 10), Millis(0))
    assert engine.next_wakeup() is None
    engine.decide(Millis(1000))
    assert engine.next_wakeup() == 61_000
    engine.apply(WorkloadFinished(workload=key("a1/x")), Millis(2000))
    assert engine.next_wakeup() is None


def test_zone_capacity_and_no_node_fits_reasons() -> None:
    engine = engine_with(
        observed("a1", "big", 20, count=2), observed("a1", "more", 16, created=1, count=2)
    )
    engine.apply(
        NodeObserved(node=NodeName("n1"), zone=Zone("default"), allocatable=cpu(16)), Millis(0)
    )
    engine.apply(
        NodeObserved(node=NodeName("n2"), zone=Zone("default"), allocatable=cpu(16)), Millis(0)
    )
    engine.decide(Millis(1))
    reason = engine.reason(key("a1/more"))
    assert reason is not None and reason.code == "ZoneCapacity"
    engine.apply(WorkloadFinished(workload=key("a1/big")), Millis(2))
    # The ledger frees it once it read the finish (R7).
    engine.apply(_released("a1/big", 40, "Finished"), Millis(2))
    engine.apply(WorkloadDeleted(workload=key("a1/more")), Millis(2))
    engine.apply(
        NodeObserved(
            node=NodeName("n2"), zone=Zone("default"), allocatable=cpu(32), unschedulable=True
        ),
        Millis(2),
    )
    engine.apply(observed("a1", "wide", 20, created=2), Millis(2))
    engine.apply(
        NodeObserved(node=NodeName("n3"), zone=Zone("default"), allocatable=cpu(8)), Millis(2)
    )
    engine.decide(Millis(3))
    reason = engine.reason(key("a1/wide"))
    assert reason is not None and reason.code == "NoNodeFits"


def test_preempted_reason_names_leaf_resource_and_numbers() -> None:
    engine = engine_with(observed("a1", "base", 60), observed("a1", "borrow", 40, created=1))
    engine.decide(Millis(1))
    engine.apply(observed("b1", "claim", 10, created=2), Millis(2))
    decisions = engine.decide(Millis(2))
    preempted = [d for d in decisions if d.__class__.__name__ == "Preempted"]
    assert len(preempted) == 1
    reason = preempted[0].reason  # type: ignore[union-attr]
    assert reason.code == "Reclaim" and reason.node == "root/A" and reason.resource == "cpu"
    assert "100 used > min 60" in reason.message
    assert engine.reason(key("a1/borrow")) == reason


def test_format_rate() -> None:
    assert [format_rate(Fraction(x)) for x in ("1", "2", "3/2", "1/8", "4/3")] == [
        "1.0",
        "2.0",
        "1.5",
        "0.125",
        "4/3",
    ]


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError):
        EngineConfig(policy="Nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        EngineConfig(oversell_rate=Fraction(0))


def test_reverted_preemptor_holds_the_freed_capacity() -> None:
    engine = engine_with(observed("a1", "base", 60), observed("a1", "borrow", 40, created=1))
    engine.decide(Millis(1))
    engine.apply(observed("b1", "claim", 30, created=2), Millis(2))
    engine.decide(Millis(2))
    # Until the victim is seen stopped, its whole usage counts (the claim carved out of it).
    assert engine.quota_used()[QuotaPath("root")] == cpu(100)
    engine.apply(_stopped("a1/borrow", 40), Millis(2))
    engine.revert_admission(key("b1/claim"), Reason(code="QuotaExceeded", message="ledger"))
    engine.apply(observed("a2", "sneaky", 30, created=3), Millis(3))
    assert engine.quota_used()[QuotaPath("root")] == cpu(90)
    held = engine.reason(key("a2/sneaky"))
    assert held is not None and held.code == "NotYetEvaluated"
    decisions = engine.decide(Millis(4))
    assert [d.workload for d in decisions if isinstance(d, Admitted)] == ["b1/claim"]
    reason = engine.reason(key("a2/sneaky"))
    assert reason is not None and reason.code == "QuotaExceeded"
    assert engine.quota_used()[QuotaPath("root")] == cpu(90)


def test_held_capacity_is_named_as_held_for_preemptor() -> None:
    engine = engine_with(observed("a1", "base", 60), observed("a1", "borrow", 40, created=1))
    engine.decide(Millis(1))
    engine.apply(observed("b1", "claim", 30, created=2), Millis(2))
    engine.apply(observed("a2", "sneaky", 15, created=2), Millis(2))
    engine.decide(Millis(2))
    engine.revert_admission(key("b1/claim"), Reason(code="QuotaExceeded", message="ledger"))
    reason = engine.reason(key("a2/sneaky"))
    # The victim still stops: what blocks a2/sneaky is its usage, which will leave.
    assert reason is not None and reason.code == "VictimsStopping", reason
    assert reason.used == cpu(100)["cpu"] and reason.limit == cpu(100)["cpu"]
    engine.apply(_stopped("a1/borrow", 40), Millis(2))
    reason = engine.reason(key("a2/sneaky"))
    assert reason is not None and reason.code == "HeldForPreemptor", reason
    assert reason.blocker == "b1/claim"


def _reclaim_setup() -> tuple[Engine, list[Preempted]]:
    """A borrows the whole root; B's claim (within its min) reclaims a1/borrow."""
    engine = engine_with(observed("a1", "base", 60), observed("a1", "borrow", 40, created=1))
    engine.decide(Millis(1))
    engine.apply(observed("b1", "claim", 30, created=2), Millis(2))
    decisions = engine.decide(Millis(2))
    return engine, [d for d in decisions if isinstance(d, Preempted)]


def test_check_preemption_accepts_what_the_pass_decided() -> None:
    proposer, victims = _reclaim_setup()
    assert [v.workload for v in victims] == ["a1/borrow"]
    # The preemptor service's projection: the same log, no pass of its own.
    checker = engine_with(observed("a1", "base", 60), observed("a1", "borrow", 40, created=1))
    for decision in proposer.decide(Millis(1)):
        checker.apply(decision, Millis(1))
    checker.apply(admitted("a1/base", 60), Millis(1))
    checker.apply(admitted("a1/borrow", 40), Millis(1))
    checker.apply(observed("b1", "claim", 30, created=2), Millis(2))
    before = checker.quota_used()
    assert checker.check_preemption(key("b1/claim"), [key("a1/borrow")], Millis(3)) is None
    assert checker.quota_used() == before


@pytest.mark.parametrize(
    ("name", "victims", "detail"),
    [
        ("victim-not-admitted", ["a1/ghost"], "a1/ghost is not admitted"),
        ("no-victims", [], "no victims named"),
        ("not-enough-room", ["a1/small"], "would not fit"),
    ],
)
def test_check_preemption_refuses_stale_proposals(
    name: str, victims: list[str], detail: str
) -> None:
    checker = engine_with(
        observed("a1", "base", 60),
        observed("a1", "borrow", 35, created=1),
        observed("a1", "small", 5, created=1),
    )
    for job, cores in (("a1/base", 60), ("a1/borrow", 35), ("a1/small", 5)):
        checker.apply(admitted(job, cores), Millis(1))
    checker.apply(observed("b1", "claim", 30, created=2), Millis(2))
    reason = checker.check_preemption(key("b1/claim"), [key(v) for v in victims], Millis(3))
    assert reason is not None and reason.code == "StaleView" and detail in reason.message, name


def test_check_preemption_refuses_a_victim_that_is_not_borrowing() -> None:
    checker = engine_with(observed("a1", "base", 50), observed("b1", "claim", 30, created=2))
    checker.apply(admitted("a1/base", 50), Millis(1))
    reason = checker.check_preemption(key("b1/claim"), [key("a1/base")], Millis(3))
    assert reason is not None and "not borrowing" in reason.message


def test_revert_preemption_restores_victims_and_frees_the_preemptor() -> None:
    engine, victims = _reclaim_setup()
    used = engine.quota_used()[QuotaPath("root")]
    engine.revert_preemption(key("b1/claim"), victims, Reason(code="StaleView", message="x"))
    state = engine.job_state(key("a1/borrow"))
    assert state is not None and state.state == "Admitted"
    claim = engine.job_state(key("b1/claim"))
    assert claim is not None and claim.state == "Pending"
    assert claim.reason is not None and claim.reason.code == "StaleView"
    # The victim never stopped counting (R7), so the reclaim did not lower root's usage...
    assert used == cpu(100)
    # ...and the revert leaves exactly the state before the pass: no residual, no group.
    assert engine.quota_used()[QuotaPath("root")] == cpu(100)
    assert engine.quota_used()[QuotaPath("root/A")] == cpu(100)
    assert engine.quota_used()[QuotaPath("root/B")] == {}
    assert not engine.state.stops and not engine.stopping


def test_foreign_preemption_holds_capacity_for_its_preemptor() -> None:
    """A Preempted read from the log holds the preemptor's request until its Admitted.

    The engine decides zone ``default`` only; the preemptor lives in zone ``b``.
    """
    engine = engine_with(
        observed("a1", "base", 60),
        observed("a1", "borrow", 40, created=1),
        config=EngineConfig(zones=frozenset({Zone("default")})),
    )
    engine.apply(admitted("a1/base", 60), Millis(1))
    engine.apply(admitted("a1/borrow", 40), Millis(1))
    engine.apply(observed("b1", "claim", 30, created=2, zone="b"), Millis(2))
    engine.apply(observed("a2", "sneaky", 30, created=3), Millis(3))
    engine.apply(
        Preempted(
            workload=key("a1/borrow"),
            queue=QueueName("root-a-a1"),
            quota=QuotaPath("root/A"),
            preemptor=key("b1/claim"),
            reason=Reason(code="Reclaim", message="r"),
        ),
        Millis(4),
    )
    # The victim counts until seen stopped; the claim's hold is carved out of it.
    assert engine.quota_used()[QuotaPath("root")] == cpu(100)
    assert engine.quota_used()[QuotaPath("root/A")] == cpu(100)
    assert engine.quota_used()[QuotaPath("root/B")] == cpu(30)
    engine.apply(_stopped("a1/borrow", 40), Millis(4))
    assert engine.quota_used()[QuotaPath("root")] == cpu(90)
    assert not [d for d in engine.decide(Millis(5)) if isinstance(d, Admitted)]
    reason = engine.reason(key("a2/sneaky"))
    assert reason is not None and reason.code == "HeldForPreemptor"
    engine.apply(admitted("b1/claim", 30, quota="root/B"), Millis(6))
    assert engine.quota_used()[QuotaPath("root")] == cpu(90)


def _released(job: str, cores: int, cause: ReleaseCause, quota: str = "root/A") -> Released:
    return Released(workload=key(job), quota=QuotaPath(quota), requests=cpu(cores), cause=cause)


def _stopped(job: str, cores: int, quota: str = "root/A") -> Released:
    """The ledger's ``Released`` once a preempted victim is seen stopped."""
    return Released(
        workload=key(job), quota=QuotaPath(quota), requests=cpu(cores), cause="Preempted"
    )


def test_zone_relabel_of_an_admitted_workload_moves_its_zone_usage() -> None:
    engine = engine_with(observed("a1", "job", 10, zone="x"))
    engine.decide(Millis(1))
    engine.apply(observed("a1", "job", 10, zone="y"), Millis(2))
    engine.apply(WorkloadFinished(workload=key("a1/job")), Millis(3))
    engine.apply(_released("a1/job", 10, "Finished"), Millis(3))
    assert all(v == 0 for zone in engine.state.zone_used.values() for v in zone.values())
