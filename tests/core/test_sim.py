"""Scenario loading errors, rendering and checking of the simulator."""

from __future__ import annotations

import json
from typing import Any

import pytest

from schemas import WorkloadFinished, WorkloadKey, WorkloadProgress
from tests.builders.manifests import (
    batch_job,
    container,
    elastic_quota_tree,
    pod_template,
    quota_node,
)
from usher.core.history.sim import check, load_scenario, render_json, render_table, run
from usher.core.model.errors import ScenarioError

TREE: dict[str, Any] = elastic_quota_tree(
    quota_node(
        "root",
        max_cpu="10",
        min_cpu="10",
        children=[quota_node("A", max_cpu="10", min_cpu="10", namespaces=["a"])],
    ),
    name="t",
)


def job(name: str | None, cpu: str = "4", generate: bool = False) -> dict[str, Any]:
    manifest = batch_job(
        None,
        "a",
        template=pod_template(container("w", "x", cpu=cpu), restart_policy=None),
        generate_name="pi-" if generate else None,
    )
    if not generate:
        manifest["metadata"]["name"] = name
    return manifest


def scenario(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "t",
        "config": {"policy": "Round"},
        "objects": [TREE],
        "timeline": [{"at": 0, "create": job("x")}, {"at": 1.5, "create": job("y")}],
        "expect": {"jobs": {"a/x": "Admitted", "a/y": "Admitted"}},
    }
    data.update(overrides)
    return data


def error_paths(data: object) -> list[str]:
    with pytest.raises(ScenarioError) as failure:
        load_scenario(data, "test.yaml")
    return [e.path for e in failure.value.errors]


@pytest.mark.parametrize(
    ("name", "overrides", "path"),
    [
        ("unknown-top-level-key", {"extra": 1}, "extra"),
        ("unknown-config-key", {"config": {"policy": "Round", "speed": 3}}, "config.speed"),
        ("bad-policy", {"config": {"policy": "Fast"}}, "config.policy"),
        ("bad-within-quota", {"config": {"withinQuota": "Always"}}, "config.withinQuota"),
        ("bad-oversell", {"config": {"oversellRate": "lots"}}, "config.oversellRate"),
        ("zero-oversell", {"config": {"oversellRate": 0}}, "config.oversellRate"),
        ("unknown-action", {"timeline": [{"at": 0, "explode": "a/x"}]}, "timeline[0].explode"),
        ("no-action", {"timeline": [{"at": 0}]}, "timeline[0]"),
        ("bad-at", {"timeline": [{"at": "soon", "create": job("x")}]}, "timeline[0].at"),
        ("negative-at", {"timeline": [{"at": -1, "create": job("x")}]}, "timeline[0].at"),
        (
            "decreasing-at",
            {"timeline": [{"at": 2, "create": job("x")}, {"at": 1, "create": job("y")}]},
            "timeline[1].at",
        ),
        (
            "generate-name-without-name",
            {"timeline": [{"at": 0, "create": job(None, generate=True)}]},
            "timeline[0].name",
        ),
        (
            "finish-unknown-job",
            {"timeline": [{"at": 0, "create": job("x")}, {"at": 1, "finish": "a/nope"}]},
            "timeline[1].finish",
        ),
        (
            "delete-after-delete",
            {
                "timeline": [
                    {"at": 0, "create": job("x")},
                    {"at": 1, "delete": "a/x"},
                    {"at": 2, "delete": "a/x"},
                ]
            },
            "timeline[2].delete",
        ),
        (
            "invalid-manifest",
            {"timeline": [{"at": 0, "create": job("x", cpu="lots")}]},
            "timeline[0].create.spec.template.spec.containers[0].resources.requests.cpu",
        ),
        ("bad-expect-state", {"expect": {"jobs": {"a/x": "Running"}}}, "expect.jobs.a/x"),
        (
            "bad-expect-quantity",
            {"expect": {"quota": {"root": {"cpu": "many"}}}},
            "expect.quota.root.cpu",
        ),
        ("object-of-unknown-kind", {"objects": [{"kind": "Pod"}]}, "objects[0].kind"),
    ],
)
def test_malformed_scenarios_name_the_field(
    name: str, overrides: dict[str, Any], path: str
) -> None:
    paths = error_paths(scenario(**overrides))
    assert any(p == path or p.startswith(path) for p in paths), (name, paths)


