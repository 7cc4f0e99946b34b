"""The demo's budget story (B1) does what it says, played in the pure core as the running
system plays it: the demo's tree with the leaf the demo adds, the story's jobs as ``usher
submit`` builds them, an engine deciding. The first job spends Department-c's budget and runs
to its end; the next waits with ``BudgetExhausted``, which the live view shows beside ``usher
budget``'s table; the leaf takes nothing from the walkthrough's departments."""

from __future__ import annotations

from schemas import Admitted, Millis, Preempted, WorkloadKey
from tests.builders.demo import story_request, story_setup, walkthrough_tree
from tests.cli.test_demo_reclaim import Playback
from usher.cli.live import budget_lines, queue_lines
from usher.demo.budget import budget_leaf, story_jobs

END_S = 10
"""When the views are taken: after the story."""


def _cluster() -> Playback:
    """The demo's system once the budget story's leaf is added below the demo tree's root."""
    tree = walkthrough_tree()
    tree["spec"]["root"]["children"].append(budget_leaf())
    play = Playback()
    play.feed(0, story_setup("budget", tree))
    return play


def _played() -> Playback:
    play = _cluster()
    spend, held = story_jobs()
    play.submit(1, story_request(spend))
    play.finish(1 + spend.duration_s, spend.key)
    play.submit(6, story_request(held))
    return play


def test_the_first_job_spends_the_budget_and_the_next_is_held() -> None:
    play = _played()
    spend, held = story_jobs()
    admitted = [d.workload for d in play.decisions if isinstance(d, Admitted)]
    assert admitted == [WorkloadKey(spend.key)]
    assert not [d for d in play.decisions if isinstance(d, Preempted)]
    info = play.state.view(Millis(END_S * 1000)).jobs
    [waiting] = [job for job in info if job.job == held.key]
    assert waiting.reason_code == "BudgetExhausted"
    assert waiting.reason == (
        "0.013 of 0.01 CPU-hours in 1970-01, resets 1970-02-01 (budget of root/Department-c)"
    )


def test_the_live_view_shows_the_spent_budget_and_the_held_queue() -> None:
    view = _played().state.view(Millis(END_S * 1000))
    [queue] = [q for q in view.queues if q.quota == "root/Department-c"]
    assert queue_lines(queue)[0].endswith(
        "; budget spent (hold: 0.013 of 0.01 CPU-hours in 1970-01, resets 1970-02-01 "
        "(budget of root/Department-c))"
    )
    [_, header, row] = budget_lines(view)
    assert header.split()[:6] == ["NODE", "RESOURCE", "WINDOW", "SPENT", "LIMIT", "LEFT"]
    assert row.split() == [
        "root/Department-c", "cpu", "month", "0.013", "0.01", "0", "CPU-hours", "1970-02-01",
        "exhausted", "(hold)",
    ]  # fmt: skip


def test_the_leaf_takes_nothing_from_the_walkthroughs_departments() -> None:
    """No guarantee (the walkthrough's 60 + 40 cpu stay whole), nothing used once the story is over:
    the held job holds nothing, so the walkthrough's scenarios start as before."""
    play = _played()
    nodes = {node.path: node for node in play.state.view(Millis(END_S * 1000)).quota}
    assert nodes["root/Department-c"].min_units.get("cpu", 0) == 0
    assert nodes["root/Department-a"].min["cpu"] == "60"
    assert nodes["root/Department-b"].min["cpu"] == "40"
    # The deciding engine (it releases at once; the running system's ledger logs the release).
    assert all(not used.get("cpu") for used in play.engine.quota_used().values())
