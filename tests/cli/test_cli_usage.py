"""`usher usage` as a person runs it (offline, on an exported log): windows, groupings, the
three outputs, and bad input refused with one line naming the flag."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from tests.builders.log import CPU, B, Log, walkthrough_reclaim
from tests.cli.history_cli import export, usher
from tests.cli.test_cli_history import one_line_error
from tests.core.test_usage_budget_agree import tree as budget_tree

CORE_MS = 1000 * 1000  # one core for one second, in canonical units x ms


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    """walkthrough_reclaim (user-a/big 60 cpu from 1.1 s; user-b/borrow 40 cpu from 2.1 s, preempted
    at 3.1 s; user-c/urgent 10 cpu from 3.3 s), then urgent finishes an hour later and the log
    ends two hours after that admission: 'now' offline is the last entry, 7203.3 s."""
    log = (
        walkthrough_reclaim()
        .released(3603.3, "user-c/urgent", 10, "Finished", B)
        .job(7203.3, "user-x/late", 1)
    )
    return export(log, tmp_path / "usage.jsonl")


def test_table_by_node_counts_every_node_on_the_path(log_file: Path) -> None:
    result = usher("usage", "--file", str(log_file))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "usage by node from the beginning until 2024-05-01T14:00:03.300Z"
    rows = {tuple(line.split()[:3]) for line in lines[2:]}
    assert rows == {
        ("root", "cpu", "130.048"),
        ("root/Department-a", "cpu", "120.048"),
        ("root/Department-b", "cpu", "10.000"),
    }
    assert all(line.endswith("CPU-hours") for line in lines[2:])


def test_json_by_namespace_is_exact(log_file: Path) -> None:
    result = usher("usage", "--file", str(log_file), "--by", "namespace", "-o", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    amounts = {row["group"]: row["amount_ms"] for row in doc["rows"]}
    # big runs 7202.2 s, borrow until its preemption (1 s), urgent until its release (3600 s).
    assert amounts == {
        "user-a": 60 * 7202_200 * 1000,
        "user-b": 40 * CORE_MS,
        "user-c": 10 * 3600 * CORE_MS,
    }
    assert (doc["by"], doc["since_ms"], doc["until_ms"]) == ("namespace", None, doc["now_ms"])


def test_csv_by_queue_over_a_window(log_file: Path) -> None:
    result = usher(
        "usage",
        "--file",
        str(log_file),
        "--by",
        "queue",
        "-o",
        "csv",
        "--since",
        "2024-05-01T12:00:03.300Z",
        "--until",
        "2024-05-01T13:00:03.300Z",
    )
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(r["queue"], r["hours"], r["unit"]) for r in rows] == [
        ("root-department-a-user-a", "60.000", "CPU-hours"),
        ("root-department-b-user-c", "10.000", "CPU-hours"),
    ]


def test_relative_window_counts_back_from_now(log_file: Path) -> None:
    # The last hour: urgent had finished exactly at its start; only big still ran.
    result = usher("usage", "--file", str(log_file), "--since", "-1h", "-o", "json")
    doc = json.loads(result.stdout)
    assert {(r["group"], r["hours"]) for r in doc["rows"]} == {
        ("root", "60.000"),
        ("root/Department-a", "60.000"),
    }


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--since", "-1m", "--until", "-2m"], "--since '-1m'"),
        (["--since", "2024-05-02", "--until", "2024-05-01"], "is after --until '2024-05-01'"),
        (["--by", "team"], "'--by'"),
        (["--since", "soon"], "--since 'soon'"),
        (["--until", "tomorrow"], "--until 'tomorrow'"),
        (["-o", "yaml"], "'-o'"),
        (["--ledger"], "--ledger: no ledger database"),
    ],
)
def test_bad_input_is_refused_naming_the_flag(log_file: Path, args: list[str], needle: str) -> None:
    line = one_line_error(usher("usage", "--file", str(log_file), *args), 2)
    assert needle in line


def test_no_stack_running(tmp_path: Path) -> None:
    line = one_line_error(usher("usage", home=tmp_path), 4)
    assert "no stack running" in line


def test_usage_and_budget_agree_to_the_millisecond_over_the_budgets_window(tmp_path: Path) -> None:
    """The demo's budget story in small: what ``usher budget`` says Department-a spent this
    month is what ``usher usage`` says it used since the month began -- a finished job counts
    until the ledger's Released (30 s after its finish), a preempted one until its Preempted,
    a running one up to now (U1, B1)."""
    log = (
        Log()
        .tree(0, budget_tree("month"))
        .job(1, "user-a/done", 8)
        .admitted(2, "user-a/done", 8)
        .job(3, "user-b/victim", 4)
        .admitted(4, "user-b/victim", 4)
        .job(5, "user-a/running", 2)
        .admitted(6, "user-a/running", 2)
        .finished(600, "user-a/done")
        .released(630, "user-a/done", 8, "Finished")
        .preempted(700, "user-b/victim", "user-c/other")
        .released(760, "user-b/victim", 4, "Preempted")
        .job(3600, "user-c/late", 1)
    )
    path = export(log, tmp_path / "budget.jsonl")
    budget = usher("budget", "-o", "json", "--file", str(path))
    assert budget.returncode == 0, budget.stderr
    [row] = json.loads(budget.stdout)["rows"]
    usage = usher("usage", "-o", "json", "--since", "2024-05-01T00:00:00Z", "--file", str(path))
    assert usage.returncode == 0, usage.stderr
    used = {(r["group"], r["resource"]): r["amount_ms"] for r in json.loads(usage.stdout)["rows"]}
    expected = 8 * CPU * 628_000 + 4 * CPU * 696_000 + 2 * CPU * 3_594_000
    assert row["spent_ms"] == used[("root/Department-a", "cpu")] == expected
