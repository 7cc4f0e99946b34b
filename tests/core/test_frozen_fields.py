"""R16 admitted jobs do not grow: which fields of each kind are frozen while it runs.

Table by table, for every kind of the registry: an edit of a running job (not suspended) is
refused naming exactly the fields that change its pod sets' templates, requests or pod
counts; an edit that changes none of them (its suspend flag, a deadline, a count the kind
caps anyway) is free. ``grew`` says which resources an observed size asks more of.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core.test_kinds import family, job, jobset, rayjob, spark, tfjob, workflow
from usher.core.kinds.frozen import FROZEN_CODE, MOST_REPORTED, frozen_changes, grew

Obj = dict[str, Any]


def edited(make: Callable[[], Obj], *edits: tuple[tuple[str | int, ...], object]) -> Obj:
    """``make()``'s spec with each ``(path under spec, value)`` set (a missing mapping is made)."""
    spec = copy.deepcopy(make()["spec"])
    for path, value in edits:
        node: Any = spec
        for step in path[:-1]:
            node = node.setdefault(step, {}) if isinstance(step, str) else node[step]
        node[path[-1]] = value
    return spec


CPU = ("resources", "requests", "cpu")
RAY_WORKERS = ("rayClusterSpec", "workerGroupSpecs")
GROW = (
    # kind, maker, edits, the fields named
    ("Job", job, [(("template", "spec", "containers", 0, *CPU), "95")],
     ["spec.template.spec.containers[0].resources.requests.cpu"]),
    ("Job", job, [(("completions",), 3)], ["spec.completions"]),
    ("Job", job, [(("parallelism",), 1)], ["spec.parallelism"]),  # shrinking: refused too
    ("Job", job, [(("template", "spec", "containers", 0, "env"), [{"name": "A"}])],
     ["spec.template.spec.containers[0].env"]),  # the whole pod template
    ("Job", job, [(("template", "spec", "containers", 0, "resources", "limits"), {"cpu": "9"})],
     ["spec.template.spec.containers[0].resources.limits"]),
    ("TFJob", tfjob, [(("tfReplicaSpecs", "Worker", "replicas"), 4)],
     ["spec.tfReplicaSpecs.Worker.replicas"]),
    ("TFJob", tfjob, [(("tfReplicaSpecs", "Chief"), {"replicas": 1, "template": {}})],
     ["spec.tfReplicaSpecs.Chief"]),  # a new replica type
    ("RayJob", rayjob, [((*RAY_WORKERS, 0, "replicas"), 3)],
     ["spec.rayClusterSpec.workerGroupSpecs[0].replicas"]),
    ("RayJob", rayjob, [((*RAY_WORKERS, 0, "numOfHosts"), 4)],
     ["spec.rayClusterSpec.workerGroupSpecs[0].numOfHosts"]),
    ("RayJob", rayjob,
     [(("rayClusterSpec", "headGroupSpec", "template", "spec", "containers", 0, *CPU), "8")],
     ["spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].resources.requests.cpu"]),
    ("RayJob", rayjob, [(RAY_WORKERS, [{"groupName": "a", "replicas": 1}] * 2)],
     ["spec.rayClusterSpec.workerGroupSpecs"]),  # a group more: the list is replaced
    ("JobSet", jobset, [(("replicatedJobs", 0, "replicas"), 4)],
     ["spec.replicatedJobs[0].replicas"]),
    ("JobSet", jobset, [(("replicatedJobs", 0, "template", "spec", "parallelism"), 5)],
     ["spec.replicatedJobs[0].template.spec.parallelism"]),
    ("SparkApplication", spark, [(("executor", "instances"), 5)], ["spec.executor.instances"]),
    ("SparkApplication", spark, [(("driver", "cores"), 4)], ["spec.driver.cores"]),
    ("SparkApplication", spark, [(("dynamicAllocation",), {"enabled": True, "maxExecutors": 9})],
     ["spec.dynamicAllocation"]),  # absent before: named where it starts
    ("Workflow", workflow, [(("parallelism",), 4)], ["spec.parallelism"]),
    ("Workflow", workflow, [(("templates", 1, "container", *CPU), "6")],
     ["spec.templates[1].container.resources.requests.cpu"]),
)  # fmt: skip


@pytest.mark.parametrize(("kind", "make", "edits", "named"), GROW)
def test_a_change_to_what_was_admitted_is_refused_naming_its_field(
    kind: str, make: Callable[[], Obj], edits: list[Any], named: list[str]
) -> None:
    old = make()["spec"]
    problems = frozen_changes(family(kind), old, edited(make, *edits))
    assert [p.path for p in problems] == named
    assert {p.code for p in problems} == {FROZEN_CODE}
    for problem in problems:
        assert f"immutable while the {kind} is not suspended" in problem.message
    assert old == make()["spec"]  # nothing it was given is touched


