"""The log-level invariant checker on logs built by hand (pure core, no servers).

Each case is a log as the services would record it (or as a bug would), and exactly the
violations the checker must report: ``(seq, check)``, or ``(workload, check)`` for the
end-of-log check.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import pytest

from schemas import Admitted, QuotaPath, QuotaTreeApplied, WorkloadKey, Zone
from tests.builders.log import CPU, QA, QB, Log, walkthrough_reclaim, walkthrough_round
from tests.builders.trees import two_leaf_tree
from usher.core.history import audit, invariants
from usher.core.model.config import EngineConfig, ReadinessPolicy

A = QuotaPath("root/Department-a")
B = QuotaPath("root/Department-b")
ROOT = QuotaPath("root")

Expected = list[tuple[int | str, str]]


def reclaim_start() -> Log:
    """user-c/victim borrows 10 of Department-a's guarantee; user-a/pre asks 8 within its min.

    Seq 1-10; the victim is preempted for pre at seq 10 and still runs.
    """
    return (
        Log()
        .tree(0)
        .job(1, "user-a/a1", 50)
        .admitted(1.1, "user-a/a1", 50)
        .job(2, "user-c/victim", 50)
        .admitted(2.1, "user-c/victim", 50, B)
        .job(2.2, "user-c/victim", 50, suspended=False)
        .job(3, "user-a/pre", 8)
        .job(3.1, "user-c/other", 16)
        .job(3.2, "user-a/a1", 50, suspended=False)
        .preempted(4, "user-c/victim", "user-a/pre", B)
    )


def victim_stops(log: Log, at: float = 5) -> Log:
    """The victim is seen suspended, then the ledger releases it."""
    return log.job(at, "user-c/victim", 50, suspended=True).released(
        at + 0.1, "user-c/victim", 50, "Preempted", B
    )


def over_commit_while_the_victim_stops() -> Log:
    # Today's bug: the rest of the victim's quota goes to another job before it has stopped.
    log = victim_stops(reclaim_start().admitted(4.1, "user-c/other", 16, B))
    return log.admitted(5.2, "user-a/pre", 8)


def victim_released_first() -> Log:
    log = victim_stops(reclaim_start())
    return log.admitted(5.2, "user-a/pre", 8).admitted(5.3, "user-c/other", 16, B)


def admitted_again(log: Log, at: float, key: str, cpu: int, quota: QuotaPath = A) -> Log:
    """Another ``Admitted`` of ``key``: a new allocation, so a new event id."""
    event = Admitted(
        workload=WorkloadKey(key),
        queue=QA if quota == A else QB,
        quota=quota,
        zone=Zone("default"),
        requests={"cpu": cpu * CPU},
    )
    return log.add(at, event, id=f"ledger:admitted:{key}:{len(log.entries) + 100}")


def readmitted_while_preempted() -> Log:
    return admitted_again(reclaim_start(), 4.1, "user-c/victim", 50, B)


def admitted_twice() -> Log:
    return admitted_again(walkthrough_round(), 3, "user-a/first", 60)


def readmitted_after_release() -> Log:
    log = victim_released_first()
    log.finished(6, "user-a/pre").released(6.1, "user-a/pre", 8, "Finished")
    log.finished(6.2, "user-a/a1").released(6.3, "user-a/a1", 50, "Finished")
    return admitted_again(log, 7, "user-c/victim", 50, B)


def tree_shrinks_then_admits(key: str, quota: QuotaPath) -> Log:
    log = Log().tree(0).job(1, "user-a/x", 60).admitted(1.1, "user-a/x", 60)
    # seq 4: A now caps at 50 (a tree T1 accepts: min 40), x keeps 60
    shrunk = two_leaf_tree(
        ("user-a", "user-b"),
        ("user-c",),
        names=("Department-a", "Department-b"),
        a_min=40,
        a_max=50,
    )
    log.add(2, QuotaTreeApplied(root=shrunk))
    return log.job(3, key, 5).admitted(4, key, 5, quota)  # seq 5, 6


def unjustified_preemption() -> Log:
    return (
        Log()
        .tree()
        .job(1, "user-a/small", 30)
        .admitted(1.1, "user-a/small", 30)
        .job(2, "user-c/want", 10)
        .preempted(3, "user-a/small", "user-c/want")
    )


READY_60 = EngineConfig(readiness=ReadinessPolicy(timeout_ms=60_000))


def stuck_gang(requeue_at: float = 70, ready: int = 1) -> Log:
    """user-a/x (60 cpu, 4 pods) admitted at 1.1, ``ready`` of 4 pods ready at 30; requeued
    at ``requeue_at`` (seq 7) for not being ready (R10)."""
    return (
        Log()
        .tree()
        .job(1, "user-a/x", 60, pods=4)
        .admitted(1.1, "user-a/x", 60)
        .job(1.2, "user-a/x", 60, suspended=False, pods=4)
        .progress(30, "user-a/x", ready, 4)
        .job(40, "user-c/y", 60)
        .requeued(requeue_at, "user-a/x", 60)
    )


def stuck_gang_stops(log: Log, at: float = 71) -> Log:
    """x is seen suspended and released; user-c/y takes the quota after that."""
    return (
        log.job(at, "user-a/x", 60, suspended=True, pods=4)
        .released(at + 0.1, "user-a/x", 60, "Preempted")
        .admitted(at + 1, "user-c/y", 60, B)
    )


CASES: list[tuple[str, Callable[[], Log], EngineConfig, Expected]] = [
    (
        "a stuck gang requeued after its deadline; another job takes its quota once released",
        lambda: stuck_gang_stops(stuck_gang()),
        READY_60,
        [],
    ),
    (
        "a requeue before the ready deadline",
        lambda: stuck_gang_stops(stuck_gang(requeue_at=50)),
        READY_60,
        [(7, "requeue-unjustified")],
    ),
    (
        "a requeue of a gang whose pods were all ready",
        lambda: stuck_gang_stops(stuck_gang(ready=4)),
        READY_60,
        [(7, "requeue-unjustified")],
    ),
    (
        "a requeue without a ready timeout",
        lambda: stuck_gang_stops(stuck_gang()),
        EngineConfig(),
        [(7, "requeue-unjustified")],
    ),
    (
        "its quota given away while the requeued gang still stops",
        lambda: (
            stuck_gang()
            .admitted(70.5, "user-c/y", 60, B)
            .job(71, "user-a/x", 60, suspended=True, pods=4)
            .released(71.1, "user-a/x", 60, "Preempted")
        ),
        READY_60,
        [(8, "over-commit")],
    ),
    (
        "over-commit at the root while a preempted victim has not stopped",
        over_commit_while_the_victim_stops,
        EngineConfig(),
        [(11, "over-commit")],
    ),
    (
        "the same log with the victim released before the admission",
        victim_released_first,
        EngineConfig(),
        [],
    ),
    ("a walkthrough reclaim as recorded", walkthrough_reclaim, EngineConfig(), []),
    ("admitted twice while live", admitted_twice, EngineConfig(), [(6, "already-admitted")]),
    (
        "a preempted victim admitted again before its Released",
        readmitted_while_preempted,
        EngineConfig(),
        [(11, "already-admitted")],
    ),
    ("re-admitted after its Released", readmitted_after_release, EngineConfig(), []),
    (
        "a tree shrink below usage is no finding by itself, nor an admission elsewhere",
        lambda: tree_shrinks_then_admits("user-c/y", B),
        EngineConfig(),
        [],
    ),
    (
        "an admission that adds to a node above its new max",
        lambda: tree_shrinks_then_admits("user-a/z", A),
        EngineConfig(),
        [(6, "over-commit")],
    ),
    (
        "the cap is max x oversellRate",
        lambda: Log().tree().job(1, "user-a/x", 150).admitted(1.1, "user-a/x", 150),
        EngineConfig(oversell_rate=Fraction(3, 2)),
        [],
    ),
    (
        "one cpu over max x oversellRate, on the leaf and the root",
        lambda: (
            Log()
            .tree()
            .job(1, "user-a/x", 150)
            .admitted(1.1, "user-a/x", 150)
            .job(2, "user-a/y", 1)
            .admitted(2.1, "user-a/y", 1)
        ),
        EngineConfig(oversell_rate=Fraction(3, 2)),
        [(5, "over-commit"), (5, "over-commit")],
    ),
    (
        "an unjustified Preempted",
        unjustified_preemption,
        EngineConfig(),
        # At the end the victim, which nothing stops, waits and was never released.
        [(5, "preemption-refused"), ("user-a/small", "stuck"), ("user-a/small", "never-released")],
    ),
    (
        "a preemption within the minimum runtime",
        walkthrough_reclaim,
        EngineConfig(min_runtime_ms=60_000),
        [(8, "preemption-refused")],
    ),
    ("a pending workload blocked by quota at the end", walkthrough_round, EngineConfig(), []),
    (
        "a pending workload that fits at the end is stuck",
        lambda: walkthrough_round().job(3, "user-c/fits", 10),
        EngineConfig(),
        [("user-c/fits", "stuck")],
    ),
    (
        "a preemptor still held after every victim was released is stuck",
        lambda: victim_stops(reclaim_start()),
        EngineConfig(),
        # user-c/other fits next to the hold: nothing stops it either.
        [("user-a/pre", "stuck"), ("user-c/other", "stuck")],
    ),
    (
        "a finished workload never released",
        lambda: (
            Log()
            .tree()
            .job(1, "user-a/x", 10)
            .admitted(1.1, "user-a/x", 10)
            .finished(2, "user-a/x")
        ),
        EngineConfig(),
        [("user-a/x", "never-released")],
    ),
]


@pytest.mark.parametrize(("case", "build", "config", "expected"), CASES, ids=[c[0] for c in CASES])
def test_the_checker_reports_exactly_the_broken_invariants(
    case: str, build: Callable[[], Log], config: EngineConfig, expected: Expected
) -> None:
    found = invariants.check_log(build().history().items, config)
    got = [(v.seq if v.seq is not None else str(v.workload), v.check) for v in found]
    assert got == expected, invariants.render_violations(found)


def test_an_over_commit_names_the_node_the_numbers_and_the_victim_still_running() -> None:
    [found] = invariants.check_log(
        over_commit_while_the_victim_stops().history().items, EngineConfig()
    )
    assert (found.workload, found.node, found.resource) == ("user-c/other", ROOT, "cpu")
    assert (found.used, found.requested, found.cap) == (100 * CPU, 16 * CPU, 100 * CPU)
    assert found.event_id == "ledger:admitted:user-c/other:3"
    assert "root cpu 100 used + 16 requested > max 100 x 1" in found.message
    assert "user-c/victim (preempted at seq 10)" in found.message


def test_the_end_check_is_optional() -> None:
    log = Log().tree().job(1, "user-a/x", 10).admitted(1.1, "user-a/x", 10)
    items = log.finished(2, "user-a/x").job(3, "user-c/y", 10).history().items
    stuck, unreleased = invariants.check_log(items, EngineConfig())
    assert (stuck.check, stuck.workload, stuck.seq) == ("stuck", "user-c/y", None)
    assert "NotYetEvaluated" in stuck.message
    assert (unreleased.check, unreleased.workload) == ("never-released", "user-a/x")
    assert "Finished" in unreleased.message and "seq 3" in unreleased.message
    assert invariants.check_log(items, EngineConfig(), at_end=False) == []


def test_a_decision_recorded_twice_is_one_decision() -> None:
    # The same Admitted (same event id) twice: the audit reports it as a duplicate; it does
    # not count twice here.
    log = walkthrough_round().admitted(1.15, "user-a/first", 60)
    assert invariants.check_log(log.history().items, EngineConfig()) == []


def test_the_audit_reports_the_invariants_and_the_end_check_only_when_asked() -> None:
    history_ = over_commit_while_the_victim_stops().history()
    checks = [(f.seq, f.check) for f in audit.audit(history_, EngineConfig()).findings]
    # Two independent checks name the same admission: the ledger's rule on the state before
    # it (the victim still counts until released, R7) and the running-usage invariant.
    assert checks == [(11, "over-quota"), (11, "over-commit")]
    stuck = walkthrough_round().job(3, "user-c/fits", 10).history()
    assert audit.audit(stuck, EngineConfig()).findings == []
    [finding] = audit.audit(stuck, EngineConfig(), quiescent=True).findings
    assert (finding.check, finding.decision, finding.workload) == ("stuck", "end", "user-c/fits")


def test_the_audit_finds_a_requeue_and_its_release_justified_by_the_log() -> None:
    """R10 through the audit: the requeue, its release as a stopped victim, the new grant."""
    findings, decisions = audit.audit_log(
        stuck_gang_stops(stuck_gang()).history(), READY_60, quiescent=True
    )
    assert findings == [], findings
    assert decisions == 4  # x admitted, x requeued, x released, y admitted
    early, _ = audit.audit_log(stuck_gang(requeue_at=50).history(), READY_60)
    assert [(f.check, f.seq) for f in early] == [("requeue-unjustified", 7)]
    assert "ready deadline" in early[0].message
