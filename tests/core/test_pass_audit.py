"""The exact audit (D4): recorded passes re-run, and the log's decisions matched against them.

Logs are written by a model dequeuer (the real engine, folding the log and recording each pass
that proposed something, as ``services.dequeuer`` does) and a ledger that grants in the order
asked or refuses; then tampered with: two admissions swapped, a higher-ranked job skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
import pytest

from schemas import (
    DEQUEUER_SOURCE,
    Admitted,
    Envelope,
    EventId,
    Millis,
    PassRan,
    Preempted,
    Requeued,
    WorkloadKey,
    Zone,
)
from tests.builders.log import BASE_MS, CPU, QA, SUBJECTS, A, B, Log
from usher.core.engine.facade import Engine
from usher.core.engine.pass_plan import on_the_log, plan_pass
from usher.core.history import audit
from usher.core.history.pass_audit import audit_passes, proposal_kind, what_differs
from usher.core.model import reasons
from usher.core.model.config import EngineConfig, Policy

ZONE = Zone("default")
SOURCE = f"{DEQUEUER_SOURCE}/{ZONE}"


class Dequeuer:
    """A dequeuer over an in-memory log: folds what is new, decides, records the pass, and
    lets a model ledger grant (in the order asked) all but ``refuse``."""

    def __init__(self, log: Log, replica: str = "r1", policy: Policy = Policy.ROUND) -> None:
        self.log = log
        self.engine = Engine(EngineConfig(zones=frozenset({ZONE}), policy=policy))
        self.applied = 0
        self.replica = replica

    def run_pass(
        self, at: float, refuse: Sequence[str] = (), held: Sequence[str] = ()
    ) -> list[str]:
        """``held``: workloads the ledger holds capacity for (preemptors whose victims have not
        stopped): a reservation of one is answered granted with nothing on the log, as the
        ledger does (its ``Admitted`` comes once the victims stopped, R7)."""
        items = self.log.history().items
        for item in items[self.applied :]:
            self.engine.apply(item.event, item.time_ms)
        self.applied = len(items)
        now = Millis(BASE_MS + int(at * 1000))
        plan = plan_pass(self.engine.decide(now))
        if not plan.proposes:
            return []
        record = PassRan(zone=ZONE, seq=self.applied, now_ms=now, replica=self.replica)
        self.log.add(at, record, source=SOURCE)
        granted: list[str] = []
        for proposal in on_the_log(plan):
            if proposal.workload in refuse:
                self.engine.revert_admission(
                    proposal.workload, reasons.stale_view(proposal.workload, "refused")
                )
                continue
            if proposal.workload not in held:
                self.log.add(at + 0.01, proposal, id=f"ledger:{proposal.workload}:{at}")
            granted.append(f"{proposal_kind(proposal)} {proposal.workload}")
        return granted


def three_fit() -> tuple[Log, Dequeuer]:
    """Three 30-cpu jobs of one queue: one pass admits them in queue order."""
    log = Log().tree().job(1, "user-a/one", 30).job(2, "user-a/two", 30).job(3, "user-a/three", 30)
    dequeuer = Dequeuer(log)
    granted = dequeuer.run_pass(4)
    assert granted == ["Admitted user-a/one", "Admitted user-a/two", "Admitted user-a/three"]
    return log, dequeuer


def ranked() -> tuple[Log, Dequeuer]:
    """A low-priority job first, a high-priority one after: only one fits, the high one."""
    log = Log().tree().job(1, "user-a/low", 60).job(2, "user-a/high", 60, priority=5)
    dequeuer = Dequeuer(log)
    assert dequeuer.run_pass(3) == ["Admitted user-a/high"]
    return log, dequeuer


def checks(log: Log) -> list[tuple[int, str]]:
    found, _ = audit_passes(log.history().items, EngineConfig())
    return [(f.entry.seq, f.check) for f in found]


def swap(log: Log, first: int, second: int) -> None:
    """Exchange the log entries at ``first`` and ``second`` (1-based seqs)."""
    entries = log.entries
    entries[first - 1], entries[second - 1] = entries[second - 1], entries[first - 1]


def replace_event(log: Log, seq: int, event: Admitted) -> None:
    _, envelope = log.entries[seq - 1]
    subject, _ = SUBJECTS.owner(event, event.zone)  # on its own subject: the ledger's
    log.entries[seq - 1] = (subject, msgspec.structs.replace(envelope, event=event))


def admitted(key: str, cpu: int, priority: int = 0) -> Admitted:
    return Admitted(
        workload=WorkloadKey(key),
        queue=QA,
        quota=A,
        zone=ZONE,
        requests={"cpu": cpu * CPU},
        priority=priority,
    )


def test_an_honest_log_matches_every_pass() -> None:
    log, _ = three_fit()
    found, stats = audit_passes(log.history().items, EngineConfig())
    assert found == []
    assert (stats.passes, stats.matched, stats.refused, stats.unrecorded) == (1, 3, 0, 0)


def test_two_admissions_swapped_fail_naming_the_pass() -> None:
    log, _ = three_fit()  # 1 tree, 2-4 jobs, 5 the pass, 6-8 one, two, three
    swap(log, 6, 7)
    found, _ = audit_passes(log.history().items, EngineConfig())
    assert [(f.entry.seq, f.check, f.pass_seq) for f in found] == [(7, "out-of-order", 5)]
    assert "pass at seq 5" in found[0].message
    assert "Admitted user-a/one comes too late: the pass gives it before Admitted user-a/two" in (
        found[0].message
    )


def test_a_higher_ranked_job_skipped_fails_naming_the_pass() -> None:
    log, _ = ranked()  # 1 tree, 2-3 jobs, 4 the pass, 5 high admitted
    replace_event(log, 5, admitted("user-a/low", 60))
    found, _ = audit_passes(log.history().items, EngineConfig())
    assert [(f.entry.seq, f.check) for f in found] == [(5, "not-from-pass")]
    assert "pass at seq 4" in found[0].message
    assert "does not give Admitted user-a/low; it gives Admitted user-a/high" in found[0].message
    # The whole audit reports it too, in the table, under the decision's seq.
    report = audit.audit(log.history(), EngineConfig())
    assert [(f.seq, f.check) for f in report.findings] == [(5, "not-from-pass")]
    assert "re-ran 1 recorded pass exactly" in audit.render_audit_table(report)


def test_a_refusal_is_a_gap_and_the_next_pass_proposes_it_again() -> None:
    log = Log().tree().job(1, "user-a/one", 30).job(2, "user-a/two", 30)
    dequeuer = Dequeuer(log)
    assert dequeuer.run_pass(3, refuse=["user-a/one"]) == ["Admitted user-a/two"]
    assert dequeuer.run_pass(4) == ["Admitted user-a/one"]
    found, stats = audit_passes(log.history().items, EngineConfig())
    assert found == []
    assert (stats.passes, stats.matched, stats.refused) == (2, 2, 1)


def test_a_decision_with_other_requests_differs() -> None:
    log, _ = ranked()
    replace_event(log, 5, admitted("user-a/high", 50, priority=5))
    found, _ = audit_passes(log.history().items, EngineConfig())
    assert [(f.entry.seq, f.check) for f in found] == [(5, "differs")]
    assert "requests {'cpu': 50000}, the pass gives {'cpu': 60000}" in found[0].message


def test_a_pass_record_not_from_its_zones_dequeuer_is_not_believed() -> None:
    log = Log().tree().job(1, "user-a/one", 30)
    log.add(2, PassRan(zone=ZONE, seq=2, now_ms=Millis(BASE_MS + 2000)), source="usher/watcher")
    log.add(2, admitted("user-a/one", 30))
    assert checks(log) == [(3, "bad-pass")]
    _, stats = audit_passes(log.history().items, EngineConfig())
    assert (stats.passes, stats.unrecorded) == (0, 1)


def test_a_log_without_pass_records_is_left_to_the_per_decision_checks() -> None:
    log = Log().tree().job(1, "user-a/one", 30).admitted(2, "user-a/one", 30)
    found, stats = audit_passes(log.history().items, EngineConfig())
    assert found == []
    assert (stats.passes, stats.unrecorded) == (0, 1)


def test_a_reclaim_is_matched_by_its_victims_and_its_preemptor_admitted_later() -> None:
    log = Log().tree().job(1, "user-a/big", 60).job(2, "user-b/borrow", 40)
    dequeuer = Dequeuer(log)
    assert dequeuer.run_pass(2.1) == ["Admitted user-a/big", "Admitted user-b/borrow"]
    log.job(2.2, "user-b/borrow", 40, suspended=False)
    log.job(3, "user-c/urgent", 10, priority=3)
    # Department-b is within its min: it reclaims what Department-a borrows.
    assert dequeuer.run_pass(3.1) == ["Preempted user-b/borrow"]
    # The ledger admits the preemptor once its victim is seen stopped (R7), not in the pass.
    log.job(3.2, "user-b/borrow", 40, suspended=True)
    log.released(3.3, "user-b/borrow", 40, "Preempted")
    log.admitted(3.3, "user-c/urgent", 10, B, priority=3)
    found, stats = audit_passes(log.history().items, EngineConfig())
    assert found == []
    assert (stats.passes, stats.matched, stats.refused) == (2, 3, 0)
    # The victim's Preempted moved before the pass that gives it: the pass before (seq 4) does
    # not give it (and the preemptor's admission then has no reclaim behind it either).
    swap(log, 9, 10)
    found, _ = audit_passes(log.history().items, EngineConfig())
    first = found[0]
    assert (first.entry.seq, first.check, first.pass_seq) == (9, "not-from-pass", 4)


@pytest.mark.parametrize("policy", [Policy.ROUND, Policy.BLOCK])
def test_a_restarted_dequeuer_leaves_held_preemptors_to_the_ledger(policy: Policy) -> None:
    """A new replica rebuilt from the log finds two reclaims of its predecessor whose victims
    still stop: their preemptors hold capacity in the ledger, which admits each once its
    victim is seen stopped (R7), in the order they stop. The new replica's pass must not
    propose them (the ledger would answer "granted" and write nothing, and their ``Admitted``
    would then reach the log out of that pass's order, D4 ``out-of-order``), and under Block
    they do not close their queue: their capacity is theirs already, as for the replica that
    reclaimed it (the job behind them is admitted)."""
    log = Log().tree().job(1, "user-a/big", 50).job(1.1, "user-b/b1", 20).job(1.2, "user-b/b2", 20)
    first = Dequeuer(log, policy=policy)
    assert first.run_pass(2) == ["Admitted user-a/big", "Admitted user-b/b1", "Admitted user-b/b2"]
    for key, cpu in (("user-a/big", 50), ("user-b/b1", 20), ("user-b/b2", 20)):
        log.job(2.1, key, cpu, suspended=False)
    log.job(3, "user-c/u1", 20, priority=3).job(3.05, "user-c/u2", 20, priority=3)
    assert first.run_pass(3.1) == ["Preempted user-b/b2", "Preempted user-b/b1"]
    log.job(3.15, "user-c/small", 5)
    restarted = Dequeuer(log, replica="r2", policy=policy)
    held = ("user-c/u1", "user-c/u2")
    assert restarted.run_pass(3.2, held=held) == ["Admitted user-c/small"]
    assert all(restarted.engine.state.jobs[WorkloadKey(k)].held for k in held)
    # The victims stop in the other order: the ledger admits u2 (b1's) before u1 (b2's).
    for victim, preemptor in (("user-b/b1", "user-c/u2"), ("user-b/b2", "user-c/u1")):
        log.job(3.3, victim, 20, suspended=True)
        log.released(3.4, victim, 20, "Preempted")
        log.admitted(3.4, preemptor, 20, B, priority=3)
    found, stats = audit_passes(log.history().items, EngineConfig(policy=policy))
    assert [f.message for f in found] == []
    assert (stats.passes, stats.matched, stats.refused) == (3, 6, 0)


def test_round_skips_ahead_where_block_holds_the_head() -> None:
    """A Round pass admits the small job behind a head that does not fit; audited as Block,
    the same log fails: the Block rule gives nothing while the head waits."""
    log = (
        Log().tree().job(1, "user-a/first", 30).job(2, "user-a/head", 80).job(3, "user-b/small", 10)
    )
    dequeuer = Dequeuer(log)
    assert dequeuer.run_pass(4) == ["Admitted user-a/first", "Admitted user-b/small"]
    assert audit_passes(log.history().items, EngineConfig(policy=Policy.ROUND))[0] == []
    found, _ = audit_passes(log.history().items, EngineConfig(policy=Policy.BLOCK))
    assert [(f.entry.seq, f.check) for f in found] == [(7, "not-from-pass")]
    assert "does not give Admitted user-b/small; it gives Admitted user-a/first" in (
        found[0].message
    )


def _later_pass_of_another_replica(log: Log) -> None:
    """A restarted dequeuer (a new replica, its engine from the log alone) admits one more."""
    log.job(5, "user-a/four", 10)
    assert Dequeuer(log, replica="r2").run_pass(6) == ["Admitted user-a/four"]


TAMPERED: list[tuple[str, Callable[[Log], None], list[tuple[int, str]]]] = [
    ("honest", lambda log: None, []),
    ("first two swapped", lambda log: swap(log, 6, 7), [(7, "out-of-order")]),
    ("last two swapped", lambda log: swap(log, 7, 8), [(8, "out-of-order")]),
    ("one refused", lambda log: log.entries.pop(6), []),
    (
        "one never proposed",
        lambda log: log.add(4.5, admitted("user-a/four", 10), id="ledger:x:1"),
        [(9, "not-from-pass")],
    ),
    (
        "a pass claiming a later seq",
        lambda log: log.entries.insert(
            5,
            (
                "usher.test.x",
                Envelope(
                    id=EventId("p"),
                    time=log.entries[4][1].time,
                    source=SOURCE,
                    event=PassRan(zone=ZONE, seq=99, now_ms=Millis(BASE_MS)),
                ),
            ),
        ),
        [(6, "bad-pass")],
    ),
    ("a new replica's later pass", _later_pass_of_another_replica, []),
]


@pytest.mark.parametrize(
    ("case", "tamper", "expected"), TAMPERED, ids=[case for case, _, _ in TAMPERED]
)
def test_matching_of_a_tampered_log(
    case: str, tamper: Callable[[Log], None], expected: list[tuple[int, str]]
) -> None:
    log, _ = three_fit()
    tamper(log)
    assert checks(log) == expected


def preempted_by(preemptor: str) -> Preempted:
    """``user-a/v`` preempted for ``preemptor`` (itself when drained)."""
    return Preempted(
        workload=WorkloadKey("user-a/v"),
        queue=QA,
        quota=A,
        preemptor=WorkloadKey(preemptor),
        reason=reasons.stale_view(WorkloadKey(preemptor), "x"),
    )


KINDS: list[tuple[Admitted | Preempted | Requeued, str]] = [
    (admitted("user-a/one", 1), "Admitted"),
    (preempted_by("user-c/p"), "Preempted"),
    (preempted_by("user-a/v"), "Drained"),
    (
        Requeued(
            workload=WorkloadKey("user-a/r"),
            queue=QA,
            quota=A,
            zone=ZONE,
            requests={},
            ready=0,
            total=1,
            attempt=1,
            max_attempts=2,
            retry_after_ms=None,
            reason=reasons.stale_view(WorkloadKey("user-a/r"), "x"),
        ),
        "Requeued",
    ),
]


@pytest.mark.parametrize(("decision", "kind"), KINDS)
def test_proposals_are_matched_by_kind_and_workload(
    decision: Admitted | Preempted | Requeued, kind: str
) -> None:
    assert proposal_kind(decision) == kind
    assert what_differs(decision, decision) is None


@pytest.mark.parametrize(
    ("recorded", "wrong"),
    [
        (admitted("user-a/one", 2), "requests"),
        (msgspec.structs.replace(admitted("user-a/one", 1), zone=Zone("b")), "zone"),
        (msgspec.structs.replace(admitted("user-a/one", 1), pod_counts={"main": 1}), "pod_counts"),
        (msgspec.structs.replace(admitted("user-a/one", 1), priority=9), None),
    ],
)
def test_what_differs_names_the_fields(recorded: Admitted, wrong: str | None) -> None:
    found = what_differs(admitted("user-a/one", 1), recorded)
    assert (found.split(" ")[0] if found else None) == wrong
