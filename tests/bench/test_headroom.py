"""``python -m bench --headroom``: the side-by-side comparison and the one-core pin.

The comparison is checked on two real results files of full runs (round two's, and an
earlier one at 3.5x ideal standing in for the slowed run); the pin by a child process started
inside it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.headroom import FIGURES, compare, one_core, render

RESULTS = Path(__file__).parents[2] / "bench" / "results"
ROUND_TWO, SLOWER = "20261125T033438Z.json", "20261124T212907Z.json"


def _suite(file: str, suite: str) -> dict[str, float]:
    numbers: dict[str, float] = json.loads((RESULTS / file).read_text())["suites"][suite]
    return numbers


@pytest.mark.parametrize("suite", ["kueue", "stack"])
def test_each_figure_in_both_runs_is_put_side_by_side_with_its_ratio(suite: str) -> None:
    normal, cut = _suite(ROUND_TWO, suite), _suite(SLOWER, suite)
    compared = compare(suite, normal, cut)
    wanted = [f for f in FIGURES[suite] if f in normal and f in cut]
    assert list(compared) == wanted and wanted
    for figure, row in compared.items():
        assert (row["normal"], row["cut"]) == (normal[figure], cut[figure])
        if normal[figure] == 0:  # history_violations: 0 in both
            assert math.isnan(row["ratio"])
        else:
            assert row["ratio"] == pytest.approx(cut[figure] / normal[figure])
    table = render({suite: compared}, "one core")
    assert all(figure in table for figure in wanted)


def test_a_figure_missing_from_either_run_is_left_out() -> None:
    normal = _suite(ROUND_TWO, "kueue")
    cut = {k: v for k, v in normal.items() if k != "wall_vs_ideal"}
    assert "wall_vs_ideal" not in compare("kueue", normal, cut)
    assert "wall_vs_ideal" not in compare("kueue", cut, normal)
    assert compare("limits", normal, normal) == {}  # not a headroom suite


@pytest.mark.parametrize("normal", [0.0, math.nan])
def test_a_ratio_to_nothing_is_nan(normal: float) -> None:
    row = compare("kueue", {"history_violations": normal}, {"history_violations": 3.0})
    assert math.isnan(row["history_violations"]["ratio"])


def test_one_core_pins_what_is_started_inside_and_restores_after() -> None:
    before = os.sched_getaffinity(0)
    if len(before) < 2:
        pytest.skip("this machine lets the test run on one core only")
    ask = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
    with one_core() as pinned:
        inside = json.loads(subprocess.run(ask, capture_output=True, text=True).stdout)
    assert inside == [pinned["core"]] and pinned["cores_before"] == sorted(before)
    assert os.sched_getaffinity(0) == before


def test_one_core_restores_the_cores_when_the_run_breaks() -> None:
    before = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError), one_core():
        raise RuntimeError("a suite failed")
    assert os.sched_getaffinity(0) == before