def test_not_a_mapping() -> None:
    assert error_paths([1, 2]) == [""]


def test_generate_name_with_name_is_fine() -> None:
    data = scenario(
        timeline=[{"at": 0, "name": "pi-1", "create": job(None, generate=True)}],
        expect={"jobs": {"a/pi-1": "Admitted"}},
    )
    loaded = load_scenario(data, "t")
    assert check(loaded, run(loaded)) == []


def test_invalid_tree_in_apply_is_rejected_and_recorded_not_an_error() -> None:
    bad = json.loads(json.dumps(TREE))
    bad["spec"]["root"]["children"][0]["min"] = {"cpu": "20"}
    data = scenario(
        timeline=[{"at": 0, "apply": bad}, {"at": 1, "create": job("x")}],
        expect={"jobs": {"a/x": "Admitted"}},
    )
    loaded = load_scenario(data, "t")
    result = run(loaded)
    assert check(loaded, result) == []
    output = json.loads(render_json(result))
    assert output["rejected"][0]["at"] == 0 and output["rejected"][0]["errors"]
    assert "tree rejected" in render_table(result)


def test_json_shape_and_times() -> None:
    loaded = load_scenario(scenario(), "t")
    output = json.loads(render_json(run(loaded)))
    assert [(d["at"], d["action"], d["job"]) for d in output["decisions"]] == [
        (0, "admit", "a/x"),
        (1.5, "admit", "a/y"),
    ]
    assert output["final"]["jobs"]["a/x"] == {"state": "Admitted", "queue": "root-a-a"}
    assert output["final"]["quota"]["root/A"] == {"used": {"cpu": "8"}}
    assert set(output["final"]["quota"]) == {"root", "root/A"}


def test_check_names_every_difference() -> None:
    data = scenario(
        timeline=[{"at": 0, "create": job("x", cpu="8")}, {"at": 1, "create": job("y")}],
        expect={
            "jobs": {"a/x": "Pending", "a/gone": "Admitted"},
            "queues": {"root-a-a": [], "nope": []},
            "preempted": ["a/x"],
            "quota": {"root/A": {"cpu": "1"}, "root/Z": {"cpu": "1"}},
        },
    )
    loaded = load_scenario(data, "t")
    problems = check(loaded, run(loaded))
    text = "\n".join(problems)
    for needle in (
        "job a/x: expected Pending, got Admitted",
        "job a/gone",
        "queue root-a-a: expected [], got ['a/y']",
        "queue nope",
        "preempted a/x",
        "quota root/A cpu: expected used 1, got 8",
        "quota root/Z",
    ):
        assert needle in text, (needle, problems)


def test_table_lists_sections() -> None:
    loaded = load_scenario(scenario(), "t")
    table = render_table(run(loaded))
    for section in ("decisions:", "jobs:", "queues:", "quota (used / min / max):"):
        assert section in table


def test_nodes_and_node_actions() -> None:
    data = scenario(
        nodes=[{"name": "n1", "allocatable": {"cpu": "4"}}],
        timeline=[
            {"at": 0, "create": job("x", cpu="4")},
            {"at": 0, "create": job("y", cpu="4")},
            {"at": 1, "node": {"name": "n2", "allocatable": {"cpu": "4"}}},
            {"at": 2, "removeNode": {"name": "n2"}},
        ],
        expect={"jobs": {"a/x": "Admitted", "a/y": "Admitted"}},
    )
    loaded = load_scenario(data, "t")
    assert check(loaded, run(loaded)) == []


@pytest.mark.parametrize(
    ("entry", "path"),
    [
        ({"at": 1, "ready": "a/nope"}, "timeline[1].ready"),
        (
            {"at": 1, "progress": {"job": "a/x", "ready": 2, "total": 1}},
            "timeline[1].progress.ready",
        ),
        ({"at": 1, "progress": {"job": "a/x", "ready": -1}}, "timeline[1].progress.ready"),
        ({"at": 1, "progress": {"job": "a/x", "ready": 1, "pods": 2}}, "timeline[1].progress.pods"),
        ({"at": 1, "progress": "a/x"}, "timeline[1].progress"),
        (
            {"at": 1, "progress": {"job": "a/x", "ready": 1, "succeeded": 2}},
            "timeline[1].progress.succeeded",
        ),
        (
            {"at": 1, "progress": {"job": "a/x", "ready": 1, "succeeded": -1}},
            "timeline[1].progress.succeeded",
        ),
    ],
)
def test_bad_readiness_entries_name_the_field(entry: dict[str, Any], path: str) -> None:
    """R10's timeline actions: ``ready`` and ``progress`` of a created job, counts checked."""
    paths = error_paths(scenario(timeline=[{"at": 0, "create": job("x")}, entry]))
    assert path in paths, paths


