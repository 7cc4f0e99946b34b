"""A reclaim's ``Preempted`` are one decision on the log even with another service's entry
between them (``log_groups``), and only then.

The ledger's relay publishes a reclaim's victims one message each; the watcher or a dequeuer
publishing at the same instant can land between two of them (in 20 two-zone end-to-end runs,
8 of 7,428 multi-row ledger transactions). Checked alone, the first part of such a reclaim
"would not fit without these victims": the invariant checker and the audit reported a
justified preemption as refused.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from schemas import Preempted
from tests.builders.log import B, Log
from usher.core.history import invariants
from usher.core.history.replayer import log_groups
from usher.core.model.config import EngineConfig


def borrowed_root() -> Log:
    """user-c's v1 (30), v2 (30) and v3 (20) borrow 40 of Department-b's 40 guarantee over
    Department-a's room; user-a/pre asks 40 within Department-a's 60: it needs v1 and v2.
    Seq 1-10."""
    log = Log().tree(0).job(1, "user-a/a1", 20).admitted(1.1, "user-a/a1", 20)
    for at, key, cpu in ((2, "user-c/v1", 30), (3, "user-c/v2", 30), (4, "user-c/v3", 20)):
        log.job(at, key, cpu).admitted(at + 0.1, key, cpu, B)
    return log.job(5, "user-a/pre", 40)


def in_a_row() -> Log:
    return (
        borrowed_root()
        .preempted(6, "user-c/v1", "user-a/pre", B)
        .preempted(6, "user-c/v2", "user-a/pre", B)
    )


def observation_between() -> Log:
    """The watcher's entry for a new job lands between the two victims (seq 12)."""
    return (
        borrowed_root()
        .preempted(6, "user-c/v1", "user-a/pre", B)
        .job(6, "user-a/late", 1)
        .preempted(6, "user-c/v2", "user-a/pre", B)
    )


def release_between() -> Log:
    """A ledger entry between them: two decisions, the first refused on its own (seq 11)."""
    return (
        borrowed_root()
        .preempted(6, "user-c/v1", "user-a/pre", B)
        .released(6, "user-a/a1", 20, "Finished")
        .preempted(6, "user-c/v2", "user-a/pre", B)
    )


CASES: list[tuple[str, Callable[[], Log], list[list[str]], list[tuple[int | None, str]]]] = [
    ("in a row", in_a_row, [["v1", "v2"]], []),
    ("observation between", observation_between, [["v1", "v2"], ["late"]], []),
    ("release between", release_between, [["v1"], ["a1"], ["v2"]], [(11, "preemption-refused")]),
]


@pytest.mark.parametrize(("case", "build", "tail", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_reclaim_is_one_group_whatever_other_services_published_between(
    case: str,
    build: Callable[[], Log],
    tail: list[list[str]],
    expected: list[tuple[int | None, str]],
) -> None:
    items = build().history().items
    groups = list(log_groups(items))
    first = next(n for n, g in enumerate(groups) if isinstance(g[0].event, Preempted))
    names = [
        [str(getattr(i.event, "workload", "")).split("/")[1] for i in g] for g in groups[first:]
    ]
    assert names == tail
    # Every entry exactly once, and the groups keep the log's order but for the moved entry.
    assert sorted(i.seq for g in groups for i in g) == [i.seq for i in items]
    found = invariants.check_log(items, EngineConfig(), at_end=False)
    assert [(v.seq, v.check) for v in found] == expected, invariants.render_violations(found)
