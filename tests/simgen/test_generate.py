"""The seeded generator: each distribution's mean over many samples, arrivals, determinism,
the scenario it writes, and specs refused naming the field."""

from __future__ import annotations

import random
import statistics
from typing import Any

import pytest
import yaml

from tests.builders.manifests import elastic_quota_tree, quota_node
from usher.core.history import planning, sim
from usher.core.model.errors import ScenarioError
from usher.simgen.generate import arrivals, draw, draw_whole, generate, jobs
from usher.simgen.spec import Bursts, Distribution, Shape, load_spec

SAMPLES = 20_000


def spec_data(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "plan",
        "seed": 3,
        "horizon": 1800,
        "cluster": {"nodes": 2, "allocatable": {"cpu": "16", "memory": "64Gi"}},
        "priorityClasses": {"low": 0, "high": 10},
        "departments": [
            {
                "name": "research",
                "min": {"cpu": "20", "memory": "80Gi"},
                "arrivals": {"rate": 0.02, "bursts": {"every": 600, "jobs": 4}},
                "pods": {"dist": "uniform", "min": 1, "max": 3},
                "cpu": {"dist": "choice", "values": [1, 2, 4]},
                "memory": {"dist": "lognormal", "mean": 4, "sigma": 0.5},
                "runtime": {"dist": "exponential", "mean": 300},
                "priority": {"low": 3, "high": 1},
            },
            {"name": "ops", "min": {"cpu": "12"}, "arrivals": {"rate": 0.01}, "cpu": 0.5},
        ],
    }
    data.update(changes)
    return data


@pytest.mark.parametrize(
    ("distribution", "mean"),
    [
        (Distribution(Shape.FIXED, value=3.5), 3.5),
        (Distribution(Shape.UNIFORM, low=2, high=10), 6.0),
        (Distribution(Shape.EXPONENTIAL, mean=300), 300.0),
        (Distribution(Shape.LOGNORMAL, mean=60, sigma=1.0), 60.0),
        (Distribution(Shape.CHOICE, values=(1, 2, 4), weights=(1, 1, 2)), 2.75),
    ],
)
def test_sample_mean_is_the_distributions_mean(distribution: Distribution, mean: float) -> None:
    rng = random.Random(11)
    samples = [draw(distribution, rng) for _ in range(SAMPLES)]
    assert statistics.fmean(samples) == pytest.approx(mean, rel=0.03)


@pytest.mark.parametrize(
    ("distribution", "least", "values", "mean"),
    [
        (Distribution(Shape.UNIFORM, low=1, high=4), 1, {1, 2, 3, 4}, 2.5),
        (Distribution(Shape.CHOICE, values=(0, 1), weights=(3, 1)), 0, {0, 1}, 0.25),
        (Distribution(Shape.FIXED, value=0), 1, {1}, 1.0),
    ],
)
def test_whole_samples(
    distribution: Distribution, least: int, values: set[int], mean: float
) -> None:
    rng = random.Random(5)
    samples = [draw_whole(distribution, rng, least) for _ in range(SAMPLES)]
    assert set(samples) == values
    assert statistics.fmean(samples) == pytest.approx(mean, rel=0.03)


def test_poisson_arrivals_average_rate_times_horizon_and_bursts_add_their_jobs() -> None:
    department = load_spec(spec_data(), "s").departments[0]
    rng = random.Random(2)
    plain = department.__class__(**{**department.__dict__, "bursts": None})
    counts = [len(arrivals(plain, 1000, rng)) for _ in range(2000)]
    assert statistics.fmean(counts) == pytest.approx(0.02 * 1000, rel=0.03)
    bursty = department.__class__(
        **{**department.__dict__, "rate": 0.0, "bursts": Bursts(every_s=250, jobs=3)}
    )
    assert arrivals(bursty, 1000, rng) == [250_000] * 3 + [500_000] * 3 + [750_000] * 3


def test_same_seed_same_scenario_other_seed_differs() -> None:
    spec = load_spec(spec_data(), "s")
    first, again, other = generate(spec, 3), generate(spec, 3), generate(spec, 4)
    assert yaml.safe_dump(first) == yaml.safe_dump(again)
    assert first["timeline"] != other["timeline"]


def test_generated_jobs_follow_the_spec() -> None:
    spec = load_spec(spec_data(), "s")
    made = jobs(spec, 3)
    assert made == sorted(made, key=lambda j: (j.at_ms, j.department, j.name))
    assert all(0 <= j.at_ms < 1_800_000 for j in made)
    research = [j for j in made if j.namespace == "research"]
    ops = [j for j in made if j.namespace == "ops"]
    assert {j.pods for j in research} <= {1, 2, 3}
    assert {j.millicores for j in research} <= {1000, 2000, 4000}
    assert {j.priority_class for j in research} == {"low", "high"}
    assert {(j.millicores, j.mebibytes, j.pods, j.priority_class) for j in ops} == {
        (500, 1024, 1, None)
    }