def test_succeeded_pods_reaching_min_success_are_a_finish_and_fewer_are_progress() -> None:
    """The watcher's part for minSuccess, as scenarios play it (scenario 57 end to end)."""
    quorum = job("q")
    quorum["metadata"]["annotations"] = {"usher.io/min-success": "2"}
    quorum["spec"]["parallelism"] = quorum["spec"]["completions"] = 3
    data = scenario(
        timeline=[
            {"at": 0, "create": quorum},
            {"at": 1, "progress": {"job": "a/q", "ready": 3, "succeeded": 1}},
            {"at": 2, "progress": {"job": "a/q", "ready": 3, "succeeded": 2}},
        ]
    )
    steps = load_scenario(data, "t").steps
    assert isinstance(steps[1].event, WorkloadProgress) and steps[1].event.succeeded == 1
    assert steps[2].event == WorkloadFinished(workload=WorkloadKey("a/q"), min_success=2)


def test_progress_counts_default_to_the_jobs_pods() -> None:
    data = scenario(timeline=[{"at": 0, "create": job("x")}, {"at": 1, "ready": "a/x"}])
    step = load_scenario(data, "test.yaml").steps[1]
    assert (step.event.ready, step.event.total) == (1, 1)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("expect", "path"),
    [
        ({"admitted": {"a/x": "soon"}}, "expect.admitted.a/x"),
        ({"moments": {"at": 1}}, "expect.moments"),
        ({"moments": [{"jobs": {}}]}, "expect.moments[0]"),
        ({"moments": [{"at": 1, "when": 2}]}, "expect.moments[0].when"),
        ({"moments": [{"at": 1, "jobs": {"a/x": "Running"}}]}, "expect.moments[0].jobs.a/x"),
        ({"moments": [{"at": 1, "reasons": {"a/x": ""}}]}, "expect.moments[0].reasons.a/x"),
    ],
)
def test_bad_time_based_expectations_name_the_field(expect: dict[str, Any], path: str) -> None:
    assert path in error_paths(scenario(expect=expect))


def test_admission_times_and_moments_are_checked() -> None:
    """``a/y`` (8 cpu of 10) waits behind ``a/x`` until it finishes at 2 s."""
    data = scenario(
        timeline=[
            {"at": 0, "create": job("x")},
            {"at": 1, "create": job("y", cpu="8")},
            {"at": 2, "finish": "a/x"},
        ],
        expect={
            "admitted": {"a/x": 0, "a/y": 2},
            "moments": [
                {"at": 1, "jobs": {"a/y": "Pending"}, "reasons": {"a/y": "QuotaExceeded"}},
                {"at": 2, "jobs": {"a/y": "Admitted", "a/x": "Finished"}},
            ],
        },
    )
    loaded = load_scenario(data, "t")
    assert check(loaded, run(loaded)) == []
    wrong = scenario(
        timeline=data["timeline"],
        expect={
            "admitted": {"a/x": 1, "a/y": 2, "a/never": 3},
            "moments": [
                {"at": 1.5, "jobs": {"a/y": "Admitted"}, "reasons": {"a/y": "BudgetExhausted"}}
            ],
        },
    )
    loaded = load_scenario(wrong, "t")
    assert check(loaded, run(loaded)) == [
        "admitted a/x: expected at 1, was at 0",
        "admitted a/never: expected at 3, was never",
        "at 1.5 job a/y: expected Admitted, got Pending",
        "at 1.5 reason of a/y: expected 'BudgetExhausted'..., got "
        "'QuotaExceeded: root/A cpu 4 used + 8 requested > max 10 x 1.0'",
    ]
