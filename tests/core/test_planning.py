"""The planning report's numbers against a tiny scenario computed by hand, and the runtimes
(``runSeconds``) and horizon (``until``) of a scenario that it rests on."""

from __future__ import annotations

import pytest

from tests.builders.manifests import (
    batch_job,
    container,
    elastic_quota_tree,
    pod_template,
    quota_node,
)
from usher.core.history import planning, sim
from usher.core.model.errors import ScenarioError

TREE = elastic_quota_tree(
    quota_node(
        "root",
        max_cpu="4",
        min_cpu="4",
        children=[
            quota_node("a", max_cpu="4", min_cpu="2", namespaces=["a"]),
            quota_node("b", max_cpu="4", min_cpu="2", namespaces=["b"]),
        ],
    )
)


def job(namespace: str, name: str, cpu: str) -> dict[str, object]:
    return batch_job(name, namespace, template=pod_template(container("w", "x", cpu=cpu)))


def scenario() -> dict[str, object]:
    """One 4-cpu node; a and b guarantee 2 cpu each. a/j1 (4 cpu, 100 s) runs from 0; a/j2
    (2 cpu) waits behind it; b/j3 (2 cpu, 20 s) reclaims at 10: j1 is preempted (4 cpu x 10 s
    thrown away) and j2 takes the other 2 cpu (waited 5 s). j2 ends at 20, j3 at 30, and j1
    runs again from 30 to 130. The window is [0, 200)."""
    return {
        "name": "hand",
        "nodes": [{"name": "n1", "allocatable": {"cpu": "4"}}],
        "objects": [TREE],
        "timeline": [
            {"at": 0, "create": job("a", "j1", "4"), "runSeconds": 100},
            {"at": 5, "create": job("a", "j2", "2"), "runSeconds": 10},
            {"at": 10, "create": job("b", "j3", "2"), "runSeconds": 20},
        ],
        "until": 200,
    }


def test_runs_end_after_their_runtime_and_a_preemption_restarts_the_run() -> None:
    result = sim.run(sim.load_scenario(scenario(), "hand"))
    made = [
        (r.at_ms // 1000, type(r.decision).__name__, r.decision.workload)
        for r in result.ledger
        if type(r.decision).__name__ in ("Admitted", "Preempted", "Released")
    ]
    assert made == [
        (0, "Admitted", "a/j1"),
        (10, "Preempted", "a/j1"),
        (10, "Admitted", "b/j3"),
        (10, "Admitted", "a/j2"),
        (20, "Released", "a/j2"),
        (30, "Released", "b/j3"),
        (30, "Admitted", "a/j1"),
        (130, "Released", "a/j1"),
    ]


def test_report_matches_the_hand_computed_numbers() -> None:
    result = sim.run(sim.load_scenario(scenario(), "hand"))
    report = planning.planning_report(sim.planning_record(result))
    assert (report.since_s, report.until_s, report.capacity) == (0, 200, {"cpu": "4"})
    a, b = report.departments
    assert (a.department, a.jobs, a.admitted, a.pending, a.preemptions) == ("root/a", 2, 2, 0, 1)
    assert (a.wait_mean_s, a.wait_p95_s, a.wait_max_s) == (2.5, 5.0, 5.0)
    # a held 4 cpu 0-10, 2 cpu 10-20 and 4 cpu 30-130: 460 cpu-s of a 2 x 200 guarantee.
    assert a.resources == [
        planning.ResourceUse(
            resource="cpu",
            unit="CPU-seconds",
            used="460.000",
            guaranteed="400.000",
            of_guarantee_pct="115.0",
            utilisation_pct="57.5",
            lost_to_preemption="40.000",
        )
    ]
    assert (b.jobs, b.admitted, b.wait_max_s, b.preemptions) == (1, 1, 0.0, 0)
    assert (b.resources[0].used, b.resources[0].of_guarantee_pct) == ("40.000", "10.0")
    assert b.resources[0].lost_to_preemption == "0.000"
    total = report.cluster
    assert (total.department, total.jobs, total.admitted, total.preemptions) == (
        planning.CLUSTER,
        3,
        3,
        1,
    )
    assert (total.wait_mean_s, total.wait_p95_s, total.wait_max_s) == (1.667, 5.0, 5.0)
    assert total.resources[0].used == "500.000"
    assert total.resources[0].utilisation_pct == "62.5"


def test_the_horizon_cuts_the_run_and_counts_what_still_waits() -> None:
    data = scenario() | {"until": 8}
    report = planning.planning_report(sim.planning_record(sim.run(sim.load_scenario(data, "h"))))
    a, b = report.departments
    assert (a.jobs, a.admitted, a.pending, a.wait_max_s) == (2, 1, 1, 0.0)
    assert b.jobs == 0
    assert a.resources[0].used == "32.000"  # j1: 4 cpu x 8 s, still running at the horizon


def test_report_renders_as_table_json_and_csv_deterministically() -> None:
    report = planning.planning_report(
        sim.planning_record(sim.run(sim.load_scenario(scenario(), "h")))
    )
    table = planning.render_planning_table(report)
    assert "root/a" in table and "115.0%" in table and "(cluster)" in table
    assert planning.render_planning_json(report) == planning.render_planning_json(report)
    rows = planning.render_planning_csv(report).splitlines()
    assert rows[0].split(",") == list(planning.CSV_COLUMNS)
    assert rows[1].startswith("root/a,2,2,0,2.5,5.0,5.0,1,cpu,CPU-seconds,460.000,400.000")


@pytest.mark.parametrize(
    ("entry", "path"),
    [
        ({"at": 0, "create": job("a", "x", "1"), "runSeconds": -1}, "timeline[0].runSeconds"),
        ({"at": 0, "create": job("a", "x", "1"), "runSeconds": "soon"}, "timeline[0].runSeconds"),
        ({"at": 0, "finish": "a/j1", "runSeconds": 3}, "timeline[3].runSeconds"),
    ],
)
def test_bad_runtime_is_refused_naming_the_field(entry: dict[str, object], path: str) -> None:
    data = scenario()
    timeline = list(data["timeline"])  # type: ignore[call-overload]
    if "finish" in entry:
        entry = entry | {"at": 10}
        timeline.append(entry)
    else:
        timeline = [entry]
    with pytest.raises(ScenarioError) as failure:
        sim.load_scenario(data | {"timeline": timeline}, "bad")
    assert path in [e.path for e in failure.value.errors]


def test_bad_until_is_refused() -> None:
    with pytest.raises(ScenarioError) as failure:
        sim.load_scenario(scenario() | {"until": -3}, "bad")
    assert [e.path for e in failure.value.errors] == ["until"]


def test_a_run_is_ready_as_it_starts_so_a_ready_timeout_never_requeues_it() -> None:
    """S2 under R10: a tree with a 30 s ready timeout; j1 runs 100 s untouched."""
    tree = {**TREE, "spec": {"root": {**TREE["spec"]["root"]}}}
    tree["spec"]["root"]["attributes"] = {"usher.io/ready-timeout-seconds": "30"}
    data = scenario() | {
        "objects": [tree],
        "timeline": [{"at": 0, "create": job("a", "j1", "4"), "runSeconds": 100}],
    }
    result = sim.run(sim.load_scenario(data, "ready"))
    made = [(r.at_ms // 1000, type(r.decision).__name__) for r in result.ledger]
    assert ("Requeued" not in {name for _, name in made}) and (100, "Released") in made
