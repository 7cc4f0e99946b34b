"""`usher what-if --half-life` and `usher explain --half-life` (F1) as a person runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.common.settings import SettingsError, load_settings
from tests.cli.history_cli import export, usher
from tests.cli.test_cli_history import one_line_error
from tests.core.test_fairshare import _heavy_then_tie


@pytest.fixture
def heavy_file(tmp_path: Path) -> Path:
    return export(_heavy_then_tie(), tmp_path / "heavy.jsonl")


def test_what_if_half_life_hands_the_tie_to_the_queue_that_used_less(heavy_file: Path) -> None:
    result = usher("what-if", "--half-life", "3600", "--file", str(heavy_file), "-o", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["whatif"]["half_life_s"] == 3600 and "half_life_s" not in doc["baseline"]
    admits = {(d["workload"], d["baseline_at"] is None) for d in doc["differences"]}
    assert admits == {("user-a/tie", False), ("user-c/tie", True)}
    table = usher("what-if", "--half-life", "3600", "--file", str(heavy_file)).stdout
    assert "fair-share half-life 3600s" in table and "user-c/tie" in table
    # The same half-life on both sides compares equal settings: nothing differs.
    same = usher(
        "what-if",
        *("--half-life", "3600", "--baseline-half-life", "3600"),
        *("--file", str(heavy_file), "-o", "json"),
    )
    assert json.loads(same.stdout)["differences"] == []


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("0", "more than 0 seconds"),
        (
            "soon",
            "seconds from 0 to 31622400 with at most 3 decimals (ASCII digits, e.g. 1.5), "
            "got 'soon' (or off)",
        ),
    ],
)
def test_a_bad_half_life_is_one_line(heavy_file: Path, value: str, needle: str) -> None:
    line = one_line_error(usher("what-if", "--half-life", value, "--file", str(heavy_file)), 2)
    assert "--half-life" in line and needle in line


def test_explain_shows_the_leaf_decayed_usage_only_with_fair_share_on(heavy_file: Path) -> None:
    on = usher("explain", "user-a/tie", "--half-life", "3600", "--file", str(heavy_file))
    assert on.returncode == 0, on.stderr
    fair = [line for line in on.stdout.splitlines() if line.startswith("  fair:")]
    assert len(fair) == 1 and "root/Department-a decayed usage" in fair[0] and "weight 1" in fair[0]
    # heavy's 70 cpu count until the ledger's Released, 0.1 s after its finish (U1): 115.398
    assert "115.398 CPU-hours" in fair[0] and "key 1.154 root-hours" in fair[0]  # 115.398 / 100
    doc = json.loads(
        usher(
            "explain", "user-c/tie", "--half-life", "3600", "--file", str(heavy_file), "-o", "json"
        ).stdout
    )
    assert doc["fair_share"]["quota"] == "root/Department-b" and doc["fair_share"]["weight"] == 1
    off = usher("explain", "user-a/tie", "--file", str(heavy_file), "-o", "json")
    assert "fair_share" not in json.loads(off.stdout)


@pytest.mark.parametrize(
    ("explicit", "variable", "expected"),
    [
        (None, None, None),  # off unless asked
        (3600.0, None, 3_600_000),
        (None, "90", 90_000),
        (None, "off", None),
        (1.5, "off", 1500),  # the option wins over the variable
    ],
)
def test_the_installation_half_life_comes_from_option_then_variable(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    explicit: float | None,
    variable: str | None,
    expected: int | None,
) -> None:
    if variable is None:
        monkeypatch.delenv("USHER_HALF_LIFE_SECONDS", raising=False)
    else:
        monkeypatch.setenv("USHER_HALF_LIFE_SECONDS", variable)
    settings = load_settings(nats_url="nats://offline", home=tmp_path, half_life_s=explicit)
    assert settings.engine.half_life_ms == expected


@pytest.mark.parametrize("variable", ["0", "-5", "soon"])
def test_a_bad_half_life_variable_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str
) -> None:
    monkeypatch.setenv("USHER_HALF_LIFE_SECONDS", variable)
    with pytest.raises(SettingsError) as caught:
        load_settings(nats_url="nats://offline", home=tmp_path)
    assert caught.value.name == "half-life"


def test_usher_run_refuses_a_bad_half_life_in_one_line(tmp_path: Path) -> None:
    line = one_line_error(
        usher("run", "dequeuer", "--nats", "nats://127.0.0.1:1", "--half-life", "0"), 2
    )
    assert "half-life" in line and "more than 0 seconds" in line
