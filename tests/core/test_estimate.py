"""``usher.core.estimate``: a pending job's estimated start, table by table."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from schemas import Millis, QueueName, QuotaPath, WorkloadKey
from usher.core.estimate import (
    Estimate,
    Waiting,
    describe,
    estimate_starts,
    estimates_on_arrival,
    quantile,
    remaining,
    slot_starts,
)
from usher.core.usage import Interval

S = 1000
NOW = Millis(1_000_000)
QA, QB = QueueName("qa"), QueueName("qb")
LEAF_A, LEAF_B = QuotaPath("root/D/A"), QuotaPath("root/D/B")
OTHER = QuotaPath("root/E/C")


def ran(queue: QueueName, seconds: int, leaf: QuotaPath = LEAF_A, name: str = "") -> Interval:
    """An ended run of ``seconds`` (long before now)."""
    return Interval(
        workload=WorkloadKey(f"ns/{name or f'r{seconds}'}"),
        quota=leaf,
        queue=queue,
        requests={"cpu": 1000},
        start_ms=Millis(0),
        end_ms=Millis(seconds * S),
    )


def runs(leaf: QuotaPath, seconds_ago: int, name: str, queue: QueueName = QA) -> Interval:
    """A run still open, started ``seconds_ago``."""
    return Interval(
        workload=WorkloadKey(f"ns/{name}"),
        quota=leaf,
        queue=queue,
        requests={"cpu": 1000},
        start_ms=Millis(NOW - seconds_ago * S),
    )


FOUR = [ran(QA, s, name=f"a{s}") for s in (60, 120, 180, 240)]
"""Four runs of qa: p25 60 s, p50 120 s, p75 180 s."""


def wait(position: int, node: QuotaPath | None = None, queue: QueueName = QA) -> Waiting:
    leaf = LEAF_A if queue == QA else LEAF_B
    return Waiting(
        workload=WorkloadKey("ns/me"), queue=queue, leaf=leaf, position=position, node=node
    )


@dataclass
class Case:
    name: str
    waiting: Waiting
    intervals: list[Interval]
    start_s: tuple[int, int, int] | None
    """(p25, p50, p75) seconds from now; None: unknown."""
    basis: str
    more: list[Waiting] = field(default_factory=list)


CASES = [
    Case(
        "first in line, one running 30 s: its remaining time at each quantile",
        wait(1),
        [*FOUR, runs(LEAF_A, 30, "x")],
        (30, 90, 150),
        "0 ahead in qa, 1 running under root/D/A; 4 runs of queue qa: p25 60s, p50 2m, p75 3m",
    ),
    Case(
        "third in line, two running: each one ahead takes the slot that frees first",
        wait(3),
        [*FOUR, runs(LEAF_A, 30, "x"), runs(LEAF_A, 90, "y")],
        # p50: x (30 s in) has 120 - 30 left; y (90 s in) has 180 - 90 (p50 of 120, 180, 240):
        # #1 takes x's slot at 90, #2 y's at 90, and #3 the first again at 90 + 120 = 210.
        (90, 210, 330),
        "2 ahead in qa, 2 running under root/D/A",
    ),
    Case(
        "a run longer than every run on record ends any moment now",
        wait(1),
        [*FOUR, runs(LEAF_A, 600, "old")],
        (0, 0, 0),
        "0 ahead in qa",
    ),
    Case(
        "what runs under the limiting node counts, in any of its leaves; elsewhere it does not",
        wait(1, node=QuotaPath("root/D")),
        [*FOUR, runs(LEAF_B, 30, "sibling", queue=QB), runs(OTHER, 10, "elsewhere")],
        (30, 90, 150),
        "1 running under root/D;",
    ),
    Case(
        "a queue with too few runs of its own uses every queue's",
        wait(1, queue=QB),
        [*FOUR, ran(QB, 100), runs(LEAF_B, 40, "z", queue=QB)],
        # every run: 60,100,120,180,240 -> p25 rank 2 (100), p50 rank 3 (120), p75 rank 4 (180)
        (60, 80, 140),
        "5 runs of every queue (1 of qb)",
    ),
    Case(
        "too few runs on the whole log: unknown, saying how many",
        wait(1),
        [ran(QA, 60), ran(QB, 90), runs(LEAF_A, 5, "x")],
        None,
        "unknown: 2 runs have ended on the log, 3 are needed",
    ),
    Case(
        "nothing runs on its path: no end to wait for",
        wait(1),
        [*FOUR, runs(OTHER, 10, "elsewhere")],
        None,
        "unknown: nothing runs under root/D/A whose end would make room",
    ),
    Case(
        "the next pass admits it: now",
        Waiting(
            workload=WorkloadKey("ns/me"),
            queue=QA,
            leaf=LEAF_A,
            position=1,
            admitted_next=True,
        ),
        [],
        (0, 0, 0),
        "the next decision pass admits it",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_estimate(case: Case) -> None:
    found = estimate_starts(NOW, [case.waiting, *case.more], case.intervals)
    estimate = found[case.waiting.workload]
    assert case.basis in estimate.basis
    if case.start_s is None:
        assert not estimate.known
        assert (estimate.early_ms, estimate.start_ms, estimate.late_ms) == (None, None, None)
        assert describe(estimate) == estimate.basis
        return
    early, mid, late = (NOW + s * S for s in case.start_s)
    assert (estimate.early_ms, estimate.start_ms, estimate.late_ms) == (early, mid, late)


def test_every_position_of_a_queue_from_one_pass_and_in_order() -> None:
    waiting = [
        Waiting(workload=WorkloadKey(f"ns/w{p}"), queue=QA, leaf=LEAF_A, position=p)
        for p in (4, 1, 3, 2)
    ]
    found = estimate_starts(NOW, waiting, [*FOUR, runs(LEAF_A, 30, "x")])
    starts = [found[WorkloadKey(f"ns/w{p}")].start_ms for p in (1, 2, 3, 4)]
    assert starts == [NOW + s * S for s in (90, 210, 330, 450)]
    # Deterministic: the same inputs in another order give the same answers.
    assert estimate_starts(NOW, list(reversed(waiting)), [*FOUR, runs(LEAF_A, 30, "x")]) == found


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([5], 25, 5), ([1, 2, 3, 4], 25, 1), ([1, 2, 3, 4], 50, 2), ([1, 2, 3, 4], 75, 3),
     ([1, 2, 3, 4, 5], 50, 3), ([1, 2, 3, 4, 5], 75, 4), ([1, 2, 3, 4, 5], 100, 5)],
)  # fmt: skip
def test_quantile_is_the_nearest_rank(values: list[int], q: int, expected: int) -> None:
    assert quantile(values, q) == expected


def test_remaining_and_slots() -> None:
    assert remaining([60, 120, 180], 100, 50) == 20  # of 120 and 180: rank 1 -> 120 - 100
    assert remaining([60, 120, 180], 200, 50) == 0
    assert slot_starts([10, 40], 100, 4) == [10, 40, 110, 140]


def test_describe() -> None:
    known = Estimate(
        start_ms=Millis(60_000), early_ms=Millis(0), late_ms=Millis(120_000), basis="b"
    )
    assert describe(known) == (
        "1970-01-01T00:01:00.000Z (p25 1970-01-01T00:00:00.000Z, p75 1970-01-01T00:02:00.000Z)"
    )
    assert describe(None) == "-"


def test_estimates_on_arrival_fold_the_log_up_to_each_creation() -> None:
    from tests.builders.log import BASE_MS, Log
    from usher.core.config import EngineConfig

    log = Log().tree(0)
    for number, (start, length) in enumerate([(1, 30), (2, 60), (3, 90)]):
        key = f"user-a/r{number}"
        log = log.job(start, key, 10).admitted(start + 0.1, key, 10)
        log = log.released(start + length, key, 10, "Finished")
    log = log.job(100, "user-a/first", 60).admitted(100.1, "user-a/first", 60)
    log = log.job(101, "user-a/second", 60)
    found = estimates_on_arrival(log.history().items, EngineConfig())
    # The first run arrived to an empty tree: it fits, so "now"; too few runs for the rest then.
    at, first = found[WorkloadKey("user-a/r0")]
    assert (at, first.start_ms, first.basis) == (
        BASE_MS + 1000,
        at,
        "the next decision pass admits it",
    )
    at, second = found[WorkloadKey("user-a/second")]
    assert at == BASE_MS + 101_000
    # first (60 cpu) has run 0.9 s: p50 of the runs longer than that is 59.9 s.
    assert second.start_ms == at + 59_900 - 900
    assert "0 ahead in root-department-a-user-a, 1 running under root/Department-a" in second.basis
