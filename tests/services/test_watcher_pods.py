"""The watcher sees how an admitted job's pods are doing, against real NATS and the emulator.

Pod counts of an admitted job become ``WorkloadProgress`` when they change (once per change,
not per pod event, and not again after a restart); a failed job's ``WorkloadFinished`` carries
how its containers ended (``OOMKilled``, exit code 137); a job declaring
``usher.io/min-success`` finishes as soon as that many pods succeeded and has the rest stopped;
a malformed one is rejected with the field named.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from schemas import (
    ContainerTermination,
    WorkloadFinished,
    WorkloadObserved,
    WorkloadProgress,
    WorkloadRejected,
)
from services.watcher.kinds import JOB_FAMILIES
from services.watcher.translate import container_terminations, workload_event
from tests.builders.manifests import batch_job, container, pod_template
from tests.conftest import Infra
from tests.services.test_watcher import (
    FAST,
    JOBS,
    NODES,
    TFJOBS,
    TREES,
    Harness,
    admitted,
    node,
    of_type,
    tfjob,
    tree,
)
from usher.adapters.kube import KubeClient, Resource
from usher.adapters.nats.subjects import Subjects
from usher.core.kinds.success import MIN_SUCCESS_PATH
from usher.local.kube_emulator import KubeEmulator

PODS = Resource("", "v1", "pods", "Pod")
BATCH = next(f for f in JOB_FAMILIES if f.kind == "Job")
TFJOB = next(f for f in JOB_FAMILIES if f.kind == "TFJob")


@pytest.fixture
async def emu(tmp_path: Path) -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator(kubeconfig_path=tmp_path / "kubeconfig", kubelet=True) as emulator:
        yield emulator


@pytest.fixture
async def kube(emu: KubeEmulator) -> AsyncIterator[KubeClient]:
    async with await KubeClient.from_kubeconfig(emu.kubeconfig_path) as client:
        yield client


@pytest.fixture
def h(
    infra: Infra,
    nc: Client,
    js: JetStreamContext,
    subjects: Subjects,
    emu: KubeEmulator,
    kube: KubeClient,
) -> Harness:
    return Harness(infra, nc, js, subjects, emu, kube)


def played(
    name: str,
    annotations: dict[str, str],
    *,
    pods: int = 2,
    memory: str = "4Gi",
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return batch_job(
        name,
        "user-a",
        template=pod_template(container(cpu="1", memory=memory)),
        parallelism=pods,
        completions=pods,
        annotations=annotations,
        spec=spec,
    )


READY_TIMEOUT = {"usher.io/ready-timeout-seconds": "3600"}


async def cluster(h: Harness, *, ready_timeout: bool = True) -> None:
    """The watcher's usual tree; with ``ready_timeout`` its Department-a (``user-a``) has an
    R10 ready timeout, which is what makes pod counts worth publishing."""
    quota_tree = tree()
    if ready_timeout:
        quota_tree["spec"]["root"]["children"][0]["attributes"] = READY_TIMEOUT
    await h.kube.create(TREES, "kube-system", quota_tree)
    await h.kube.create(NODES, None, node("n1", "zone-a"))


async def admit(h: Harness, name: str) -> None:
    await h.logged(WorkloadObserved, lambda e: e.name == name)
    await h.decide(admitted(f"user-a/{name}"))


def progress_of(entries: list[Any], name: str) -> list[tuple[int, int, int, int]]:
    return [
        (p.ready, p.total, p.succeeded, p.failed)
        for _, p in of_type(entries, WorkloadProgress)
        if p.workload == f"user-a/{name}"
    ]


# --------------------------------------------------------------------------- pure


def test_a_malformed_or_impossible_min_success_is_rejected_with_its_field() -> None:
    names = Subjects("t")
    assert MIN_SUCCESS_PATH == "metadata.annotations.usher.io/min-success"
    resource = BATCH.resource("v1")
    refused = (("0", "invalid-annotation"), ("two", "invalid-annotation"), ("3", "out-of-range"))
    for value, code in refused:
        manifest = played("bad", {"usher.io/min-success": value})
        manifest["metadata"]["uid"] = "u"
        out = workload_event(resource, BATCH, manifest, names)
        assert isinstance(out.event, WorkloadRejected), value
        [problem] = out.event.errors
        assert (problem.path, problem.code) == (MIN_SUCCESS_PATH, code)
    # completions, not parallelism, bound it: 5 of a 2-wide, 10-completion job may succeed.
    wide = played("ok", {"usher.io/min-success": "5"}, spec={"completions": 10})
    assert isinstance(workload_event(resource, BATCH, wide, names).event, WorkloadObserved)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("usher.io/max-runtime-seconds", "\u00b2"),  # str.isdigit() says yes, int() raises
        ("usher.io/min-success", "\u00b2"),
        ("usher.io/min-parallelism", "\uff11"),
        ("usher.io/retry-limit", "9" * 100_000),
        ("usher.io/retry-limit", "99999999999999999999"),
        ("usher.io/oom-memory-factor", "nan"),
        ("usher.io/sim-duration", "inf"),
        ("usher.io/zones", "z" * 100_000),
        ("usher.io/zones", "<script>"),
    ],
)
def test_a_hostile_annotation_is_rejected_naming_it_on_a_bounded_subject(
    key: str, value: str
) -> None:
    """Before issue 26, ``\u00b2`` raised out of the translation ("object not handled": the
    job never reached the log) and a 100 KB zone went into the subject."""
    manifest = played("bad", {key: value})
    manifest["metadata"]["uid"] = "u"
    out = workload_event(BATCH.resource("v1"), BATCH, manifest, Subjects("t"))
    assert isinstance(out.event, WorkloadRejected)
    assert [e.path for e in out.event.errors] == [f"metadata.annotations.{key}"]
    assert out.subject == "t.cluster.default.job.user-a.bad"  # the default zone's, bounded
    assert all(len(e.message) < 400 for e in out.event.errors)


def test_terminations_keep_one_per_container_and_an_oom_kill_wins() -> None:
    def pod(*states: tuple[str, str, int, str]) -> dict[str, Any]:
        statuses = [
            {"name": n, "state": {"terminated": {"reason": r, "exitCode": c, "finishedAt": t}}}
            for n, r, c, t in states
        ]
        return {"status": {"phase": "Failed", "containerStatuses": statuses}}

    pods = [
        pod(("main", "Error", 1, "2026-01-01T00:00:09Z"), ("side", "Completed", 0, "")),
        pod(("main", "OOMKilled", 137, "2026-01-01T00:00:01Z")),
        pod(("side", "Error", 2, "2026-01-01T00:00:01Z")),
        pod(("side", "Error", 3, "2026-01-01T00:00:05Z")),
    ]
    assert container_terminations(BATCH, {}, pods) == [
        ContainerTermination(pod_set="main", container="main", reason="OOMKilled", exit_code=137),
        ContainerTermination(pod_set="main", container="side", reason="Error", exit_code=3),
    ]


def test_a_kubeflow_job_counts_running_replicas_and_names_pod_sets_as_written() -> None:
    manifest = tfjob("tf")
    manifest["status"] = {
        "replicaStatuses": {"PS": {"active": 1}, "Worker": {"active": 1, "failed": 1}}
    }
    assert TFJOB.pods is not None
    counts = TFJOB.pods.counts(manifest)
    assert (counts.ready, counts.succeeded, counts.failed) == (2, 0, 1)
    pod = {"metadata": {"labels": {"training.kubeflow.org/replica-type": "worker"}}}
    assert TFJOB.pods.pod_set(manifest, pod) == "Worker"
    assert TFJOB.pods.selector(manifest) == "training.kubeflow.org/job-name=tf"
    # Suspended, the operator deletes every pod: a minSuccess could not stay reached.
    manifest["metadata"]["annotations"] = {"usher.io/min-success": "1"}
    out = workload_event(TFJOB.resource("v1"), TFJOB, manifest, Subjects("t"))
    assert isinstance(out.event, WorkloadRejected)
    assert [(e.path, e.code) for e in out.event.errors] == [(MIN_SUCCESS_PATH, "unsupported")]


def test_a_success_policy_completion_says_how_many_pods_succeeded() -> None:
    done = {"type": "Complete", "status": "True", "reason": "SuccessPolicy",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    outcome = BATCH.outcome({"status": {"succeeded": 2, "conditions": [done]}})
    assert outcome is not None and (outcome.succeeded, outcome.min_success) == (True, 2)
    plain = BATCH.outcome({"status": {"succeeded": 2, "conditions": [{**done, "reason": "X"}]}})
    assert plain is not None and plain.min_success is None


# --------------------------------------------------------------------------- live


async def test_progress_is_published_once_per_change_and_not_again_after_a_restart(
    h: Harness,
) -> None:
    await cluster(h)
    annotations = {
        "emulator.usher.io/never-ready-seconds": "0.4",
        "emulator.usher.io/pod-durations-seconds": "0.3,0.8",
    }
    await h.kube.create(JOBS, "user-a", played("gang", annotations))
    async with h.watcher(FAST):
        await admit(h, "gang")
        await h.logged(WorkloadFinished, lambda e: e.workload == "user-a/gang")
        await asyncio.sleep(0.3)  # and nothing after the finish
        before = await h.log()
    # ready 2 (0.4 s), one succeeded (0.7 s), then the finish: never a repeat, never a zero.
    assert progress_of(before, "gang") == [(2, 2, 0, 0), (2, 2, 1, 0)]
    [(entry, _)] = of_type(before, WorkloadProgress)[:1]
    assert entry.envelope.id.endswith(":workload.progress.v1") and entry.envelope.source
    async with h.watcher(FAST):
        await h.kube.create(JOBS, "user-a", played("marker", {}))
        await h.logged(WorkloadObserved, lambda e: e.name == "marker")
        after = await h.log()
    assert progress_of(after, "gang") == progress_of(before, "gang")


async def test_without_a_ready_timeout_no_progress_is_published_but_the_finish_is(
    h: Harness,
) -> None:
    await cluster(h, ready_timeout=False)
    annotations = {"emulator.usher.io/pod-durations-seconds": "0.3,0.6"}
    await h.kube.create(JOBS, "user-a", played("quiet", annotations))
    async with h.watcher(FAST):
        await admit(h, "quiet")
        [(_, finished)] = await h.logged(WorkloadFinished, lambda e: e.workload == "user-a/quiet")
        entries = await h.log()
    assert finished.succeeded is True
    assert progress_of(entries, "quiet") == []  # nothing decides on pod counts here


async def test_a_slow_gang_reports_its_ready_pods_as_they_come(h: Harness) -> None:
    await cluster(h)
    annotations = {"emulator.usher.io/never-ready-seconds": "30"}
    await h.kube.create(JOBS, "user-a", played("stuck", annotations))
    async with h.watcher(FAST):
        await admit(h, "stuck")
        await h.logged(WorkloadObserved, lambda e: e.name == "stuck" and not e.suspended)
        await asyncio.sleep(0.5)
        entries = await h.log()
    assert progress_of(entries, "stuck") == []  # not one pod ready: nothing to say yet


async def test_an_oomkilled_job_finishes_failed_with_its_containers_terminations(
    h: Harness,
) -> None:
    await cluster(h)
    oom = {"emulator.usher.io/oom-below-memory": "6Gi", "usher.io/sim-duration": "0.2"}
    await h.kube.create(JOBS, "user-a", played("oom", oom, pods=1, spec={"backoffLimit": 0}))
    async with h.watcher(FAST):
        await admit(h, "oom")
        [(_, finished)] = await h.logged(WorkloadFinished, lambda e: e.workload == "user-a/oom")
    assert finished.succeeded is False and finished.min_success is None
    # With the container's memory as it ran (4Gi): what an OOM scale-up grows (R13).
    assert finished.terminations == [
        ContainerTermination(
            pod_set="main",
            container="main",
            reason="OOMKilled",
            exit_code=137,
            memory_request=4 * 2**30,
        )
    ]


async def test_min_success_finishes_early_and_stops_the_remaining_pods(h: Harness) -> None:
    await cluster(h)
    annotations = {
        "usher.io/min-success": "2",
        "emulator.usher.io/pod-durations-seconds": "0.2,0.4,30",
    }
    await h.kube.create(JOBS, "user-a", played("quorum", annotations, pods=3))
    async with h.watcher(FAST):
        await admit(h, "quorum")
        [(_, finished)] = await h.logged(WorkloadFinished, lambda e: e.workload == "user-a/quorum")
        assert (finished.succeeded, finished.min_success) == (True, 2)

        async def stopped() -> bool:
            job = await h.kube.get(JOBS, "user-a", "quorum")
            pods = await h.kube.list(PODS, namespace="user-a")
            phases = sorted(p["status"]["phase"] for p in pods.items)
            return job["spec"]["suspend"] is True and phases == ["Succeeded", "Succeeded"]

        await h.eventually(stopped)
        await asyncio.sleep(0.3)
        entries = await h.log()
    quorum = [e for _, e in of_type(entries, WorkloadFinished) if e.workload == "user-a/quorum"]
    assert len(quorum) == 1  # suspended afterwards, it still reads as finished
    assert not of_type(entries, WorkloadRejected)


async def test_an_admitted_kubeflow_job_reports_its_running_replicas(h: Harness) -> None:
    await cluster(h)
    await h.kube.create(TFJOBS, "user-a", tfjob("tf"))
    async with h.watcher(FAST):
        await admit(h, "tf")
        await h.logged(WorkloadProgress, lambda e: e.workload == "user-a/tf")
        entries = await h.log()
    assert progress_of(entries, "tf") == [(3, 3, 0, 0)]  # PS 1 + Worker 2, all running


async def test_an_indexed_jobs_success_policy_finishes_it_with_the_count(h: Harness) -> None:
    await cluster(h)
    rule = {"succeededIndexes": "0-2", "succeededCount": 2}
    spec = {"completionMode": "Indexed", "successPolicy": {"rules": [rule]}}
    durations = {"emulator.usher.io/pod-durations-seconds": "0.1,0.2,30"}
    await h.kube.create(JOBS, "user-a", played("indexed", durations, pods=3, spec=spec))
    async with h.watcher(FAST):
        await admit(h, "indexed")
        [(_, done)] = await h.logged(WorkloadFinished, lambda e: e.workload == "user-a/indexed")
        job = await h.kube.get(JOBS, "user-a", "indexed")
    assert (done.succeeded, done.min_success) == (True, 2)
    assert job["spec"]["suspend"] is False  # its controller removed the rest: nothing to stop
