"""Job manifests of every supported kind become the exact ``WorkloadObserved`` admission needs."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import Millis, PodSet, WorkloadObserved, Zone
from tests.builders.manifests import batch_job
from usher.core.intake.workload import (
    SUPPORTED_KINDS,
    extract_priority_class,
    extract_workload,
    observed_errors,
    unrequested_containers,
)
from usher.core.model.errors import InputError, WorkloadInvalid

GI = 2**30
MI = 2**20

# The Job of scenarios/01-walkthrough-round.yaml (kube-queue's walkthrough), verbatim:
# generateName only.
WALKTHROUGH_JOB_YAML = """
apiVersion: batch/v1
kind: Job
metadata: {generateName: pi-, namespace: user-a}
spec:
  suspend: true
  completions: 6
  parallelism: 6
  template:
    spec:
      containers:
        - name: pi
          image: perl:5.34.0
          command: [sleep, 1d]
          resources:
            requests: {cpu: "10", memory: 10Gi}
            limits: {cpu: "10", memory: 10Gi}
      restartPolicy: Never
"""

Manifest = dict[str, Any]


def load(text: str) -> Manifest:
    loaded: Manifest = yaml.safe_load(text)
    return loaded


def pod(cpu: str, memory: str | None = None, **spec: Any) -> dict[str, Any]:
    requests = {"cpu": cpu} if memory is None else {"cpu": cpu, "memory": memory}
    return {"spec": {"containers": [{"name": "c", "resources": {"requests": requests}}], **spec}}


def job(**spec: Any) -> Manifest:
    return batch_job("j", "ns", template=pod("1"), suspend=None, spec=spec)


def extract(manifest: object, name: str | None = None) -> WorkloadObserved:
    return extract_workload(manifest, created_ms=Millis(42), name=name)


def errors_of(manifest: object, name: str | None = None) -> list[tuple[str, str]]:
    with pytest.raises(WorkloadInvalid) as caught:
        extract(manifest, name)
    return [(e.path, e.code) for e in caught.value.errors]


def test_walkthrough_job_with_generate_name_and_given_name() -> None:
    assert extract(load(WALKTHROUGH_JOB_YAML), name="pi-8k5pn") == WorkloadObserved(
        workload="user-a/pi-8k5pn",
        namespace="user-a",
        name="pi-8k5pn",
        kind="batch/v1/Job",
        zone="default",
        created_ms=42,
        pod_sets=[PodSet(name="main", count=6, requests={"cpu": 10_000, "memory": 10 * GI})],
        suspended=True,
    )


def test_identity_labels_and_metadata() -> None:
    manifest = job()
    manifest["metadata"] = {
        "name": "train",
        "namespace": "team",
        "uid": "u-1",
        "resourceVersion": "77",
        "labels": {
            "usher.io/zone": "zone-a",
            "quota.scheduling.alibabacloud.com/name": "Department-b",
            "other": "x",
        },
    }
    observed = extract(manifest)
    assert (observed.workload, observed.uid, observed.resource_version) == (
        "team/train",
        "u-1",
        "77",
    )
    assert (observed.zone, observed.quota_name) == ("zone-a", "Department-b")


def test_defaults_namespace_zone_and_not_suspended() -> None:
    manifest = job()
    manifest["metadata"] = {"name": "j"}
    observed = extract(manifest)
    assert (observed.workload, observed.zone, observed.quota_name) == ("default/j", "default", None)
    assert (observed.suspended, observed.priority_class, observed.priority) == (False, None, None)


def test_given_name_overrides_metadata_name() -> None:
    assert extract(job(), name="other").workload == "ns/other"


@pytest.mark.parametrize(
    ("spec", "count"),
    [
        pytest.param({}, 1, id="defaults-to-one"),
        pytest.param({"parallelism": 4}, 4, id="parallelism"),
        pytest.param({"parallelism": 4, "completions": 2}, 2, id="completions-below-parallelism"),
        pytest.param({"parallelism": 4, "completions": 10}, 4, id="completions-above-parallelism"),
        pytest.param({"completions": 3}, 1, id="completions-only"),
        pytest.param({"parallelism": 0}, 0, id="zero-parallelism"),
    ],
)
def test_job_pod_count(spec: dict[str, Any], count: int) -> None:
    [pod_set] = extract(job(**spec)).pod_sets
    assert (pod_set.name, pod_set.count) == ("main", count)


@pytest.mark.parametrize(
    ("pod_spec", "expected"),
    [
        pytest.param(
            {"containers": [{"name": "a"}]},
            {},
            id="requests-nothing",
        ),
        pytest.param(
            {
                "containers": [
                    {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                    {"resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "2Gi"}}},
                ]
            },
            {"cpu": 1500, "memory": 3 * GI},
            id="containers-summed-limit-stands-in",
        ),
        pytest.param(
            {
                "containers": [
                    {
                        "resources": {
                            "requests": {"cpu": "1"},
                            "limits": {"cpu": "4", "nvidia.com/gpu": 1},
                        }
                    }
                ]
            },
            {"cpu": 1000, "nvidia.com/gpu": 1},
            id="request-wins-over-limit",
        ),
        pytest.param(
            {
                "containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                "initContainers": [
                    {"resources": {"requests": {"cpu": "3"}}},
                    {"resources": {"limits": {"memory": "512Mi"}}},
                ],
            },
            {"cpu": 3000, "memory": GI},
            id="max-with-each-init-container",
        ),
        pytest.param(
            {
                "containers": [{"resources": {"requests": {"cpu": "1"}}}],
                "initContainers": [
                    {"resources": {"requests": {"cpu": "2"}}},
                    {"restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
                    {"resources": {"requests": {"cpu": "2"}}},
                ],
            },
            {"cpu": 2500},
            id="sidecar-adds-to-later-init-and-containers",
        ),
        pytest.param(
            {
                "containers": [{"resources": {"requests": {"cpu": "1"}}}],
                "overhead": {"cpu": "250m", "memory": "120Mi"},
            },
            {"cpu": 1250, "memory": 120 * MI},
            id="overhead-added",
        ),
        pytest.param(
            {"containers": [{"resources": {"requests": {"cpu": "0", "memory": "1Gi"}}}]},
            {"memory": GI},
            id="zero-request-left-out",
        ),
    ],
)
def test_per_pod_requests(pod_spec: dict[str, Any], expected: dict[str, int]) -> None:
    [pod_set] = extract(job(template={"spec": pod_spec})).pod_sets
    assert pod_set.requests == expected


def test_priority_from_pod_template() -> None:
    observed = extract(job(template=pod("1", priorityClassName="high", priority=7)))
    assert (observed.priority_class, observed.priority) == ("high", 7)


def _kubeflow(kind: str, api: str, field: str, replicas: dict[str, Any], **spec: Any) -> Manifest:
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": "kf", "namespace": "ml"},
        "spec": {field: replicas, **spec},
    }


TF_REPLICAS = {
    "Worker": {"replicas": 4, "template": pod("2", "4Gi")},
    "PS": {"replicas": 2, "template": pod("1", "2Gi")},
    "Chief": {"template": pod("1", "1Gi")},
}


@pytest.mark.parametrize(
    ("kind", "api", "field", "replicas", "expected"),
    [
        pytest.param(
            "TFJob",
            "kubeflow.org/v1",
            "tfReplicaSpecs",
            TF_REPLICAS,
            [
                PodSet(name="Chief", count=1, requests={"cpu": 1000, "memory": GI}),
                PodSet(name="PS", count=2, requests={"cpu": 1000, "memory": 2 * GI}),
                PodSet(name="Worker", count=4, requests={"cpu": 2000, "memory": 4 * GI}),
            ],
            id="tfjob",
        ),
        pytest.param(
            "PyTorchJob",
            "kubeflow.org/v1",
            "pytorchReplicaSpecs",
            {
                "Master": {"replicas": 1, "template": pod("4")},
                "Worker": {"replicas": 3, "template": pod("8")},
            },
            [
                PodSet(name="Master", count=1, requests={"cpu": 4000}),
                PodSet(name="Worker", count=3, requests={"cpu": 8000}),
            ],
            id="pytorchjob",
        ),
        pytest.param(
            "MPIJob",
            "kubeflow.org/v1",
            "mpiReplicaSpecs",
            {
                "Worker": {"replicas": 2, "template": pod("16")},
                "Launcher": {"replicas": 1, "template": pod("500m")},
            },
            [
                PodSet(name="Launcher", count=1, requests={"cpu": 500}),
                PodSet(name="Worker", count=2, requests={"cpu": 16_000}),
            ],
            id="mpijob-v1",
        ),
        pytest.param(
            "MPIJob",
            "kubeflow.org/v2beta1",
            "mpiReplicaSpecs",
            {"Launcher": {"template": pod("1")}, "Worker": {"replicas": 0, "template": pod("1")}},
            [
                PodSet(name="Launcher", count=1, requests={"cpu": 1000}),
                PodSet(name="Worker", count=0, requests={"cpu": 1000}),
            ],
            id="mpijob-v2beta1",
        ),
    ],
)
def test_kubeflow_kinds(
    kind: str, api: str, field: str, replicas: dict[str, Any], expected: list[PodSet]
) -> None:
    manifest = _kubeflow(kind, api, field, replicas, runPolicy={"suspend": True})
    observed = extract(manifest)
    assert observed.kind == f"{api}/{kind}"
    assert observed.pod_sets == expected
    assert observed.suspended is True


def test_kubeflow_run_policy_priority_class_wins() -> None:
    replicas = copy.deepcopy(TF_REPLICAS)
    replicas["PS"]["template"]["spec"]["priorityClassName"] = "from-template"
    manifest = _kubeflow("TFJob", "kubeflow.org/v1", "tfReplicaSpecs", replicas)
    assert extract(manifest).priority_class == "from-template"
    manifest["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": "from-policy"}}
    observed = extract(manifest)
    assert (observed.priority_class, observed.suspended) == ("from-policy", False)


def test_first_pod_set_with_priority_wins() -> None:
    replicas = copy.deepcopy(TF_REPLICAS)
    replicas["Worker"]["template"]["spec"].update(priorityClassName="worker-class", priority=9)
    replicas["PS"]["template"]["spec"].update(priorityClassName="ps-class", priority=5)
    observed = extract(_kubeflow("TFJob", "kubeflow.org/v1", "tfReplicaSpecs", replicas))
    # Pod sets are sorted by name: Chief (none), PS, Worker.
    assert (observed.priority_class, observed.priority) == ("ps-class", 5)


def _ray(api: str = "ray.io/v1", **cluster: Any) -> Manifest:
    return {
        "apiVersion": api,
        "kind": "RayJob",
        "metadata": {"name": "ray", "namespace": "ml"},
        "spec": {
            "suspend": True,
            "rayClusterSpec": {"headGroupSpec": {"template": pod("2", "8Gi")}, **cluster},
        },
    }


@pytest.mark.parametrize("api", ["ray.io/v1", "ray.io/v1alpha1"])
def test_rayjob(api: str) -> None:
    manifest = _ray(
        api,
        workerGroupSpecs=[
            {"groupName": "gpu", "replicas": 2, "template": pod("4", "16Gi")},
            {"groupName": "cpu", "template": pod("1")},
            {"groupName": "tpu", "replicas": 2, "numOfHosts": 4, "template": pod("1")},
        ],
    )
    observed = extract(manifest)
    assert observed.kind == f"{api}/RayJob"
    assert observed.suspended is True
    assert observed.pod_sets == [
        PodSet(name="head", count=1, requests={"cpu": 2000, "memory": 8 * GI}),
        PodSet(name="gpu", count=2, requests={"cpu": 4000, "memory": 16 * GI}),
        PodSet(name="cpu", count=1, requests={"cpu": 1000}),
        PodSet(name="tpu", count=8, requests={"cpu": 1000}),
    ]


def _jobset(*replicated: dict[str, Any]) -> Manifest:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ml"},
        "spec": {"suspend": True, "replicatedJobs": list(replicated)},
    }


def test_jobset() -> None:
    manifest = _jobset(
        {"name": "driver", "template": {"spec": {"template": pod("1")}}},
        {
            "name": "workers",
            "replicas": 3,
            "template": {"spec": {"parallelism": 4, "completions": 2, "template": pod("2")}},
        },
    )
    observed = extract(manifest)
    assert observed.kind == "jobset.x-k8s.io/v1alpha2/JobSet"
    assert observed.pod_sets == [
        PodSet(name="driver", count=1, requests={"cpu": 1000}),
        PodSet(name="workers", count=6, requests={"cpu": 2000}),
    ]


def test_supported_kinds() -> None:
    assert SUPPORTED_KINDS == (
        "batch/v1/Job",
        "kubeflow.org/v1/TFJob",
        "kubeflow.org/v1/PyTorchJob",
        "kubeflow.org/v1/MPIJob",
        "kubeflow.org/v2beta1/MPIJob",
        "ray.io/v1/RayJob",
        "ray.io/v1alpha1/RayJob",
        "jobset.x-k8s.io/v1alpha2/JobSet",
        "sparkoperator.k8s.io/v1beta2/SparkApplication",
        "argoproj.io/v1alpha1/Workflow",
    )


def _with(manifest: Manifest, path: list[Any], value: object) -> Manifest:
    changed = copy.deepcopy(manifest)
    target: Any = changed
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return changed


_DELETE = object()
C0 = ["spec", "template", "spec", "containers", 0]

ERROR_CASES: list[Any] = [
    pytest.param(
        _with(job(), ["apiVersion"], _DELETE),
        [("apiVersion", "missing-field")],
        id="no-api-version",
    ),
    pytest.param(_with(job(), ["kind"], _DELETE), [("kind", "missing-field")], id="no-kind"),
    pytest.param(_with(job(), ["kind"], 5), [("kind", "invalid-type")], id="kind-not-string"),
    pytest.param(
        _with(job(), ["kind"], "CronJob"), [("kind", "unsupported-kind")], id="unsupported-kind"
    ),
    pytest.param(
        _with(job(), ["apiVersion"], "kubeflow.org/v2"),
        [("kind", "unsupported-kind")],
        id="unsupported-api-version",
    ),
    pytest.param(
        _with(job(), ["metadata", "name"], _DELETE),
        [("metadata.name", "missing-field")],
        id="no-name",
    ),
    pytest.param(
        _with(job(), ["metadata", "name"], 3),
        [("metadata.name", "invalid-type")],
        id="name-not-string",
    ),
    pytest.param(
        _with(job(), ["metadata"], "m"),
        [("metadata", "invalid-type"), ("metadata.name", "missing-field")],
        id="metadata-not-mapping",
    ),
    pytest.param(
        _with(job(), ["metadata", "namespace"], 1),
        [("metadata.namespace", "invalid-type")],
        id="namespace-not-string",
    ),
    pytest.param(
        _with(job(), ["metadata", "labels"], {"usher.io/zone": 1}),
        [("metadata.labels.usher.io/zone", "invalid-type")],
        id="zone-label-not-string",
    ),
    pytest.param(
        _with(job(), ["metadata", "labels"], ["x"]),
        [("metadata.labels", "invalid-type")],
        id="labels-not-mapping",
    ),
    pytest.param(_with(job(), ["spec"], _DELETE), [("spec", "missing-field")], id="no-spec"),
    pytest.param(_with(job(), ["spec"], []), [("spec", "invalid-type")], id="spec-not-mapping"),
    pytest.param(
        _with(job(), ["spec", "template"], _DELETE),
        [("spec.template", "missing-field")],
        id="no-pod-template",
    ),
    pytest.param(
        _with(job(), ["spec", "template"], "t"),
        [("spec.template", "invalid-type")],
        id="template-not-mapping",
    ),
    pytest.param(
        _with(job(), ["spec", "template", "spec"], _DELETE),
        [("spec.template.spec", "missing-field")],
        id="no-pod-spec",
    ),
    pytest.param(
        _with(job(), ["spec", "template", "spec", "containers"], _DELETE),
        [("spec.template.spec.containers", "missing-field")],
        id="no-containers",
    ),
    pytest.param(
        _with(job(), ["spec", "template", "spec", "containers"], []),
        [("spec.template.spec.containers", "missing-field")],
        id="empty-containers",
    ),
    pytest.param(
        _with(job(), ["spec", "template", "spec", "containers"], {"c": {}}),
        [("spec.template.spec.containers", "invalid-type")],
        id="containers-not-list",
    ),
    pytest.param(
        _with(job(), ["spec", "template", "spec", "containers", 0], "c"),
        [("spec.template.spec.containers[0]", "invalid-type")],
        id="container-not-mapping",
    ),
    pytest.param(
        _with(job(), [*C0, "resources", "requests", "cpu"], "one"),
        [("spec.template.spec.containers[0].resources.requests.cpu", "invalid-quantity")],
        id="malformed-request",
    ),
    pytest.param(
        _with(job(), [*C0, "resources", "limits"], {"memory": "-1Gi"}),
        [("spec.template.spec.containers[0].resources.limits.memory", "invalid-quantity")],
        id="negative-limit",
    ),
    pytest.param(
        _with(job(), [*C0, "resources"], "big"),
        [("spec.template.spec.containers[0].resources", "invalid-type")],
        id="resources-not-mapping",
    ),
    pytest.param(
        _with(
            job(),
            ["spec", "template", "spec", "initContainers"],
            [{"resources": {"requests": {"cpu": "x"}}}],
        ),
        [("spec.template.spec.initContainers[0].resources.requests.cpu", "invalid-quantity")],
        id="malformed-init-request",
    ),
    pytest.param(
        _with(job(), ["spec", "template", "spec", "overhead"], {"cpu": True}),
        [("spec.template.spec.overhead.cpu", "invalid-quantity")],
        id="malformed-overhead",
    ),
    pytest.param(
        _with(job(), ["spec", "parallelism"], -1),
        [("spec.parallelism", "invalid-count")],
        id="negative-parallelism",
    ),
    pytest.param(
        _with(job(), ["spec", "parallelism"], "2"),
        [("spec.parallelism", "invalid-count")],
        id="string-parallelism",
    ),
    pytest.param(
        _with(job(), ["spec", "completions"], True),
        [("spec.completions", "invalid-count")],
        id="bool-completions",
    ),
    pytest.param(
        _with(job(), ["spec", "suspend"], "yes"),
        [("spec.suspend", "invalid-type")],
        id="suspend-not-bool",
    ),
    pytest.param(
        _with(job(), ["spec", "template", "spec", "priority"], "high"),
        [("spec.template.spec.priority", "invalid-type")],
        id="priority-not-int",
    ),
    pytest.param(
        _with(job(), ["spec", "template", "spec", "priorityClassName"], 5),
        [("spec.template.spec.priorityClassName", "invalid-type")],
        id="priority-class-not-string",
    ),
    pytest.param(
        _kubeflow(
            "TFJob",
            "kubeflow.org/v1",
            "tfReplicaSpecs",
            {"Worker": {"replicas": 1.5, "template": pod("1")}},
        ),
        [("spec.tfReplicaSpecs.Worker.replicas", "invalid-count")],
        id="tfjob-fractional-replicas",
    ),
    pytest.param(
        _kubeflow("TFJob", "kubeflow.org/v1", "tfReplicaSpecs", {"Worker": {"replicas": 1}}),
        [("spec.tfReplicaSpecs.Worker.template", "missing-field")],
        id="tfjob-no-template",
    ),
    pytest.param(
        _kubeflow("TFJob", "kubeflow.org/v1", "tfReplicaSpecs", {"Worker": "w"}),
        [("spec.tfReplicaSpecs.Worker", "invalid-type")],
        id="tfjob-replica-not-mapping",
    ),
    pytest.param(
        _kubeflow(
            "PyTorchJob", "kubeflow.org/v1", "tfReplicaSpecs", {"Worker": {"template": pod("1")}}
        ),
        [("spec.pytorchReplicaSpecs", "missing-field")],
        id="pytorchjob-wrong-field",
    ),
    pytest.param(
        _kubeflow("MPIJob", "kubeflow.org/v2beta1", "mpiReplicaSpecs", {}),
        [("spec.mpiReplicaSpecs", "missing-field")],
        id="mpijob-no-replica-types",
    ),
    pytest.param(
        _kubeflow(
            "TFJob",
            "kubeflow.org/v1",
            "tfReplicaSpecs",
            {"Worker": {"template": pod("1")}},
            runPolicy={"suspend": 1, "schedulingPolicy": {"priorityClass": 2}},
        ),
        [
            ("spec.runPolicy.schedulingPolicy.priorityClass", "invalid-type"),
            ("spec.runPolicy.suspend", "invalid-type"),
        ],
        id="kubeflow-run-policy-types",
    ),
    pytest.param(
        _kubeflow(
            "PyTorchJob",
            "kubeflow.org/v1",
            "pytorchReplicaSpecs",
            {"Worker": {"template": pod("1")}},
            runPolicy="suspend",
        ),
        [("spec.runPolicy", "invalid-type")],
        id="kubeflow-run-policy-not-mapping",
    ),
    pytest.param(
        _with(_ray(), ["spec", "rayClusterSpec"], _DELETE),
        [("spec.rayClusterSpec", "missing-field")],
        id="rayjob-existing-cluster",
    ),
    pytest.param(
        _with(_ray(), ["spec", "rayClusterSpec", "headGroupSpec"], _DELETE),
        [("spec.rayClusterSpec.headGroupSpec", "missing-field")],
        id="rayjob-no-head",
    ),
    pytest.param(
        _ray(workerGroupSpecs=[{"replicas": 1, "template": pod("1")}]),
        [("spec.rayClusterSpec.workerGroupSpecs[0].groupName", "missing-field")],
        id="rayjob-group-without-name",
    ),
    pytest.param(
        _ray(workerGroupSpecs=[{"groupName": "head", "template": pod("1")}]),
        [("spec.rayClusterSpec.workerGroupSpecs[0].groupName", "duplicate-pod-set")],
        id="rayjob-group-named-head",
    ),
    pytest.param(
        _ray(workerGroupSpecs={"groupName": "g"}),
        [("spec.rayClusterSpec.workerGroupSpecs", "invalid-type")],
        id="rayjob-groups-not-list",
    ),
    pytest.param(
        _ray(workerGroupSpecs=[{"groupName": "g", "replicas": -2, "template": pod("1")}]),
        [("spec.rayClusterSpec.workerGroupSpecs[0].replicas", "invalid-count")],
        id="rayjob-negative-replicas",
    ),
    pytest.param(
        _with(_jobset(), ["spec", "replicatedJobs"], _DELETE),
        [("spec.replicatedJobs", "missing-field")],
        id="jobset-no-replicated-jobs",
    ),
    pytest.param(
        _jobset({"template": {"spec": {"template": pod("1")}}}),
        [("spec.replicatedJobs[0].name", "missing-field")],
        id="jobset-job-without-name",
    ),
    pytest.param(
        _jobset({"name": "w", "template": {}}),
        [("spec.replicatedJobs[0].template.spec", "missing-field")],
        id="jobset-no-job-spec",
    ),
    pytest.param(
        _jobset(
            {"name": "w", "template": {"spec": {"template": pod("1")}}},
            {"name": "w", "replicas": "2", "template": {"spec": {"template": pod("1")}}},
        ),
        [
            ("spec.replicatedJobs[1].replicas", "invalid-count"),
            ("spec.replicatedJobs[1].name", "duplicate-pod-set"),
        ],
        id="jobset-duplicate-and-bad-replicas",
    ),
    pytest.param(
        _with(
            _with(job(), [*C0, "resources", "requests", "cpu"], "x"),
            ["spec", "parallelism"],
            -3,
        ),
        [
            ("spec.parallelism", "invalid-count"),
            ("spec.template.spec.containers[0].resources.requests.cpu", "invalid-quantity"),
        ],
        id="every-error-is-reported",
    ),
]


@pytest.mark.parametrize(("manifest", "expected"), ERROR_CASES)
def test_extract_workload_rejects(manifest: Manifest, expected: list[tuple[str, str]]) -> None:
    assert errors_of(manifest) == expected


def test_rejection_names_workload_and_kind() -> None:
    with pytest.raises(WorkloadInvalid) as caught:
        extract(_with(job(), ["spec", "parallelism"], -1))
    assert (caught.value.workload, caught.value.kind) == ("ns/j", "batch/v1/Job")


def test_unsupported_kind_message_lists_supported_kinds() -> None:
    with pytest.raises(WorkloadInvalid) as caught:
        extract(_with(job(), ["kind"], "CronJob"))
    [error] = caught.value.errors
    assert caught.value.kind == "batch/v1/CronJob"
    assert error.message == "kind batch/v1/CronJob is not supported; Usher admits " + ", ".join(
        SUPPORTED_KINDS
    )


def test_generate_name_only_is_rejected_without_given_name() -> None:
    with pytest.raises(WorkloadInvalid) as caught:
        extract(load(WALKTHROUGH_JOB_YAML))
    [error] = caught.value.errors
    assert (error.path, error.code) == ("metadata.name", "missing-field")
    assert error.message == "metadata.name is required (generateName 'pi-' alone is not a name)"
    assert caught.value.workload == "user-a/pi-"


@pytest.mark.parametrize("manifest", [None, [], "job"], ids=["null", "list", "str"])
def test_non_mapping_manifest(manifest: object) -> None:
    assert errors_of(manifest) == [("", "not-a-mapping")]


def test_extract_priority_class() -> None:
    manifest = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "priority-2"},
        "value": 2,
    }
    assert extract_priority_class(manifest) == ("priority-2", 2)


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        pytest.param(None, [("", "not-a-mapping")], id="not-mapping"),
        pytest.param(
            {"apiVersion": "v1", "kind": "PriorityClass", "metadata": {"name": "p"}, "value": 1},
            [("apiVersion", "invalid-api-version")],
            id="wrong-api-version",
        ),
        pytest.param(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "Job",
                "metadata": {"name": "p"},
                "value": 1,
            },
            [("kind", "invalid-kind")],
            id="wrong-kind",
        ),
        pytest.param(
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": 1},
            [("metadata.name", "missing-field")],
            id="no-name",
        ),
        pytest.param(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "p"},
            },
            [("value", "missing-field")],
            id="no-value",
        ),
        pytest.param(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "p"},
                "value": True,
            },
            [("value", "invalid-type")],
            id="bool-value",
        ),
        pytest.param(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "p"},
                "value": 2**31,
            },
            [("value", "out-of-range")],
            id="value-beyond-int32",
        ),
    ],
)
def test_extract_priority_class_rejects(manifest: object, expected: list[tuple[str, str]]) -> None:
    with pytest.raises(InputError) as caught:
        extract_priority_class(manifest)
    assert [(e.path, e.code) for e in caught.value.errors] == expected


@settings(max_examples=200)
@given(
    parallelism=st.integers(min_value=0, max_value=1000),
    completions=st.none() | st.integers(min_value=0, max_value=1000),
    millicores=st.lists(st.integers(min_value=0, max_value=64_000), min_size=1, max_size=4),
)
def test_job_count_and_container_sum(
    parallelism: int, completions: int | None, millicores: list[int]
) -> None:
    containers = [{"resources": {"requests": {"cpu": f"{m}m"}}} for m in millicores]
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "template": {"spec": {"containers": containers}},
    }
    if completions is not None:
        spec["completions"] = completions
    manifest = job(**spec)
    [pod_set] = extract(manifest).pod_sets
    expected_count = parallelism if completions is None else min(parallelism, completions)
    assert pod_set.count == expected_count
    total = sum(millicores)
    assert pod_set.requests == ({"cpu": total} if total else {})


def _with_minimum(manifest: Manifest, value: object) -> Manifest:
    manifest["metadata"]["annotations"] = {"usher.io/min-parallelism": value}
    return manifest


def test_min_parallelism_marks_the_scalable_pod_set() -> None:
    """R11: a Job may start with fewer pods; equal to its pods, it is all-or-nothing."""
    [main] = extract(_with_minimum(job(parallelism=8, completions=8), "4")).pod_sets
    assert (main.count, main.min_count) == (8, 4)
    [whole] = extract(_with_minimum(job(parallelism=8), "8")).pod_sets
    assert whole.min_count is None
    [plain] = extract(job(parallelism=8)).pod_sets
    assert plain.min_count is None


@pytest.mark.parametrize(
    ("value", "code"),
    [("0", "invalid-annotation"), ("-2", "invalid-annotation"), ("four", "invalid-annotation"),
     (4, "invalid-annotation"), ("9", "above-count")],
)  # fmt: skip
def test_a_bad_min_parallelism_is_refused_naming_the_annotation(value: object, code: str) -> None:
    path = "metadata.annotations.usher.io/min-parallelism"
    assert errors_of(_with_minimum(job(parallelism=8), value)) == [(path, code)]


def test_a_kind_that_cannot_scale_refuses_min_parallelism() -> None:
    replicas = copy.deepcopy(TF_REPLICAS)
    manifest = _kubeflow("TFJob", "kubeflow.org/v1", "tfReplicaSpecs", replicas)
    manifest["metadata"]["annotations"] = {"usher.io/min-parallelism": "1"}
    assert errors_of(manifest) == [
        ("metadata.annotations.usher.io/min-parallelism", "not-scalable")
    ]


# --- T3: zero requests are no requests -------------------------------------------------------

ZERO_OR_NONE = [
    None,  # no resources at all
    {},
    {"requests": {}},
    {"requests": {"cpu": "0", "memory": "0"}},  # usher submit --cpu 0 --memory 0
    {"requests": {"cpu": "0m", "memory": "0Gi", "nvidia.com/gpu": 0}},
    {"requests": {"cpu": "0.0"}, "limits": {"memory": "0"}},
    {"requests": {"cpu": "0"}, "limits": {"cpu": "4"}},  # the request wins: it asks 0
]
SOMETHING = [
    {"limits": {"cpu": "2"}},  # the limit stands in for the request
    {"requests": {"cpu": "0", "memory": "1Mi"}},
    {"requests": {"cpu": "1m"}},
]


def _job_with(resources: dict[str, Any] | None) -> dict[str, Any]:
    main: dict[str, Any] = {"name": "main", "image": "busybox"}
    if resources is not None:
        main["resources"] = resources
    return batch_job("j", "user-a", template={"spec": {"containers": [main]}})


@pytest.mark.parametrize("resources", ZERO_OR_NONE)
def test_a_container_asking_zero_of_everything_is_one_asking_nothing(
    resources: dict[str, Any] | None,
) -> None:
    """Refused exactly as a container with no requests, whatever wrote it (T3)."""
    assert unrequested_containers(_job_with(resources)) == unrequested_containers(_job_with(None))
    [problem] = unrequested_containers(_job_with(resources))
    assert problem.path == "spec.template.spec.containers[0].resources.requests"
    assert problem.code == "no-requests"


@pytest.mark.parametrize("resources", SOMETHING)
def test_a_container_asking_anything_is_not_refused_for_zero_requests(
    resources: dict[str, Any],
) -> None:
    assert unrequested_containers(_job_with(resources)) == []


# ------------------------------------------------------------------ sizes within int64


@pytest.mark.parametrize(
    ("parallelism", "cpu", "expected"),
    [
        (2147483647, "1P", [("spec.pod_sets(main).count", "out-of-range")]),
        (1_000_000, "4000T", [("spec.cpu", "out-of-range")]),
        (1_000_000, "1000", []),
    ],
    ids=["int32-max-pods", "huge-in-all", "a-million-pods-fits"],
)
def test_a_job_bigger_than_any_count_is_refused_naming_its_size(
    parallelism: int, cpu: str, expected: list[tuple[str, str]]
) -> None:
    """A valid-looking Job whose size overflows int64 (2147483647 pods of 1P cpu) never
    reaches the log: it would stop every service's snapshot (msgspec refuses ints > 2**64)."""
    manifest = batch_job(
        "big", "ns", template=pod(cpu), parallelism=parallelism, completions=parallelism
    )
    if expected:
        assert errors_of(manifest) == expected
    else:
        assert extract(manifest).pod_sets[0].count == parallelism


def test_a_forged_observation_bigger_than_any_count_is_not_folded() -> None:
    forged = WorkloadObserved(
        workload="ns/big", namespace="ns", name="big", kind="batch/v1/Job", priority=0,
        created_ms=Millis(0), suspended=True, zone=Zone("default"),
        pod_sets=[PodSet(name="main", count=2**40, requests={"cpu": 2**40})],
    )  # fmt: skip
    assert [e.path for e in observed_errors(forged)] == ["pod_sets.pod_sets(main).count"]
