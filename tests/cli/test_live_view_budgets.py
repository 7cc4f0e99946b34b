"""The live views show budgets with numbers and fair share (issue 18, item 5): the terminal
view (plain lines and the screen) prints ``usher budget``'s table and marks a queue below a
spent budget; with fair share on, each queue gives its leaf's decayed usage per weight as
``usher explain`` does; the web console's tree and queue pages say the same."""

from __future__ import annotations

import io

import msgspec
from aiohttp.test_utils import TestClient, TestServer
from rich.console import Console

from schemas import Millis, QuotaNode
from tests.builders.log import BASE_MS, QA, Log
from tests.builders.trees import departments_tree
from usher.cli.live import budget_lines, queue_lines, render
from usher.client.state import PeopleProjection, StateView
from usher.console.feed import ConsoleLog
from usher.console.server import make_app
from usher.core.history import explain as explain_mod
from usher.core.model.config import EngineConfig
from usher.core.rules import budgets

HOUR_MS = 3_600_000
END_S = 3601
"""The log ends (and the views are taken) 3601 s after BASE."""


def budgeted_tree() -> QuotaNode:
    """Department-a: 100 CPU-hours a month, 10 a day (spent by user-a/big's 60 cpu x 1 h)."""
    root = departments_tree()
    dept_a = msgspec.structs.replace(
        root.children[0], attributes={"usher.io/budgets": "cpu=100h per month; cpu=10h per 1d"}
    )
    return msgspec.structs.replace(root, children=[dept_a, *root.children[1:]])


def budget_log() -> Log:
    return (
        Log()
        .tree(0, budgeted_tree())
        .job(1, "user-a/big", 60)
        .admitted(1, "user-a/big", 60)
        .job(END_S, "user-a/late", 1)
    )


def view_of(log: Log, config: EngineConfig | None = None) -> StateView:
    state = PeopleProjection(config or EngineConfig())
    for item in log.history().items:
        state.apply(item)
    return state.view(Millis(BASE_MS + END_S * 1000))


def usher_budget_table(view: StateView) -> list[str]:
    """What ``usher budget`` prints for the same tree and ``now`` (its one renderer)."""
    assert view.budgets is not None
    return budgets.render_budget_table(view.budgets).splitlines()


def test_the_plain_lines_print_usher_budgets_table() -> None:
    view = view_of(budget_log())
    lines = budget_lines(view)
    assert lines[1:] == usher_budget_table(view)
    assert [line.split() for line in lines[2:]] == [
        ["root/Department-a", "cpu", "month", "60", "100", "40", "CPU-hours", "2024-06-01", "ok"],
        ["root/Department-a", "cpu", "1d", "60", "10", "0", "CPU-hours", "2024-05-02",
         "exhausted", "(hold)"],
    ]  # fmt: skip
    assert [spent for _, spent in view.budget_lines()] == [False, False, True]


def test_no_budget_no_budget_lines() -> None:
    view = view_of(Log().tree(0).job(1, "user-a/big", 60))
    assert view.budgets is None
    assert budget_lines(view) == []
    screen = io.StringIO()
    Console(file=screen, width=200, color_system=None).print(render(view, "usher", []))
    assert "Budgets" not in screen.getvalue()


def test_the_screen_shows_the_budgets_and_marks_the_spent_queue() -> None:
    view = view_of(budget_log())
    screen = io.StringIO()
    Console(file=screen, width=220, color_system=None).print(render(view, "usher", []))
    text = screen.getvalue()
    assert "Budgets" in text
    shown = [line.strip() for line in text.splitlines()]
    for line in usher_budget_table(view):
        assert line.strip() in shown  # usher budget's words, whole lines
    assert "budget spent" in text
    assert "BudgetExhausted" in text  # the late job's reason gives the numbers


def test_with_fair_share_on_each_queue_gives_explains_decayed_usage() -> None:
    config = EngineConfig(half_life_ms=HOUR_MS)
    log = budget_log()
    view = view_of(log, config)
    [queue] = [q for q in view.queues if q.name == QA]
    history = log.history()
    explained = explain_mod.explain(history, config, "user-a/late", history.end_ms)
    assert explained.fair_share is not None
    assert queue.fair_share == explained.fair_share  # the very view explain shows
    words = queue.fair_words()
    assert words is not None
    assert words.startswith("fair share: decayed usage ")
    assert "CPU-hours" in words and "(half-life 3600s), weight 1, key " in words
    assert explained.fair_share.key in words
    assert queue_lines(queue)[0].endswith(f"; {words}")
    screen = io.StringIO()
    Console(file=screen, width=400, color_system=None).print(render(view, "usher", []))
    assert words in screen.getvalue()  # one line at this width, in the queue's rows
    rendered = explain_mod.render_explain_table(explained)
    assert f"decayed usage {', '.join(explained.fair_share.decayed_usage.values())}" in rendered


def test_with_fair_share_off_no_queue_speaks_of_it() -> None:
    view = view_of(budget_log())
    assert all(q.fair_share is None and q.fair_words() is None for q in view.queues)
    assert "fair share" not in "\n".join(queue_lines(view.queues[0]))


async def test_the_console_shows_budgets_a_spent_queue_and_fair_share() -> None:
    feed = ConsoleLog(EngineConfig(half_life_ms=HOUR_MS))
    feed.apply(budget_log().history().items)
    feed.caught_up.set()
    async with TestClient(TestServer(make_app(feed))) as client:
        tree = await (await client.get("/")).text()
        queues = await (await client.get("/queues")).text()
        queue = await (await client.get(f"/queue/{QA}")).text()
    assert 'id="budgets"' in tree
    view = feed.view()
    for line in usher_budget_table(view):
        assert line in tree  # usher budget's lines, whole
    # The console's view is taken now (user-a/big has run since 2024): both budgets are spent.
    spent = [line for line, is_spent in view.budget_lines() if is_spent]
    assert len(spent) == 2
    for line in spent:
        assert f'<span class="spent" data-spent>{line}</span>' in tree
    assert "data-budget-spent" in tree
    [info] = [q for q in view.queues if q.name == QA]
    words = info.fair_words()
    assert words is not None and info.budget is not None
    assert info.budget.startswith("hold: ")
    for page in (queues, queue):
        assert f"data-budget>Budget spent: {info.budget}</p>" in page
        assert f"data-fair-share>{words}</p>" in page
