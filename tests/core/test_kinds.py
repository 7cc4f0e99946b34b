"""The job-kind registry (usher/core/kinds): every family, table-driven.

Per kind: pod sets and requests from the real spec fields, the suspend path, the zone patch,
finished/active from status, and that the fake kubelet's status reads back through the same
family's predicates (what the emulator writes is what the watcher understands).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from usher.core.intake.workload import extract_workload, suspend_path
from usher.core.kinds import FAMILIES, OBSERVED, REJECTED, SUPPORTED_KINDS, KindFamily
from usher.core.kinds.family import ZONE_LABEL
from usher.core.model.errors import WorkloadInvalid

GI, MI = 2**30, 2**20
Obj = dict[str, Any]


def pod(cpu: str, memory: str) -> Obj:
    resources = {"requests": {"cpu": cpu, "memory": memory}}
    return {"spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]}}


def meta(name: str) -> Obj:
    return {"name": name, "namespace": "user-a", "resourceVersion": "7"}


def job() -> Obj:
    spec = {"suspend": True, "parallelism": 3, "completions": 2, "template": pod("1", "1Gi")}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("j"), "spec": spec}


def tfjob() -> Obj:
    replicas = {"Worker": {"replicas": 2, "template": pod("2", "2Gi")},
                "PS": {"replicas": 1, "template": pod("1", "1Gi")}}  # fmt: skip
    spec = {"runPolicy": {"suspend": True}, "tfReplicaSpecs": replicas}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": meta("t"), "spec": spec}


def rayjob() -> Obj:
    cluster = {
        "headGroupSpec": {"template": pod("1", "1Gi")},
        "workerGroupSpecs": [
            {"groupName": "gpu", "replicas": 2, "numOfHosts": 2, "template": pod("4", "8Gi")}
        ],
    }
    spec = {"suspend": True, "rayClusterSpec": cluster}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta("r"), "spec": spec}


def jobset() -> Obj:
    job_spec = {"parallelism": 2, "template": pod("1", "1Gi")}
    replicated = [{"name": "workers", "replicas": 3, "template": {"spec": job_spec}}]
    spec = {"suspend": True, "replicatedJobs": replicated}
    api = "jobset.x-k8s.io/v1alpha2"
    return {"apiVersion": api, "kind": "JobSet", "metadata": meta("s"), "spec": spec}


def spark(**extra: Any) -> Obj:
    spec: Obj = {
        "suspend": True,
        "type": "Scala",
        "mode": "cluster",
        "driver": {"cores": 1, "memory": "512m"},
        "executor": {"instances": 3, "cores": 2, "memory": "4g"},
        **extra,
    }
    api = "sparkoperator.k8s.io/v1beta2"
    return {"apiVersion": api, "kind": "SparkApplication", "metadata": meta("p"), "spec": spec}


def workflow(**extra: Any) -> Obj:
    def container(cpu: str, memory: str) -> Obj:
        return {"image": "i", "resources": {"requests": {"cpu": cpu, "memory": memory}}}

    templates = [
        {"name": "main", "steps": [[{"name": "a", "template": "small"}]]},
        {"name": "small", "container": container("1", "4Gi")},
        {"name": "big", "script": {**container("3", "1Gi"), "source": "echo"},
         "sidecars": [{"name": "s", **container("500m", "1Gi")}]},
        {"name": "hold", "suspend": {}},
    ]  # fmt: skip
    spec: Obj = {"suspend": True, "entrypoint": "main", "parallelism": 2, "templates": templates}
    spec.update(extra)
    api = "argoproj.io/v1alpha1"
    return {"apiVersion": api, "kind": "Workflow", "metadata": meta("w"), "spec": spec}


def family(kind: str) -> KindFamily:
    return next(f for f in OBSERVED if f.kind == kind)


# --------------------------------------------------------------------------- the registry


def test_registry_is_one_table_every_layer_reads() -> None:
    assert [f.kind for f in FAMILIES] == [
        "Job", "TFJob", "PyTorchJob", "MPIJob", "RayJob", "JobSet", "SparkApplication",
        "Workflow",
    ]  # fmt: skip
    assert [f.kind for f in REJECTED] == ["XGBoostJob", "PaddleJob", "MXJob"]
    assert len({f.storage for f in OBSERVED}) == len(OBSERVED)
    for f in FAMILIES:
        assert f.kubelet is not None and f.supported
        assert set(f.emulated_versions) <= set(f.versions)
        for kind_id in f.kind_ids:
            assert kind_id in SUPPORTED_KINDS
            assert suspend_path(kind_id) == f.suspend_path
    assert not any(f.supported for f in REJECTED)


# --------------------------------------------------------------------------- pod sets

EXTRACTED = [
    ("job", job, [("main", 2, {"cpu": 1000, "memory": GI})]),
    ("tfjob", tfjob, [("PS", 1, {"cpu": 1000, "memory": GI}),
                      ("Worker", 2, {"cpu": 2000, "memory": 2 * GI})]),
    ("rayjob", rayjob, [("head", 1, {"cpu": 1000, "memory": GI}),
                        ("gpu", 4, {"cpu": 4000, "memory": 8 * GI})]),
    ("jobset", jobset, [("workers", 6, {"cpu": 1000, "memory": GI})]),
    # driver: 512Mi + max(10%, 384Mi); executors: 4Gi + 10% (409.6Mi, rounded up to a byte)
    ("spark", spark, [("driver", 1, {"cpu": 1000, "memory": 896 * MI}),
                      ("executor", 3, {"cpu": 2000, "memory": 4 * GI + -(-4 * GI // 10)})]),
    # 2 pods at once, each as large as the largest template resource by resource:
    # cpu from "big" (3 + 0.5 sidecar), memory from "small" (4Gi; "big" is 1Gi + 1Gi).
    ("workflow", workflow, [("main", 2, {"cpu": 3500, "memory": 4 * GI})]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "make", "expected"), EXTRACTED, ids=[e[0] for e in EXTRACTED])
def test_pod_sets_come_from_the_kinds_own_fields(
    name: str, make: Any, expected: list[tuple[str, int, dict[str, int]]]
) -> None:
    observed = extract_workload(make(), created_ms=0)
    assert [(p.name, p.count, p.requests) for p in observed.pod_sets] == expected
    assert observed.suspended is True


SPARK_CASES = [
    ("python-overhead", {"type": "Python"}, "driver", 1, {"cpu": 1000, "memory": 896 * MI}),
    ("python-executor", {"type": "Python"}, "executor", 3,
     {"cpu": 2000, "memory": 4 * GI + -(-4 * GI * 2 // 5)}),
    ("explicit-overhead",
     {"executor": {"instances": 2, "coreRequest": "500m", "memory": "1g",
                   "memoryOverhead": "256m", "gpu": {"name": "nvidia.com/gpu", "quantity": 1}}},
     "executor", 2, {"cpu": 500, "memory": GI + 256 * MI, "nvidia.com/gpu": 1}),
    ("dynamic-allocation",
     {"dynamicAllocation": {"enabled": True, "initialExecutors": 1, "maxExecutors": 8}},
     "executor", 8, {"cpu": 2000, "memory": 4 * GI + -(-4 * GI // 10)}),
    ("factor", {"memoryOverheadFactor": "0.5"}, "executor", 3, {"cpu": 2000, "memory": 6 * GI}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "extra", "pod_set", "pods", "requests"), SPARK_CASES, ids=[c[0] for c in SPARK_CASES]
)
def test_spark_sizes_pods_as_the_operator_does(
    name: str, extra: Obj, pod_set: str, pods: int, requests: dict[str, int]
) -> None:
    observed = extract_workload(spark(**extra), created_ms=0)
    (found,) = [p for p in observed.pod_sets if p.name == pod_set]
    assert (found.count, found.requests) == (pods, requests)


REJECTED_MANIFESTS = [
    ("spark-bad-memory", lambda: spark(driver={"cores": 1, "memory": "lots"}),
     "spec.driver.memory", "invalid-quantity"),
    ("spark-no-executor", lambda: {**spark(), "spec": {"driver": {"cores": 1}}},
     "spec.executor", "missing-field"),
    ("workflow-unbounded", lambda: workflow(parallelism=None), "spec.parallelism",
     "missing-field"),
    ("workflow-template-ref", lambda: workflow(workflowTemplateRef={"name": "t"}),
     "spec.workflowTemplateRef", "unsupported-field"),
    ("workflow-no-pods", lambda: workflow(templates=[{"name": "hold", "suspend": {}}]),
     "spec.templates", "missing-field"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "make", "path", "code"), REJECTED_MANIFESTS, ids=[r[0] for r in REJECTED_MANIFESTS]
)
def test_what_cannot_be_sized_is_rejected_with_its_path(
    name: str, make: Any, path: str, code: str
) -> None:
    with pytest.raises(WorkloadInvalid) as rejected:
        extract_workload(make(), created_ms=0)
    assert (path, code) in {(e.path, e.code) for e in rejected.value.errors}


# --------------------------------------------------------------------------- zone patches

MANIFESTS = [job, tfjob, rayjob, jobset, spark, workflow]


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        out[key] = _merge(out.get(key), value)
    return out


def _zones(f: KindFamily, spec: Obj) -> list[object]:
    return [
        (t.get("spec") or {}).get("nodeSelector", {}).get(ZONE_LABEL)
        if isinstance(t, dict)
        else None
        for t in f.templates(spec)
    ]


@pytest.mark.parametrize("make", MANIFESTS, ids=[m.__name__ for m in MANIFESTS])
def test_selector_patch_pins_every_pod_of_the_kind(make: Any) -> None:
    manifest = make()
    f = family(manifest["kind"])
    assert set(_zones(f, manifest["spec"])) == {None}
    patched = _merge(copy.deepcopy(manifest["spec"]), f.selector_patch(manifest["spec"], "z"))
    assert _zones(f, patched) and set(_zones(f, patched)) == {"z"}
    assert extract_workload({**manifest, "spec": patched}, created_ms=0).pod_sets == (
        extract_workload(manifest, created_ms=0).pod_sets
    )


def test_spark_and_argo_zone_goes_where_their_controllers_read_it() -> None:
    assert family("SparkApplication").selector_patch(spark()["spec"], "z") == {
        "driver": {"nodeSelector": {ZONE_LABEL: "z"}},
        "executor": {"nodeSelector": {ZONE_LABEL: "z"}},
    }
    assert family("Workflow").selector_patch(workflow()["spec"], "z") == {
        "nodeSelector": {ZONE_LABEL: "z"}
    }


# --------------------------------------------------------------------------- finished / active

STATUSES = [
    ("Job", {"conditions": [{"type": "Complete", "status": "True",
                             "lastTransitionTime": "2024-01-01T00:00:01Z"}]}, True, False),
    ("Job", {"active": 2}, None, True),
    ("TFJob", {"conditions": [{"type": "Failed", "status": "True"}],
               "completionTime": "2024-01-01T00:00:01Z"}, False, False),
    ("TFJob", {"replicaStatuses": {"Worker": {"active": 1}}}, None, True),
    ("RayJob", {"jobStatus": "STOPPED", "endTime": "2024-01-01T00:00:01Z"}, False, False),
    ("RayJob", {"jobDeploymentStatus": "Running"}, None, True),
    ("JobSet", {"terminalState": "Completed"}, True, False),
    ("JobSet", {"replicatedJobsStatus": [{"name": "w", "ready": 1}]}, None, True),
    ("SparkApplication", {"applicationState": {"state": "COMPLETED"},
                          "terminationTime": "2024-01-01T00:00:01Z"}, True, False),
    ("SparkApplication", {"applicationState": {"state": "SUBMISSION_FAILED"}}, False, False),
    ("SparkApplication", {"applicationState": {"state": "RUNNING"}}, None, True),
    ("SparkApplication", {"applicationState": {"state": "SUSPENDED"}}, None, False),
    ("Workflow", {"phase": "Error", "finishedAt": "2024-01-01T00:00:01Z"}, False, False),
    ("Workflow", {"phase": "Running", "nodes": {"n": {"type": "Pod", "phase": "Pending"}}},
     None, True),
    ("Workflow", {"phase": "Running", "nodes": {"n": {"type": "Steps", "phase": "Running"}}},
     None, False),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "status", "succeeded", "active"), STATUSES)
def test_finished_and_active_read_the_controllers_status(
    kind: str, status: Obj, succeeded: bool | None, active: bool
) -> None:
    f = family(kind)
    outcome = f.outcome({"status": status})
    assert (outcome.succeeded if outcome is not None else None) == succeeded
    assert f.active({"status": status}) is active
    if outcome is not None and "1Z" in str(status):
        assert outcome.finished_ms == 1_704_067_201_000


# --------------------------------------------------------------------------- the fake kubelet


@pytest.mark.parametrize("make", MANIFESTS, ids=[m.__name__ for m in MANIFESTS])
@pytest.mark.parametrize("failed", [False, True])
def test_the_kubelets_status_reads_back_through_the_familys_predicates(
    make: Any, failed: bool
) -> None:
    manifest = make()
    f = family(manifest["kind"])
    driver = f.kubelet
    assert driver is not None
    now = "2024-01-01T00:00:01Z"
    assert driver.wants_suspended(manifest)
    held = {**manifest, "status": driver.suspend(manifest, now)}
    assert driver.phase(held) == "suspended"
    assert f.outcome(held) is None and not f.active(held)
    running_spec = _merge(manifest["spec"], _nested(f.suspend_path, False))
    started = {**held, "spec": running_spec}
    assert not driver.wants_suspended(started)
    running = {**started, "status": driver.run(started, now)}
    assert driver.phase(running) == "running"
    assert f.outcome(running) is None and f.active(running)
    done = {**running, "status": driver.finish(running, now, failed)}
    assert driver.phase(done) == "finished"
    outcome = f.outcome(done)
    assert outcome is not None and outcome.succeeded is not failed
    assert not f.active(done)
    assert manifest == make()  # the kubelet never touched what it was given


def _nested(path: tuple[str, ...], value: object) -> Obj:
    out: Obj = {path[-1]: value}
    for key in reversed(path[:-1]):
        out = {key: out}
    return out
