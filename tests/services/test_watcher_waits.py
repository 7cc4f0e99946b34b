"""What the watcher reads about waiting jobs off a reader's fold of the log
(``services.watcher.waits``): which jobs the budget gate shuts (B1), what names their Event, and
per queue how many wait past their first estimate's upper bound.

The engine is a reader's (``PeopleProjection``'s: it folds the log, decisions included, and
decides nothing), fed the demo's budget story as the running system logs it.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schemas import Millis, QueueName, WorkloadKey
from services.watcher.notify import cloud_event, decision_event
from services.watcher.waits import BudgetWait, budget_waits, estimate_period, past_estimate
from tests.builders.demo import story_request
from tests.cli.test_demo_budget import _cluster, _played
from usher.demo.budget import story_jobs

SPEND, HELD = story_jobs()


def test_the_job_held_by_the_spent_budget_is_the_one_wait() -> None:
    play = _played()
    uids = {WorkloadKey(HELD.key): "uid-held"}
    [wait] = budget_waits(play.state.engine, uids)
    assert wait.decision.workload == HELD.key
    assert wait.decision.position == 1
    assert wait.decision.quota == "root/Department-c"
    assert wait.decision.reason.code == "BudgetExhausted"
    assert wait.decision.reason.message == (
        "0.013 of 0.01 CPU-hours in 1970-01, resets 1970-02-01 (budget of root/Department-c)"
    )
    # Its incarnation, the budget (node, resource, month) and the window's start (1970-01-01).
    assert wait.key == (HELD.key, "uid-held", ("root/Department-c", "cpu", 0), 0)


def test_a_job_waiting_for_a_budget_not_spent_yet_is_no_budget_wait() -> None:
    """The spending job runs (12 of 36 cpu-seconds after a second): the next one waits for
    quota or nothing at all, never for the budget."""
    play = _cluster()
    play.submit(1, story_request(SPEND))
    play.submit(2, story_request(HELD))
    assert budget_waits(play.state.engine, {}) == []


@pytest.mark.parametrize(
    ("other", "same"),
    [
        ((HELD.key, "uid-held", ("root/Department-c", "cpu", 0), 0), True),
        ((HELD.key, "uid-2", ("root/Department-c", "cpu", 0), 0), False),  # a new incarnation
        ((HELD.key, "uid-held", ("root/Department-c", "cpu", 0), 2678400000), False),  # Feb
        ((HELD.key, "uid-held", ("root/Department-c", "cpu", 7), 0), False),  # a 7d budget
    ],
)
def test_one_event_name_per_wait(other: tuple, same: bool) -> None:  # type: ignore[type-arg]
    [wait] = budget_waits(_played().state.engine, {WorkloadKey(HELD.key): "uid-held"})
    again = BudgetWait(key=other, decision=wait.decision)
    assert (again.event_name == wait.event_name) is same
    assert wait.event_name.startswith(f"{HELD.name}.budget-")


def test_the_wait_is_told_as_a_budget_exhausted_event_and_cloud_event() -> None:
    [wait] = budget_waits(_played().state.engine, {WorkloadKey(HELD.key): "uid-held"})
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": HELD.name, "namespace": HELD.namespace, "uid": "uid-held"},
    }
    event = decision_event(wait.decision, job, datetime(2026, 1, 1, tzinfo=UTC), wait.event_name)
    assert event["metadata"] == {"name": wait.event_name, "namespace": HELD.namespace}
    assert (event["type"], event["reason"]) == ("Warning", "BudgetExhausted")
    assert event["message"].startswith("Waits in queue ")
    assert event["message"].endswith("(budget of root/Department-c)")
    told = cloud_event(event, wait.decision, f"usher-{wait.event_name}")
    assert told["type"] == "io.usher.job.budgetexhausted"
    assert told["data"]["decision"]["type"] == "decision.pending.v1"
    assert told["data"]["decision"]["reason"]["code"] == "BudgetExhausted"


@pytest.mark.parametrize(
    ("first_late", "now", "counts"),
    [
        ({}, 10, {}),
        ({"a/x": ("qa", 10)}, 10, {"qa": 0}),  # at the bound: not past it
        ({"a/x": ("qa", 10)}, 11, {"qa": 1}),
        ({"a/x": ("qa", 5), "a/y": ("qa", 50), "b/z": ("qb", 1)}, 20, {"qa": 1, "qb": 1}),
    ],
)
def test_pending_past_estimate_counts_per_queue(
    first_late: dict[str, tuple[str, int]], now: int, counts: dict[str, int]
) -> None:
    typed = {WorkloadKey(k): (QueueName(q), late) for k, (q, late) in first_late.items()}
    assert past_estimate(typed, Millis(now)) == counts


@pytest.mark.parametrize(
    ("interval_s", "took_s", "period_s"),
    [
        (10.0, 0.0, 10.0),  # nothing pending: the option's period
        (10.0, 0.1, 10.0),  # cheap: the option's period
        (10.0, 0.5, 25.0),  # 15,000 pending: at most 2% of the watcher's loop
        (1.0, 2.0, 100.0),
    ],
)
def test_a_costly_estimate_comes_less_often(
    interval_s: float, took_s: float, period_s: float
) -> None:
    """The estimate runs on the watcher's event loop: its share of the loop stays bounded."""
    assert estimate_period(interval_s, took_s) == pytest.approx(period_s)
