"""`usher budget` as a person runs it (offline, on an exported log): spent, left and reset of
each budget in force, in a table and exact in JSON, and a log without budgets said so."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from tests.builders.log import Log
from tests.builders.trees import departments_tree
from tests.cli.history_cli import export, usher
from usher.cli.live import queue_lines
from usher.client.state import PeopleProjection
from usher.core.history import replay as history

CORE_MS = 1000 * 1000  # one core for one second, in canonical units x ms


def _budgeted_tree() -> msgspec.Struct:
    root = departments_tree()
    dept_a = msgspec.structs.replace(
        root.children[0], attributes={"usher.io/budgets": "cpu=100h per month; cpu=10h per 1d"}
    )
    return msgspec.structs.replace(root, children=[dept_a, *root.children[1:]])


def _log_file(tmp_path: Path) -> Path:
    """user-a/big runs 60 cpu from 1 s (2024-05-01T12:00:01Z); the log ends at 3601 s."""
    log = (
        Log()
        .tree(0, _budgeted_tree())  # type: ignore[arg-type]
        .job(1, "user-a/big", 60)
        .admitted(1, "user-a/big", 60)
        .job(3601, "user-a/late", 1)
    )
    return export(log, tmp_path / "budget.jsonl")


def test_table_shows_spent_left_and_reset(tmp_path: Path) -> None:
    result = usher("budget", "--file", str(_log_file(tmp_path)))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "NODE", "RESOURCE", "WINDOW", "SPENT", "LIMIT", "LEFT", "UNIT", "RESETS", "STATE"
    ]  # fmt: skip
    rows = [line.split() for line in lines[1:]]
    assert rows == [
        ["root/Department-a", "cpu", "month", "60", "100", "40", "CPU-hours", "2024-06-01", "ok"],
        ["root/Department-a", "cpu", "1d", "60", "10", "0", "CPU-hours", "2024-05-02",
         "exhausted", "(hold)"],
    ]  # fmt: skip


def test_json_is_exact(tmp_path: Path) -> None:
    result = usher("budget", "--file", str(_log_file(tmp_path)), "-o", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    month = next(row for row in doc["rows"] if row["window"] == "month")
    assert month["spent_ms"] == 60 * 3600 * CORE_MS
    assert month["left_ms"] == 40 * 3600 * CORE_MS
    assert (month["period"], month["action"], month["exhausted"]) == ("2024-05", "hold", False)


def test_the_late_job_says_why_it_waits(tmp_path: Path) -> None:
    result = usher("explain", "user-a/late", "--file", str(_log_file(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert (
        "BudgetExhausted: 60 of 10 CPU-hours in the 1 day from 2024-05-01, resets 2024-05-02 "
        "(budget of root/Department-a)"
    ) in result.stdout


def test_no_budget_said(tmp_path: Path) -> None:
    log = Log().tree(0).job(1, "user-a/big", 60)
    result = usher("budget", "--file", str(export(log, tmp_path / "plain.jsonl")))
    assert result.returncode == 0, result.stderr
    assert "(no node of the quota tree carries a budget)" in result.stdout


def test_the_people_view_and_the_live_view_say_a_budget_is_spent(tmp_path: Path) -> None:
    _, entries = history.decode_export(_log_file(tmp_path).read_bytes())
    log = history.decode_history(entries)
    state = PeopleProjection()
    for item in log.items:
        state.apply(item)
    assert log.end_ms is not None
    view = state.view(log.end_ms)
    spent = (
        "hold: 60 of 10 CPU-hours in the 1 day from 2024-05-01, resets 2024-05-02 "
        "(budget of root/Department-a)"
    )
    queues = {queue.name: queue for queue in view.queues}
    assert queues["root-department-a-user-a"].budget == spent
    assert queues["root-department-b-user-c"].budget is None
    late = next(job for job in view.jobs if job.job == "user-a/late")
    assert late.reason_code == "BudgetExhausted"
    head = queue_lines(queues["root-department-a-user-a"])[0]
    assert head.endswith(f"; budget spent ({spent})")
