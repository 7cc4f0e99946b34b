"""Every scenario file in tests/scenarios/ plays to its ``expect:`` block, deterministically."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from usher.core.history.sim import check, load_scenario, render_json, render_table, run

SCENARIOS = sorted((Path(__file__).parent.parent / "scenarios").glob("*.yaml"))


def _load(path: Path):  # type: ignore[no-untyped-def]
    return load_scenario(yaml.safe_load(path.read_text()), path.name)


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_scenario_meets_its_expectations(path: Path) -> None:
    scenario = _load(path)
    assert scenario.expect is not None, "every scenario states what it expects"
    result = run(scenario)
    assert check(scenario, result) == [], render_table(result)


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_scenario_output_is_byte_identical_on_rerun(path: Path) -> None:
    first = render_json(run(_load(path)))
    second = render_json(run(_load(path)))
    assert first == second


def test_there_are_enough_scenarios() -> None:
    assert len(SCENARIOS) >= 28
    for path in SCENARIOS:
        assert path.read_text().startswith("#"), f"{path.name} needs a header naming its rule"