def test_the_generated_scenario_plays_and_replays_the_same_from_yaml() -> None:
    data = generate(load_spec(spec_data(), "s"), 3)
    direct = sim.run(sim.load_scenario(data, "gen"))
    replayed = sim.run(sim.load_scenario(yaml.safe_load(yaml.safe_dump(data)), "gen"))
    assert sim.render_json(direct) == sim.render_json(replayed)
    report = planning.planning_report(sim.planning_record(direct))
    assert [d.department for d in report.departments] == ["root/ops", "root/research"]
    assert report.cluster.jobs == len(data["timeline"]) > 0
    assert report.until_s == 1800


def test_a_given_tree_places_departments_on_its_nodes() -> None:
    lab = quota_node("lab", max_cpu="32", min_cpu="32", namespaces=["lab-1", "lab-2"])
    org = quota_node("org", max_cpu="32", min_cpu="32", children=[lab])
    tree = elastic_quota_tree(org, name="t")
    data = spec_data(tree="tree.yaml", departments=[{"name": "lab", "arrivals": {"rate": 0.01}}])
    spec = load_spec(data, "s", tree)
    assert (spec.departments[0].path, spec.departments[0].namespace) == ("org/lab", "lab-1")
    report = planning.planning_report(
        sim.planning_record(sim.run(sim.load_scenario(generate(spec, 1), "g")))
    )
    assert [d.department for d in report.departments] == ["org/lab"]


@pytest.mark.parametrize(
    ("change", "path", "code"),
    [
        ({"horizon": -5}, "horizon", "out-of-range"),
        ({"horizon": None}, "horizon", "missing"),
        ({"seed": "x"}, "seed", "invalid-seed"),
        ({"colour": 1}, "colour", "unknown-key"),
        ({"cluster": {"nodes": 0, "allocatable": {"cpu": "1"}}}, "cluster.nodes", "out-of-range"),
        (
            {"cluster": {"nodes": 1, "allocatable": {"cpu": "lots"}}},
            "cluster.allocatable.cpu",
            None,
        ),
        ({"departments": []}, "departments", "not-a-list"),
    ],
)
def test_bad_spec_is_refused_naming_the_field(
    change: dict[str, Any], path: str, code: str | None
) -> None:
    with pytest.raises(ScenarioError) as failure:
        load_spec(spec_data(**change), "s")
    found = {(e.path, e.code) for e in failure.value.errors}
    assert any(p == path and (code is None or c == code) for p, c in found), found


@pytest.mark.parametrize(
    ("department", "path", "code"),
    [
        ({"arrivals": {"rate": -1}}, "departments[0].arrivals.rate", "out-of-range"),
        (
            {"arrivals": {"rate": 1, "bursts": {"every": 0, "jobs": 2}}},
            "departments[0].arrivals.bursts.every",
            "out-of-range",
        ),
        (
            {"arrivals": {"rate": 1}, "cpu": {"dist": "gamma", "k": 2}},
            "departments[0].cpu.dist",
            "unknown-distribution",
        ),
        (
            {"arrivals": {"rate": 1}, "runtime": {"dist": "exponential", "mean": 0}},
            "departments[0].runtime.mean",
            "out-of-range",
        ),
        (
            {"arrivals": {"rate": 1}, "pods": {"dist": "uniform", "min": 4, "max": 2}},
            "departments[0].pods.min",
            "out-of-range",
        ),
        (
            {"arrivals": {"rate": 1}, "cpu": {"dist": "choice", "values": [1], "weights": [1, 2]}},
            "departments[0].cpu.weights",
            "invalid-weights",
        ),
        (
            {"arrivals": {"rate": 1}, "priority": {"urgent": 1}},
            "departments[0].priority.urgent",
            "unknown-class",
        ),
        ({"arrivals": {"rate": 1}, "min": {"cpu": "-2"}}, "departments[0].min.cpu", None),
        ({"arrivals": {"rate": 1}, "size": 3}, "departments[0].size", "unknown-key"),
    ],
)
def test_bad_department_is_refused_naming_the_field(
    department: dict[str, Any], path: str, code: str | None
) -> None:
    data = spec_data(departments=[{"name": "research", **department}])
    with pytest.raises(ScenarioError) as failure:
        load_spec(data, "s")
    found = {(e.path, e.code) for e in failure.value.errors}
    assert any(p == path and (code is None or c == code) for p, c in found), found


@pytest.mark.parametrize(
    ("departments", "path", "code"),
    [
        (
            [{"name": "a", "min": {"cpu": "20"}}, {"name": "b", "min": {"cpu": "20"}}],
            "departments (spec.root.min.cpu)",
            "children-min-exceed-parent-min",
        ),
        (
            [{"name": "a", "min": {"cpu": "3"}, "max": {"cpu": "2"}}],
            "departments[0].min.cpu",
            "min-exceeds-max",
        ),
    ],
)
def test_a_tree_the_departments_cannot_make_is_refused(
    departments: list[dict[str, Any]], path: str, code: str
) -> None:
    """Not left to the run, where a rejected tree would leave every job unmapped."""
    data = spec_data(departments=[{**d, "arrivals": {"rate": 0.1}} for d in departments])
    with pytest.raises(ScenarioError) as failure:
        load_spec(data, "s")
    assert [(e.path, e.code) for e in failure.value.errors] == [(path, code)]
