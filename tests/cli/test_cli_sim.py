"""`usher sim`: the walkthrough's scenarios pass, output is deterministic, bad input: one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SCENARIOS = REPO / "tests" / "scenarios"
WALKTHROUGH = [
    "01-walkthrough-round.yaml",
    "02-walkthrough-block.yaml",
    "03-walkthrough-reclaim.yaml",
]


def usher(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "usher.cli", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("name", WALKTHROUGH)
def test_walkthrough_scenario_passes_check(name: str) -> None:
    result = usher("sim", str(SCENARIOS / name), "--check")
    assert result.returncode == 0, result.stderr
    assert "matches expect" in result.stdout


def test_walkthrough_scenarios_pass_check_together() -> None:
    """`usher sim --check` over kube-queue's walkthrough scenarios at once."""
    files = [SCENARIOS / n for n in WALKTHROUGH]
    result = usher("sim", *map(str, files), "--check")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("matches expect") == len(files)


def test_json_output_is_byte_identical_and_shaped_as_documented() -> None:
    first = usher("sim", str(SCENARIOS / "03-walkthrough-reclaim.yaml"), "--json")
    second = usher("sim", str(SCENARIOS / "03-walkthrough-reclaim.yaml"), "--json")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    doc = json.loads(first.stdout)
    actions = [(d["action"], d["job"]) for d in doc["decisions"]]
    assert ("preempt", "user-b/borrow") in actions
    preempt = next(d for d in doc["decisions"] if d["action"] == "preempt")
    assert preempt["preemptor"] == "user-c/urgent"
    assert doc["final"]["jobs"]["user-c/urgent"]["state"] == "Admitted"
    assert doc["final"]["quota"]["root/Department-b"]["used"]["cpu"] == "10"


def test_check_names_each_difference(tmp_path: Path) -> None:
    text = (SCENARIOS / "01-walkthrough-round.yaml").read_text()
    text = text.replace("user-a/pi-2xtcj: Pending", "user-a/pi-2xtcj: Admitted")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(text)
    result = usher("sim", str(wrong), "--check")
    assert result.returncode == 1
    assert "user-a/pi-2xtcj" in result.stderr
    assert "Admitted" in result.stderr and "Pending" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "no such file"),
        ("name: x\ntimeline: [\n", "invalid YAML"),
        ("name: x\nconfig: {policy: Sideways}\ntimeline: []\n", "policy"),
        ("name: x\ntimeline:\n  - {at: 0, explode: ns/a}\n", "timeline[0]"),
        ("[]\n", "a scenario must be a mapping"),
    ],
    ids=["missing-file", "invalid-yaml", "unknown-policy", "unknown-action", "not-a-mapping"],
)
def test_bad_input_gets_one_clear_line(tmp_path: Path, content: str | None, needle: str) -> None:
    path = tmp_path / "bad.yaml"
    if content is not None:
        path.write_text(content)
    result = usher("sim", str(path))
    assert result.returncode == 3
    assert needle in result.stderr
    assert "Traceback" not in result.stderr