FREE = (
    ("Job", job, [(("suspend",), False)]),
    ("Job", job, [(("activeDeadlineSeconds",), 60), (("ttlSecondsAfterFinished",), 5)]),
    ("Job", job, [(("parallelism",), 4)]),  # 2 completions cap it: still 2 pods
    ("TFJob", tfjob, [(("runPolicy", "suspend"), False), (("runPolicy", "backoffLimit"), 3)]),
    ("RayJob", rayjob, [(("suspend",), False), (("shutdownAfterJobFinishes",), True)]),
    ("JobSet", jobset, [(("suspend",), False), (("failurePolicy",), {"maxRestarts": 2})]),
    ("SparkApplication", spark, [(("suspend",), False), (("timeToLiveSeconds",), 60)]),
    ("Workflow", workflow, [(("suspend",), False), (("activeDeadlineSeconds",), 60)]),
)


@pytest.mark.parametrize(("kind", "make", "edits"), FREE)
def test_a_change_that_leaves_the_admitted_shape_alone_is_free(
    kind: str, make: Callable[[], Obj], edits: list[Any]
) -> None:
    assert frozen_changes(family(kind), make()["spec"], edited(make, *edits)) == []


def test_a_bool_for_a_count_is_a_change_and_malformed_specs_do_not_raise() -> None:
    jobs = family("Job")
    spec = edited(job, (("completions",), 1))
    flipped = edited(job, (("completions",), True))
    assert [p.path for p in frozen_changes(jobs, spec, flipped)] == ["spec.completions"]
    assert frozen_changes(jobs, None, "not a spec") == []
    named = frozen_changes(jobs, {"template": "x"}, {"template": 3})
    assert [p.path for p in named] == ["spec.template"]


def test_a_flood_of_changes_is_reported_bounded() -> None:
    containers = [{"name": f"c{i}", "resources": {"requests": {"cpu": "1"}}} for i in range(50)]
    old = {"template": {"spec": {"containers": containers}}}
    grown = copy.deepcopy(old)
    for container in grown["template"]["spec"]["containers"]:
        container["resources"]["requests"]["cpu"] = "2"
    problems = frozen_changes(family("Job"), old, grown)
    assert len(problems) == MOST_REPORTED + 1
    assert (
        problems[-1].message == f"and {50 - MOST_REPORTED} more changed fields that are immutable"
    )


@pytest.mark.parametrize(
    ("admitted", "observed", "resources"),
    [
        ({"cpu": 10_000}, {"cpu": 95_000}, ["cpu"]),
        ({"cpu": 10_000}, {"cpu": 10_000}, []),
        ({"cpu": 10_000, "memory": 4}, {"cpu": 2_000}, []),  # shrinking is harmless
        ({"cpu": 10_000}, {"cpu": 5_000, "nvidia.com/gpu": 1}, ["nvidia.com/gpu"]),
    ],
)
def test_grew_names_the_resources_asked_beyond_the_admission(
    admitted: dict[str, int], observed: dict[str, int], resources: list[str]
) -> None:
    assert grew(admitted, observed) == resources


def _leaf_paths(node: object, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    if isinstance(node, dict):
        return [path] + [p for k, v in node.items() for p in _leaf_paths(v, (*path, k))]
    if isinstance(node, list):
        return [path] + [p for i, v in enumerate(node) for p in _leaf_paths(v, (*path, i))]
    return [path]


def _view(kind: str, spec: Obj) -> list[tuple[str, int, object, object]]:
    sources = family(kind).pod_sets(spec, [])
    return [(s.name, s.count, s.template, s.requests) for s in sources]


HOSTILE = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**6) | st.text(max_size=5) | st.just("95"),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
MAKERS = {"Job": job, "TFJob": tfjob, "RayJob": rayjob, "JobSet": jobset,
          "SparkApplication": spark, "Workflow": workflow}  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(sorted(MAKERS)), data=st.data(), value=HOSTILE)
def test_no_change_that_alters_a_pod_set_is_ever_free(kind: str, data: Any, value: object) -> None:
    """Any value at any place of any kind's spec: never raises, and whenever a pod set's
    name, count, template or requests differ afterwards, some field is named."""
    old = MAKERS[kind]()["spec"]
    path = data.draw(st.sampled_from([p for p in _leaf_paths(old) if p]))
    new = edited(MAKERS[kind], (path, value))
    problems = frozen_changes(family(kind), old, new)
    if _view(kind, old) != _view(kind, new):
        assert problems, (path, value)
    assert all(p.code == FROZEN_CODE for p in problems)
