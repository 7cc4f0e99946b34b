"""The watcher against a real NATS JetStream and the Kubernetes API emulator.

Every test starts an emulator (real HTTP, real watch protocol), runs the watcher in a task
with a hand-built ServiceContext, and checks what lands on the log, the DLQ and the cluster.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from schemas import (
    LEDGER_SOURCE,
    Admitted,
    DeadLetter,
    Envelope,
    EventId,
    Millis,
    NodeObserved,
    Preempted,
    PriorityClassObserved,
    QueueName,
    QuotaPath,
    QuotaTreeApplied,
    QuotaTreeDeleted,
    QuotaTreeRejected,
    Reason,
    Requeued,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    WorkloadProgress,
    WorkloadRejected,
    Zone,
    decode,
    decode_envelope,
)
from schemas.envelope import LogEvent
from services.common.metrics import process_metrics
from services.common.runtime import ServiceContext
from services.common.settings import ServiceSettings, SettingsError
from services.watcher import service as watcher_service
from services.watcher.carry_out import consumer_name
from services.watcher.kinds import (
    JOB_FAMILIES,
    UNSUPPORTED_FAMILIES,
    admit_patch,
    kind_id,
    suspend_patch,
)
from services.watcher.options import WatcherOptions
from services.watcher.service import main, run
from tests.builders import events
from tests.builders.manifests import batch_job, container, elastic_quota_tree, pod_template
from tests.cli.history_cli import usher
from tests.conftest import Infra
from usher.adapters.kube import (
    Conflict,
    Invalid,
    JsonObj,
    KubeClient,
    NotFound,
    Resource,
    WatchExpired,
    merge_diff,
)
from usher.adapters.logs import get_logger
from usher.adapters.nats.log import publish_envelope
from usher.adapters.nats.subjects import Subjects
from usher.client.state import now_ms, read_state
from usher.core.intake.workload import SUPPORTED_KINDS, extract_workload
from usher.core.model.config import EngineConfig
from usher.core.model.errors import WorkloadInvalid
from usher.local.kube_emulator import FakeKubelet, KubeEmulator, resource
from usher.local.kube_emulator.patches import merge_patch

JOBS = Resource("batch", "v1", "jobs", "Job")
TFJOBS = Resource("kubeflow.org", "v1", "tfjobs", "TFJob")
RAYJOBS = Resource("ray.io", "v1", "rayjobs", "RayJob")
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
SPARKAPPS = Resource("sparkoperator.k8s.io", "v1beta2", "sparkapplications", "SparkApplication")
WORKFLOWS = Resource("argoproj.io", "v1alpha1", "workflows", "Workflow")
TREES = Resource("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees", "ElasticQuotaTree")
QUEUES = Resource("scheduling.x-k8s.io", "v1alpha1", "queues", "Queue")
CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
EVENTS = Resource("", "v1", "events", "Event")
XGBOOSTJOBS = Resource("kubeflow.org", "v1", "xgboostjobs", "XGBoostJob")
PADDLEJOBS = Resource("kubeflow.org", "v1", "paddlejobs", "PaddleJob")
MXJOBS = Resource("kubeflow.org", "v1", "mxjobs", "MXJob")
LIMIT_RANGES = Resource("", "v1", "limitranges", "LimitRange")
ALLOW_ZERO = "usher.io/allow-zero-requests"

FAST = WatcherOptions(
    watch_timeout_s=30, backoff_base_s=0.05, backoff_cap_s=0.3, fetch_timeout_s=0.2
)
T = TypeVar("T")


# --------------------------------------------------------------------------- manifests


def pod(cpu: object = "10", memory: str = "10Gi") -> JsonObj:
    return pod_template(container(cpu=cpu, memory=memory))


def job(name: str, namespace: str = "user-a", *, zone: str | None = None, cpu: object = "10",
        suspend: bool = True, priority_class: str | None = None,
        resources: JsonObj | None = None) -> JsonObj:  # fmt: skip
    main = container(cpu=cpu, memory="10Gi")
    if resources is not None:
        main["resources"] = resources
    return batch_job(
        name,
        namespace,
        template=pod_template(main, priority_class=priority_class or None),
        suspend=suspend,
        parallelism=1,
        completions=1,
        labels={"usher.io/zone": zone} if zone else {},
    )


def tfjob(name: str, namespace: str = "user-a") -> JsonObj:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runPolicy": {"suspend": True},
            "tfReplicaSpecs": {
                "PS": {"replicas": 1, "template": pod("1", "1Gi")},
                "Worker": {"replicas": 2, "template": pod("2", "2Gi")},
            },
        },
    }


def unsupported_job(resource: Resource, field: str, name: str) -> JsonObj:
    """A suspended Kubeflow job of a kind Usher does not admit (XGBoostJob, PaddleJob...)."""
    return {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name, "namespace": "user-a"},
        "spec": {
            "runPolicy": {"suspend": True},
            field: {
                "Master": {"replicas": 1, "template": pod("1", "1Gi")},
                "Worker": {"replicas": 2, "template": pod("2", "2Gi")},
            },
        },
    }


def rayjob(name: str, namespace: str = "user-a") -> JsonObj:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "suspend": True,
            "rayClusterSpec": {
                "headGroupSpec": {"template": pod("1", "1Gi")},
                "workerGroupSpecs": [
                    {"groupName": "small", "replicas": 1, "template": pod("1", "1Gi")},
                    {"groupName": "big", "replicas": 2, "template": pod("2", "2Gi")},
                ],
            },
        },
    }


def jobset(name: str, namespace: str = "user-a") -> JsonObj:
    def replicated(rj: str) -> JsonObj:
        job_spec = {"parallelism": 1, "template": pod("1", "1Gi")}
        return {"name": rj, "replicas": 1, "template": {"spec": job_spec}}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"suspend": True, "replicatedJobs": [replicated("leader"), replicated("workers")]},
    }


def sparkapp(name: str, namespace: str = "user-a") -> JsonObj:
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "suspend": True,
            "type": "Scala",
            "mode": "cluster",
            "driver": {"cores": 1, "memory": "1g", "memoryOverhead": "1g"},
            "executor": {"instances": 2, "cores": 2, "memory": "1g", "memoryOverhead": "1g"},
        },
    }


def workflow(name: str, namespace: str = "user-a") -> JsonObj:
    step = {"image": "busybox", "resources": {"requests": {"cpu": "2", "memory": "2Gi"}}}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "suspend": True,
            "entrypoint": "fan",
            "parallelism": 3,
            "templates": [
                {"name": "fan", "steps": [[{"name": "a", "template": "work"}]]},
                {"name": "work", "container": step},
            ],
        },
    }


def tree(*, department_b: bool = True, a_min: str = "40") -> JsonObj:
    children: list[JsonObj] = [
        {
            "name": "Department-a",
            "min": {"cpu": a_min, "memory": "40Gi"},
            "max": {"cpu": "40", "memory": "40Gi"},
            "namespaces": ["user-a"],
        }
    ]
    if department_b:
        children.append(
            {
                "name": "Department-b",
                "min": {"cpu": "0", "memory": "0"},
                "max": {"cpu": "40", "memory": "40Gi"},
                "namespaces": ["user-c"],
            }
        )
    root = {
        "name": "root",
        "min": {"cpu": "40", "memory": "40Gi"},
        "max": {"cpu": "40", "memory": "40Gi"},
        "children": children,
    }
    return elastic_quota_tree(root)


def node(name: str, zone: str = "zone-a") -> JsonObj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"usher.io/zone": zone}},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
    }


def priority_class(name: str, value: int) -> JsonObj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


# --------------------------------------------------------------------------- harness


@dataclass(frozen=True)
class Logged:
    seq: int
    subject: str
    envelope: Envelope
    msg_id: str

    @property
    def event(self) -> LogEvent:
        return self.envelope.event


async def read_log(js: JetStreamContext, subjects: Subjects) -> list[Logged]:
    info = await js.stream_info(subjects.stream_name)
    out: list[Logged] = []
    for seq in range(max(info.state.first_seq, 1), info.state.last_seq + 1):
        msg = await js.get_msg(subjects.stream_name, seq)
        if msg.data is None:
            continue
        headers = msg.headers or {}
        envelope = decode_envelope(msg.data)
        out.append(Logged(seq, msg.subject or "", envelope, headers.get("Nats-Msg-Id", "")))
    return out


async def read_dlq(js: JetStreamContext, subjects: Subjects) -> list[DeadLetter]:
    info = await js.stream_info(subjects.dlq_stream_name)
    letters: list[DeadLetter] = []
    for seq in range(max(info.state.first_seq, 1), info.state.last_seq + 1):
        msg = await js.get_msg(subjects.dlq_stream_name, seq)
        if msg.data is not None:
            letters.append(decode(msg.data, DeadLetter))
    return letters


def of_type(entries: list[Logged], kind: type[T]) -> list[tuple[Logged, T]]:
    return [(e, e.event) for e in entries if isinstance(e.event, kind)]


@dataclass
class Harness:
    """The shared pieces of one test: NATS, the emulator, a client, the running watcher."""

    infra: Infra
    nc: Client
    js: JetStreamContext
    subjects: Subjects
    emu: KubeEmulator
    kube: KubeClient
    task: asyncio.Task[None] | None = None

    def context(self) -> ServiceContext:
        settings = ServiceSettings(
            nats_url=self.infra.nats_url,
            kubeconfig=self.emu.kubeconfig_path,
            prefix=self.subjects.prefix,
            status_interval_s=0.1,
        )
        stop = asyncio.Event()
        log = get_logger(service="watcher", test=self.subjects.prefix)
        return ServiceContext("watcher", settings, self.nc, self.js, self.subjects, stop, log)

    @asynccontextmanager
    async def watcher(self, options: WatcherOptions | None = None) -> AsyncIterator[None]:
        ctx = self.context()
        entry = main(ctx) if options is None else run(ctx, options)
        self.task = asyncio.create_task(entry)
        try:
            yield
        finally:
            ctx.stop.set()
            await asyncio.wait_for(self.task, 5)
            self.task = None

    async def eventually(self, check: Callable[[], Awaitable[T | None]], within: float = 3.0) -> T:
        """Poll ``check`` until it returns something truthy (failing fast if the watcher died)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            if self.task is not None and self.task.done():
                self.task.result()
                raise AssertionError("the watcher stopped")
            result = await check()
            if result:
                return result
            if loop.time() > deadline:
                raise AssertionError(f"not reached in {within}s: {check}")
            await asyncio.sleep(0.05)

    async def log(self) -> list[Logged]:
        return await read_log(self.js, self.subjects)

    async def logged(
        self, kind: type[T], where: Callable[[T], bool] = lambda _: True
    ) -> list[tuple[Logged, T]]:
        """Wait until at least one event of ``kind`` matching ``where`` is on the log."""

        async def found() -> list[tuple[Logged, T]]:
            return [(e, ev) for e, ev in of_type(await self.log(), kind) if where(ev)]

        return await self.eventually(found)

    async def decide(
        self, event: Admitted | Preempted | Requeued, zone: str | None = None, *,
        subject: str | None = None,
        source: str = LEDGER_SOURCE,
    ) -> None:  # fmt: skip
        """Publish ``event`` as the ledger's outbox does (or, given ``subject``/``source``,
        as someone else pretending to be it)."""
        envelope = Envelope(
            id=EventId(f"test:{event.workload}:{datetime.now(UTC).timestamp()}"),
            time=datetime.now(UTC),
            source=source,
            event=event,
        )
        # The ledger publishes an admission on its zone's subject (a preemption: the job's).
        zone = zone or (event.zone if isinstance(event, Admitted) else "default")
        at = subject or self.subjects.decision_for(event, Zone(zone))
        await publish_envelope(self.js, at, envelope)


@pytest.fixture
async def emu(tmp_path: Path) -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator(kubeconfig_path=tmp_path / "kubeconfig") as emulator:
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


def admitted(key: str, zone: str = "zone-a") -> Admitted:
    return events.admitted(
        key,
        10,
        quota="root/Department-a",
        queue="root-department-a-user-a",
        zone=zone,
        memory_gi=10,
    )


def preempted(key: str) -> Preempted:
    return Preempted(
        workload=WorkloadKey(key),
        queue=QueueName("root-department-a-user-a"),
        quota=QuotaPath("root/Department-a"),
        preemptor=WorkloadKey("user-c/other"),
        reason=Reason(code="Reclaim", message="reclaimed by user-c/other"),
    )


def requeued(key: str) -> Requeued:
    """The ledger's requeue of ``key`` for readiness (R10)."""
    return Requeued(
        workload=WorkloadKey(key),
        queue=QueueName("root-department-a-user-a"),
        quota=QuotaPath("root/Department-a"),
        zone=Zone("zone-a"),
        requests={"cpu": 10_000},
        ready=0,
        total=1,
        attempt=1,
        max_attempts=5,
        retry_after_ms=None,
        reason=Reason(code="PodsNotReady", message="0/1 pods ready after 300 s"),
    )


def selectors(obj: JsonObj, family_kind: str) -> list[object]:
    family = next(f for f in JOB_FAMILIES if f.kind == family_kind)
    templates = [t if isinstance(t, dict) else {} for t in family.templates(obj["spec"])]
    return [t.get("spec", {}).get("nodeSelector", {}).get("usher.io/zone") for t in templates]


# --------------------------------------------------------------------------- the adapter


async def test_adapter_raises_typed_errors_and_watch_expired(
    emu: KubeEmulator, kube: KubeClient
) -> None:
    created = await kube.create(JOBS, "user-a", job("a"))
    listed = await kube.list(JOBS)
    assert [i["kind"] for i in listed.items] == ["Job"]  # list items are full manifests
    with pytest.raises(NotFound) as missing:
        await kube.get(JOBS, "user-a", "nope")
    assert missing.value.name == "nope"
    stale = {"metadata": {"resourceVersion": "1"}, "spec": {"suspend": False}}
    await kube.merge_patch(JOBS, "user-a", "a", {"spec": {"parallelism": 2}})
    with pytest.raises(Conflict):
        await kube.merge_patch(JOBS, "user-a", "a", stale)
    with pytest.raises(Invalid) as invalid:
        await kube.create(JOBS, "user-a", job("Not_A_Name"))
    assert invalid.value.causes[0].field == "metadata.name"
    emu.store.compact(keep_last=0)
    with pytest.raises(WatchExpired):
        async for _ in kube.watch(JOBS, resource_version=created["metadata"]["resourceVersion"]):
            pass


def test_merge_diff_nulls_what_goes_and_skips_equal() -> None:
    assert merge_diff({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 2}}) is None
    assert merge_diff({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": 2}}) == {
        "a": None,
        "b": {"d": None},
    }
    assert merge_diff({"keep": 1}, {"add": 2}, prune=False) == {"add": 2}
    assert merge_diff({"l": [1, 2]}, {"l": [1]}) == {"l": [1]}


def test_a_partial_admission_patches_the_parallelism_down() -> None:
    """R11: the watcher scales a Job to the pods the ledger admitted."""
    family = next(f for f in JOB_FAMILIES if f.kind == "Job")
    manifest = job("j")
    manifest["spec"]["parallelism"] = 8
    patch = admit_patch(family, manifest, "zone-a", {"main": 6})
    assert patch is not None
    after = merge_patch(copy.deepcopy(manifest), patch)
    assert (after["spec"]["parallelism"], after["spec"]["suspend"]) == (6, False)
    whole = admit_patch(family, manifest, "zone-a")
    assert whole is not None and "parallelism" not in whole["spec"]


def test_patches_pin_every_template_and_send_lists_whole() -> None:
    for manifest, kind in ((job("j"), "Job"), (tfjob("t"), "TFJob"), (rayjob("r"), "RayJob"),
                           (jobset("s"), "JobSet")):  # fmt: skip
        family = next(f for f in JOB_FAMILIES if f.kind == kind)
        manifest["metadata"]["resourceVersion"] = "7"
        patch = admit_patch(family, manifest, "zone-b")
        assert patch is not None and patch["metadata"] == {"resourceVersion": "7"}
        after = merge_patch(copy.deepcopy(manifest), patch)
        assert set(selectors(after, kind)) == {"zone-b"}, kind
        assert admit_patch(family, after, "zone-b") is None  # already admitted: nothing to do
        assert suspend_patch(family, manifest) is None  # already suspended
        assert suspend_patch(family, after) is not None


# --------------------------------------------------------------------------- observing


async def test_objects_are_observed_with_deterministic_ids(h: Harness) -> None:
    await h.kube.create(CLASSES, None, priority_class("priority-2", 2))
    await h.kube.create(NODES, None, node("n1", "zone-a"))
    await h.kube.create(TREES, "kube-system", tree())
    manifest = job("pi-1", zone="zone-a", priority_class="priority-2")
    created = await h.kube.create(JOBS, "user-a", manifest)
    await h.kube.create(TFJOBS, "user-a", tfjob("tf-1"))
    async with h.watcher():
        [(entry, observed)] = await h.logged(WorkloadObserved, lambda e: e.name == "pi-1")
        await h.logged(WorkloadObserved, lambda e: e.name == "tf-1")
        entries = await h.log()
    meta = created["metadata"]
    assert observed.kind == "batch/v1/Job"
    assert (observed.zone, observed.suspended) == ("zone-a", True)
    assert observed.priority_class == "priority-2"
    assert observed.resource_version == meta["resourceVersion"]
    assert observed.pod_sets[0].requests == {"cpu": 10000, "memory": 10 * 2**30}
    version = meta["resourceVersion"]
    expected_id = f"batch/v1/Job:user-a/pi-1:{meta['uid']}:{version}:workload.observed.v1"
    assert entry.envelope.id == expected_id == entry.msg_id
    assert entry.subject == h.subjects.job(Zone("zone-a"), "user-a", "pi-1")
    assert entry.envelope.source == "usher/watcher"
    [tf] = [ev for _, ev in of_type(entries, WorkloadObserved) if ev.name == "tf-1"]
    assert (tf.kind, [p.name for p in tf.pod_sets]) == ("kubeflow.org/v1/TFJob", ["PS", "Worker"])
    [(pc_entry, pc)] = of_type(entries, PriorityClassObserved)
    assert (pc.name, pc.value) == ("priority-2", 2)
    assert pc_entry.subject == h.subjects.priority_class("priority-2")
    [(node_entry, seen)] = of_type(entries, NodeObserved)
    assert seen.zone == "zone-a"
    assert (seen.allocatable["cpu"], seen.allocatable["memory"]) == (64000, 256 * 2**30)
    assert node_entry.subject == h.subjects.node(Zone("zone-a"), seen.node)
    [(tree_entry, applied)] = of_type(entries, QuotaTreeApplied)
    assert [c.name for c in applied.root.children] == ["Department-a", "Department-b"]
    assert tree_entry.subject == h.subjects.quota


async def test_restart_publishes_nothing_for_unchanged_objects(h: Harness) -> None:
    await h.kube.create(TREES, "kube-system", tree())
    await h.kube.create(NODES, None, node("n1"))
    for name in ("a", "b"):
        await h.kube.create(JOBS, "user-a", job(name))
    async with h.watcher():
        await h.logged(WorkloadObserved, lambda e: e.name == "b")
        await h.logged(QuotaTreeApplied)
    before = await h.log()
    async with h.watcher():
        await h.kube.create(JOBS, "user-a", job("c"))
        await h.logged(WorkloadObserved, lambda e: e.name == "c")
        after = await h.log()
    assert [e.envelope.id for e in after[: len(before)]] == [e.envelope.id for e in before]
    new = [e.event for e in after[len(before) :]]
    assert [type(e).__name__ for e in new] == ["WorkloadObserved"], new


async def test_status_writes_of_our_own_publish_nothing(h: Harness) -> None:
    """The kubelet's status updates (and ours on the tree) change nothing relevant."""
    await h.kube.create(JOBS, "user-a", job("a", suspend=False))
    async with h.watcher():
        await h.logged(WorkloadObserved, lambda e: not e.suspended)
        current = await h.kube.get(JOBS, "user-a", "a")
        status = {**current, "status": {"startTime": "2026-01-01T00:00:00Z", "active": 1}}
        await h.kube.replace_status(JOBS, "user-a", "a", status)
        await h.kube.create(JOBS, "user-a", job("marker"))
        await h.logged(WorkloadObserved, lambda e: e.name == "marker")
        observed = of_type(await h.log(), WorkloadObserved)
    assert [ev.name for _, ev in observed] == ["a", "marker"]


async def test_malformed_job_is_rejected_and_others_still_flow(h: Harness) -> None:
    await h.kube.create(JOBS, "user-a", job("bad", cpu="ten"))
    await h.kube.create(JOBS, "user-a", job("good"))
    async with h.watcher():
        [(_, rejected)] = await h.logged(WorkloadRejected)
        await h.logged(WorkloadObserved, lambda e: e.name == "good")
        await h.kube.create(JOBS, "user-a", job("later"))
        await h.logged(WorkloadObserved, lambda e: e.name == "later")
    assert rejected.workload == "user-a/bad"
    assert rejected.kind == "batch/v1/Job"
    paths = [e.path for e in rejected.errors]
    assert paths == ["spec.template.spec.containers[0].resources.requests.cpu"]


def test_unsupported_kinds_are_what_the_core_refuses_and_get_no_patch() -> None:
    supported = {f.kind for f in JOB_FAMILIES}
    for family in UNSUPPORTED_FAMILIES:
        assert not family.supported and family.kind not in supported
        for resource_ in family.candidates:
            assert kind_id(resource_) not in SUPPORTED_KINDS
        manifest = unsupported_job(family.candidates[0], "replicaSpecs", "x")
        assert admit_patch(family, manifest, "zone-a") is None
        manifest["spec"]["runPolicy"]["suspend"] = False
        assert suspend_patch(family, manifest) is None
    covered = {kind_id(r) for f in JOB_FAMILIES for r in f.candidates}
    assert set(SUPPORTED_KINDS) <= covered


async def test_unsupported_kinds_are_rejected_never_admitted_and_deleted(h: Harness) -> None:
    kinds = [(XGBOOSTJOBS, "xgbReplicaSpecs", "xgb"), (PADDLEJOBS, "paddleReplicaSpecs", "pd"),
             (MXJOBS, "mxReplicaSpecs", "mx")]  # fmt: skip
    created = {
        name: await h.kube.create(res, "user-a", unsupported_job(res, field, name))
        for res, field, name in kinds
    }
    await h.kube.create(JOBS, "user-a", job("pi"))
    async with h.watcher():
        rejected = {}
        for _, _, name in kinds:
            [(entry, event)] = await h.logged(
                WorkloadRejected,
                lambda e, n=name: e.workload == f"user-a/{n}",  # type: ignore[misc]
            )
            rejected[name] = (entry, event)
        await h.logged(WorkloadObserved, lambda e: e.name == "pi")
        # A decision naming it (it can only be a mistake) is never carried out; the next is.
        await h.decide(admitted("user-a/xgb", "default"))
        await h.decide(admitted("user-a/pi", "default"))

        async def pi_unsuspended() -> bool:
            return (await h.kube.get(JOBS, "user-a", "pi"))["spec"]["suspend"] is False

        await h.eventually(pi_unsuspended)
        xgb = await h.kube.get(XGBOOSTJOBS, "user-a", "xgb")
        assert xgb["metadata"]["resourceVersion"] == created["xgb"]["metadata"]["resourceVersion"]
        assert xgb["spec"]["runPolicy"]["suspend"] is True
        assert await read_dlq(h.js, h.subjects) == []
        # Deleted like any rejected workload: the log said it exists, so it says it is gone.
        await h.kube.delete(XGBOOSTJOBS, "user-a", "xgb")
        await h.logged(WorkloadDeleted, lambda e: e.workload == "user-a/xgb")
    for res, _, name in kinds:
        entry, event = rejected[name]
        obj = created[name]
        with pytest.raises(WorkloadInvalid) as raised:
            extract_workload(obj, created_ms=Millis(0))
        assert event.errors == raised.value.errors
        assert [e.code for e in event.errors] == ["unsupported-kind"]
        assert "batch/v1/Job" in event.errors[0].message
        assert event.kind == f"kubeflow.org/v1/{res.kind}"
        meta = obj["metadata"]
        expected_id = (
            f"kubeflow.org/v1/{res.kind}:user-a/{name}:{meta['uid']}:"
            f"{meta['resourceVersion']}:workload.rejected.v1"
        )
        assert entry.envelope.id == expected_id == entry.msg_id
        assert entry.subject == h.subjects.job(Zone("default"), "user-a", name)

    # A restart republishes nothing it said already; one deleted while down is reported gone.
    await h.kube.delete(MXJOBS, "user-a", "mx")
    before = await h.log()
    async with h.watcher():
        [(gone, _)] = await h.logged(WorkloadDeleted, lambda e: e.workload == "user-a/mx")
        await h.kube.create(JOBS, "user-a", job("marker"))
        await h.logged(WorkloadObserved, lambda e: e.name == "marker")
        after = await h.log()
    assert ":gone:workload.deleted.v1" in gone.envelope.id
    new = [e.event for e in after[len(before) :]]
    assert sorted(type(e).__name__ for e in new) == ["WorkloadDeleted", "WorkloadObserved"], new


async def test_a_kind_the_cluster_does_not_serve_is_skipped(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = dataclasses.replace(UNSUPPORTED_FAMILIES[0], group="not-served.example.com")
    monkeypatch.setattr(watcher_service, "UNSUPPORTED_FAMILIES", (*UNSUPPORTED_FAMILIES, missing))
    await h.kube.create(XGBOOSTJOBS, "user-a", unsupported_job(XGBOOSTJOBS, "xgbReplicaSpecs", "x"))
    await h.kube.create(JOBS, "user-a", job("pi"))
    async with h.watcher():
        await h.logged(WorkloadRejected, lambda e: e.workload == "user-a/x")
        await h.logged(WorkloadObserved, lambda e: e.name == "pi")
        await h.decide(admitted("user-a/pi", "default"))

        async def pi_unsuspended() -> bool:
            return (await h.kube.get(JOBS, "user-a", "pi"))["spec"]["suspend"] is False

        await h.eventually(pi_unsuspended)
    assert await read_dlq(h.js, h.subjects) == []


async def test_invalid_tree_is_rejected_with_its_errors(h: Harness) -> None:
    await h.kube.create(TREES, "kube-system", tree(a_min="50"))
    async with h.watcher():
        [(entry, rejected)] = await h.logged(QuotaTreeRejected)
    assert entry.subject == h.subjects.quota
    messages = " ".join(f"{e.path} {e.message}" for e in rejected.errors)
    assert "Department-a" in messages and "cpu" in messages
    assert rejected.resource_version


def _accepted(obj: JsonObj) -> JsonObj | None:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Accepted"), None)


async def test_tree_status_says_accepted_or_why_not_and_a_rejection_is_an_event(
    h: Harness,
) -> None:
    """Item 3 of issue 14: a bad tree applied with kubectl is no longer silently ignored."""
    await h.kube.create(TREES, "kube-system", tree())

    def condition(status: str, generation: int) -> Callable[[], Awaitable[JsonObj | None]]:
        async def check() -> JsonObj | None:
            found = _accepted(await h.kube.get(TREES, "kube-system", "elasticquotatree"))
            ok = found and (found["status"], found["observedGeneration"]) == (status, generation)
            return found if ok else None

        return check

    async def warnings() -> list[JsonObj]:
        listed = await h.kube.list(EVENTS, namespace="kube-system")
        return [e for e in listed.items if e["involvedObject"]["name"] == "elasticquotatree"]

    async with h.watcher():
        applied = await h.eventually(condition("True", 1))
        assert (applied["reason"], applied["message"]) == ("Applied", "the tree is in force")
        current = await h.kube.get(TREES, "kube-system", "elasticquotatree")
        await h.kube.merge_patch(
            TREES, "kube-system", "elasticquotatree", {"spec": tree(a_min="50")["spec"]}
        )
        [(_, rejected)] = await h.logged(QuotaTreeRejected)
        assert (rejected.namespace, rejected.name) == ("kube-system", "elasticquotatree")
        refused = await h.eventually(condition("False", 2))
        assert refused["reason"] == "InvalidSpec"
        assert "spec.root.children[0](Department-a).min.cpu: min 50 > max 40" in refused["message"]
        assert refused["message"].endswith("the previous tree stays in force")
        assert refused["lastTransitionTime"] >= applied["lastTransitionTime"]
        [event] = await h.eventually(warnings)
        assert (event["type"], event["reason"], event["message"]) == (
            "Warning", "InvalidSpec", refused["message"]
        )  # fmt: skip
        assert event["involvedObject"]["uid"] == current["metadata"]["uid"]
        assert event["involvedObject"]["kind"] == "ElasticQuotaTree"
        # A label is not the spec: same generation, same condition, no second event.
        await h.kube.merge_patch(
            TREES, "kube-system", "elasticquotatree", {"metadata": {"labels": {"team": "x"}}}
        )
        labelled = await h.kube.get(TREES, "kube-system", "elasticquotatree")
        assert labelled["metadata"]["generation"] == 2
        await asyncio.sleep(0.5)
    async with h.watcher():  # a restart says nothing twice
        await h.eventually(condition("False", 2))
        await asyncio.sleep(0.5)
        assert len(await warnings()) == 1
        # Fixed, the tree is in force again and the condition says so for generation 3.
        await h.kube.merge_patch(TREES, "kube-system", "elasticquotatree", {"spec": tree()["spec"]})
        await h.eventually(condition("True", 3))


async def test_finished_job_is_reported_once(h: Harness) -> None:
    await h.kube.create(JOBS, "user-a", job("a", suspend=False))
    async with h.watcher():
        await h.logged(WorkloadObserved)
        current = await h.kube.get(JOBS, "user-a", "a")
        done = {"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"}
        current["status"] = {"conditions": [done], "succeeded": 1}
        await h.kube.replace_status(JOBS, "user-a", "a", current)
        [(_, finished)] = await h.logged(WorkloadFinished)
        current = await h.kube.get(JOBS, "user-a", "a")
        current["status"]["completionTime"] = "2026-01-01T00:00:06Z"
        await h.kube.replace_status(JOBS, "user-a", "a", current)
        await h.kube.delete(JOBS, "user-a", "a")
        await h.logged(WorkloadDeleted)
        finished_events = of_type(await h.log(), WorkloadFinished)
    assert finished.succeeded and finished.finished_ms == 1767225605000
    assert len(finished_events) == 1


async def test_410_gone_relists_and_finds_what_the_watch_missed(h: Harness, tmp_path: Path) -> None:
    await h.kube.create(JOBS, "user-a", job("a"))
    await h.kube.create(JOBS, "user-a", job("b"))
    async with h.watcher(FAST):
        await h.logged(WorkloadObserved, lambda e: e.name == "b")
        # The API server goes away; meanwhile b is deleted, c created and history compacted,
        # so the watch cannot resume: the watcher must list again.
        await h.emu.stop()
        store = h.emu.store
        store.delete(resource("batch", "v1", "jobs"), "user-a", "b")
        store.create(resource("batch", "v1", "jobs"), "user-a", job("c"))
        store.compact(keep_last=0)
        again = KubeEmulator(
            port=h.emu.port, store=store, kubeconfig_path=h.emu.kubeconfig_path,
            token=h.emu.token, tls_identity=h.emu.tls_identity,
        )  # fmt: skip
        async with again:
            [(gone, _)] = await h.logged(WorkloadDeleted, lambda e: e.workload == "user-a/b")
            await h.logged(WorkloadObserved, lambda e: e.name == "c")
    assert ":gone:workload.deleted.v1" in gone.envelope.id


async def test_workload_deleted_while_down_is_reported(h: Harness) -> None:
    for name in ("a", "b"):
        await h.kube.create(JOBS, "user-a", job(name))
    async with h.watcher():
        await h.logged(WorkloadObserved, lambda e: e.name == "b")
    await h.kube.delete(JOBS, "user-a", "b")
    async with h.watcher():
        [(entry, _)] = await h.logged(WorkloadDeleted)
        await h.kube.create(JOBS, "user-a", job("marker"))
        await h.logged(WorkloadObserved, lambda e: e.name == "marker")
        deleted = of_type(await h.log(), WorkloadDeleted)
    assert [ev.workload for _, ev in deleted] == ["user-a/b"]
    assert entry.subject == h.subjects.job(Zone("default"), "user-a", "b")


# --------------------------------------------------------------------------- decisions


async def test_admitted_unsuspends_and_pins_the_zone_preempted_suspends(h: Harness) -> None:
    await h.kube.create(JOBS, "user-a", job("pi", zone="zone-a"))
    async with h.watcher():
        await h.logged(WorkloadObserved, lambda e: e.name == "pi")
        await h.decide(admitted("user-a/pi"), "zone-a")

        async def unsuspended() -> JsonObj | None:
            obj = await h.kube.get(JOBS, "user-a", "pi")
            return obj if obj["spec"]["suspend"] is False else None

        running = await h.eventually(unsuspended)
        assert running["spec"]["template"]["spec"]["nodeSelector"] == {"usher.io/zone": "zone-a"}
        await h.logged(WorkloadObserved, lambda e: e.name == "pi" and not e.suspended)
        await h.decide(preempted("user-a/pi"), "zone-a")

        async def suspended() -> bool:
            return (await h.kube.get(JOBS, "user-a", "pi"))["spec"]["suspend"] is True

        await h.eventually(suspended)
    info = await h.js.consumer_info(h.subjects.stream_name, consumer_name(h.subjects))
    assert info.num_ack_pending == 0 and info.num_pending == 0


async def test_requeued_suspends_like_a_preemption(h: Harness) -> None:
    """R10: the watcher carries out the ledger's Requeued by suspending the job."""
    await h.kube.create(JOBS, "user-a", job("stuck", zone="zone-a"))
    async with h.watcher():
        await h.logged(WorkloadObserved, lambda e: e.name == "stuck")
        await h.decide(admitted("user-a/stuck"), "zone-a")
        await h.logged(WorkloadObserved, lambda e: e.name == "stuck" and not e.suspended)
        await h.decide(requeued("user-a/stuck"), "zone-a")

        async def suspended() -> bool:
            return (await h.kube.get(JOBS, "user-a", "stuck"))["spec"]["suspend"] is True

        await h.eventually(suspended)
    info = await h.js.consumer_info(h.subjects.stream_name, consumer_name(h.subjects))
    assert info.num_ack_pending == 0 and info.num_pending == 0


async def test_admitted_patches_every_template_of_list_kinds(h: Harness) -> None:
    await h.kube.create(RAYJOBS, "user-a", rayjob("ray"))
    await h.kube.create(JOBSETS, "user-a", jobset("set"))
    await h.kube.create(TFJOBS, "user-a", tfjob("tf"))
    async with h.watcher():
        for name in ("ray", "set", "tf"):
            await h.logged(WorkloadObserved, lambda e, n=name: e.name == n)  # type: ignore[misc]
            await h.decide(admitted(f"user-a/{name}", "zone-b"))

        async def all_pinned() -> bool:
            ray = await h.kube.get(RAYJOBS, "user-a", "ray")
            js = await h.kube.get(JOBSETS, "user-a", "set")
            tf = await h.kube.get(TFJOBS, "user-a", "tf")
            pinned = [*selectors(ray, "RayJob"), *selectors(js, "JobSet"), *selectors(tf, "TFJob")]
            suspends = [ray["spec"]["suspend"], js["spec"]["suspend"]]
            running = [*suspends, tf["spec"]["runPolicy"]["suspend"]] == [False] * 3
            return set(pinned) == {"zone-b"} and running

        await h.eventually(all_pinned)
    ray = await h.kube.get(RAYJOBS, "user-a", "ray")
    groups = ray["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert [(g["groupName"], g["replicas"]) for g in groups] == [("small", 1), ("big", 2)]


async def test_garbage_decision_is_parked_and_the_next_is_carried_out(h: Harness) -> None:
    await h.kube.create(JOBS, "user-a", job("pi"))
    async with h.watcher():
        await h.logged(WorkloadObserved, lambda e: e.name == "pi")
        garbage_subject = h.subjects.decision(Zone("default"), "admitted", "user-a", "pi")
        await h.js.publish(garbage_subject, b"{not json")
        await h.decide(admitted("user-a/pi", "default"))

        async def unsuspended() -> bool:
            return (await h.kube.get(JOBS, "user-a", "pi"))["spec"]["suspend"] is False

        await h.eventually(unsuspended)

        async def parked() -> list[DeadLetter]:
            return await read_dlq(h.js, h.subjects)

        letters = await h.eventually(parked)
    assert [(d.service, d.subject, d.data) for d in letters] == [
        ("watcher", garbage_subject, b"{not json")
    ]
    assert letters[0].error in ("DecodeError", "ValidationError")


async def test_forged_decisions_are_parked_and_never_carried_out(h: Harness) -> None:
    """Only the ledger admits: an ``Admitted`` on another action's subject, on the subject of
    another job, to another zone or from another source is parked with why, not obeyed."""
    await h.kube.create(JOBS, "user-c", job("forge-big", "user-c", cpu="200"))
    await h.kube.create(JOBS, "user-a", job("pi"))
    forge = admitted("user-c/forge-big", "default")
    unmapped = h.subjects.decision(Zone("default"), "unmapped", "user-c", "forge-big")
    other_job = h.subjects.decision(Zone("default"), "admitted", "user-a", "pi")
    other_zone = h.subjects.decision(Zone("zone-b"), "admitted", "user-c", "forge-big")
    counted = process_metrics().registry.get_sample_value

    def forged_count(decision: str) -> float:
        return counted("usher_forged_decisions_total", {"decision": decision}) or 0.0

    before = forged_count("Admitted"), forged_count("Preempted")
    async with h.watcher():
        await h.logged(WorkloadObserved, lambda e: e.name == "pi")
        await h.logged(WorkloadObserved, lambda e: e.name == "forge-big")
        await h.decide(forge, subject=unmapped)
        await h.decide(forge, subject=other_job)
        await h.decide(forge, subject=other_zone)
        await h.decide(forge, source="usher/dequeuer/default")
        await h.decide(preempted("user-a/pi"), subject=unmapped)
        # A real ledger decision after them all is still carried out.
        await h.decide(admitted("user-a/pi", "default"))

        async def pi_unsuspended() -> bool:
            return (await h.kube.get(JOBS, "user-a", "pi"))["spec"]["suspend"] is False

        await h.eventually(pi_unsuspended)

        async def parked() -> list[DeadLetter] | None:
            letters = await read_dlq(h.js, h.subjects)
            return letters if len(letters) >= 5 else None

        letters = await h.eventually(parked)
        forged = await h.kube.get(JOBS, "user-c", "forge-big")
    assert forged["spec"]["suspend"] is True
    assert [(d.service, d.error) for d in letters] == [("watcher", "ForgedDecision")] * 5
    # What the alert UsherForgedDecisions reads (deploy/monitoring/usher-alerts.yaml).
    assert (forged_count("Admitted") - before[0], forged_count("Preempted") - before[1]) == (4, 1)
    assert [d.subject for d in letters] == [unmapped, other_job, other_zone, h.subjects.decision(
        Zone("default"), "admitted", "user-c", "forge-big"), unmapped]  # fmt: skip
    details = [d.detail for d in letters]
    home = h.subjects.decision(Zone("default"), "admitted", "user-c", "forge-big")
    assert all(f"on {subject!r}; it belongs on {home!r}" in details[at]
               for at, subject in enumerate([unmapped, other_job, other_zone]))  # fmt: skip
    assert "from 'usher/dequeuer/default'; only 'usher/ledger'" in details[3]
    assert f"decision.preempted.v1 on {unmapped!r}; it belongs on" in details[4]
    assert all(decode_envelope(d.data).event.workload in ("user-c/forge-big", "user-a/pi")
               for d in letters)  # fmt: skip


async def test_a_managed_job_running_without_admission_is_suspended_with_a_reason(
    h: Harness,
) -> None:
    await h.kube.create(TREES, "kube-system", tree())
    await h.kube.create(JOBS, "user-a", job("rogue", suspend=False, cpu="500"))
    await h.kube.create(JOBS, "elsewhere", job("unmanaged", "elsewhere", suspend=False))
    async with h.watcher():
        [(entry, rejected)] = await h.logged(
            WorkloadRejected, lambda e: e.workload == "user-a/rogue"
        )
        await h.logged(WorkloadObserved, lambda e: e.name == "rogue" and e.suspended)
        assert (await h.kube.get(JOBS, "user-a", "rogue"))["spec"]["suspend"] is True
        # One created running while the watcher watches is caught the same way.
        await h.kube.create(JOBS, "user-a", job("late", suspend=False))
        await h.logged(WorkloadRejected, lambda e: e.workload == "user-a/late")
        await h.logged(WorkloadObserved, lambda e: e.name == "late" and e.suspended)
        # Once the ledger admits it, it runs and stays running.
        await h.decide(admitted("user-a/late", "default"))
        await h.logged(WorkloadObserved, lambda e: e.name == "late" and not e.suspended)
        await h.kube.create(JOBS, "user-a", job("marker"))
        await h.logged(WorkloadObserved, lambda e: e.name == "marker")
        late = await h.kube.get(JOBS, "user-a", "late")
        unmanaged = await h.kube.get(JOBS, "elsewhere", "unmanaged")
        rejections = of_type(await h.log(), WorkloadRejected)
    assert late["spec"]["suspend"] is False
    assert unmanaged["spec"]["suspend"] is False  # no leaf takes its namespace: not Usher's
    assert sorted(ev.workload for _, ev in rejections) == ["user-a/late", "user-a/rogue"]
    assert [(e.path, e.code) for e in rejected.errors] == [("spec.suspend", "not-admitted")]
    assert "without an admission" in rejected.errors[0].message
    assert entry.subject == h.subjects.job(Zone("default"), "user-a", "rogue")


def zero_request_tree() -> JsonObj:
    """Zero-request jobs allowed from the root down, except under Department-b."""
    manifest = tree()
    root = manifest["spec"]["root"]
    root["attributes"] = {ALLOW_ZERO: "true"}
    root["children"][1]["attributes"] = {ALLOW_ZERO: "false"}
    root["children"][1]["namespaces"] = ["user-c", "user-d"]
    return manifest


async def test_jobs_without_requests_get_limit_range_defaults_or_are_rejected(
    h: Harness,
) -> None:
    await h.kube.create(TREES, "kube-system", zero_request_tree())
    limit_range = {
        "metadata": {"name": "defaults"},
        "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "2"},
                             "default": {"cpu": "4", "memory": "1Gi"}}]},
    }  # fmt: skip
    await h.kube.create(LIMIT_RANGES, "user-d", limit_range)
    await h.kube.create(JOBS, "user-a", job("bare", resources={}))
    await h.kube.create(JOBS, "user-c", job("bare", "user-c", resources={}))
    await h.kube.create(JOBS, "user-d", job("bare", "user-d", resources={}))
    await h.kube.create(JOBS, "user-d", job("part", "user-d", resources={"limits": {"cpu": "8"}}))
    async with h.watcher():
        [(_, rejected)] = await h.logged(WorkloadRejected, lambda e: e.workload == "user-c/bare")
        [(_, allowed)] = await h.logged(WorkloadObserved, lambda e: e.workload == "user-a/bare")
        [(_, defaulted)] = await h.logged(WorkloadObserved, lambda e: e.workload == "user-d/bare")
        [(_, part)] = await h.logged(WorkloadObserved, lambda e: e.workload == "user-d/part")
    path = "spec.template.spec.containers[0].resources.requests"
    assert [(e.path, e.code) for e in rejected.errors] == [(path, "no-requests")]
    assert allowed.pod_sets[0].requests == {}  # the root's "true" reaches Department-a
    assert defaulted.pod_sets[0].requests == {"cpu": 2000, "memory": 2**30}
    assert part.pod_sets[0].requests == {"cpu": 8000, "memory": 2**30}  # the limit is its own


async def test_decision_for_a_deleted_or_finished_workload_is_skipped(h: Harness) -> None:
    await h.kube.create(JOBS, "user-a", job("gone"))
    await h.kube.create(JOBS, "user-a", job("pi"))
    async with h.watcher():
        await h.logged(WorkloadObserved, lambda e: e.name == "pi")
        await h.kube.delete(JOBS, "user-a", "gone")
        await h.logged(WorkloadDeleted)
        await h.decide(admitted("user-a/gone"))
        await h.decide(admitted("user-a/pi"))

        async def unsuspended() -> bool:
            return (await h.kube.get(JOBS, "user-a", "pi"))["spec"]["suspend"] is False

        await h.eventually(unsuspended)
        assert await read_dlq(h.js, h.subjects) == []


async def test_a_decision_superseded_on_the_log_is_not_carried_out(h: Harness) -> None:
    created = await h.kube.create(JOBS, "user-a", job("pi"))
    # Admitted then Preempted, both on the log before the watcher starts: only the latest
    # counts, so the job must never be unsuspended (not even for a moment).
    await h.decide(admitted("user-a/pi"))
    await h.decide(preempted("user-a/pi"))
    async with h.watcher():

        async def all_acked() -> bool:
            name = consumer_name(h.subjects)
            try:
                info = await h.js.consumer_info(h.subjects.stream_name, name)
            except Exception:
                return False
            return (
                info.num_pending == 0
                and info.num_ack_pending == 0
                and info.delivered.stream_seq >= 2
            )

        await h.eventually(all_acked)
    current = await h.kube.get(JOBS, "user-a", "pi")
    assert current["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_kubelet_runs_admitted_work_to_completion_and_preemption_releases(
    h: Harness,
) -> None:
    kubelet = FakeKubelet(h.emu.store, speed=1.0)
    kubelet.start()
    try:
        quick = {"usher.io/sim-duration": "0.2"}
        manifests = [(JOBS, job("j")), (TFJOBS, tfjob("tf")), (RAYJOBS, rayjob("ray")),
                     (JOBSETS, jobset("set"))]  # fmt: skip
        for res, manifest in manifests:
            manifest["metadata"]["annotations"] = quick
            await h.kube.create(res, "user-a", manifest)
        await h.kube.create(JOBS, "user-a", job("forever"))
        async with h.watcher():
            names = ["j", "tf", "ray", "set", "forever"]
            for name in names:
                await h.logged(WorkloadObserved, lambda e, n=name: e.name == n)
                await h.decide(admitted(f"user-a/{name}"))
            finished = await h.eventually(_finished_count(h, 4))
            assert all(ev.succeeded for _, ev in finished)
            await h.logged(WorkloadObserved, lambda e: e.name == "forever" and not e.suspended)
            await h.decide(preempted("user-a/forever"))
            # Suspended only once the kubelet reports no active pods: that releases the quota.
            await h.logged(WorkloadObserved, lambda e: e.name == "forever" and e.suspended)
    finally:
        kubelet.stop()


async def test_spark_and_argo_are_observed_admitted_run_and_preempted(h: Harness) -> None:
    kubelet = FakeKubelet(h.emu.store, speed=1.0)
    kubelet.start()
    try:
        quick = {"usher.io/sim-duration": "0.2"}
        for res, manifest in ((SPARKAPPS, sparkapp("spark")), (WORKFLOWS, workflow("wf"))):
            manifest["metadata"]["annotations"] = quick
            await h.kube.create(res, "user-a", manifest)
        await h.kube.create(WORKFLOWS, "user-a", workflow("forever"))
        async with h.watcher():
            ((_, spark),) = await h.logged(WorkloadObserved, lambda e: e.name == "spark")
            assert spark.kind == "sparkoperator.k8s.io/v1beta2/SparkApplication"
            assert [(p.name, p.count, p.requests) for p in spark.pod_sets] == [
                ("driver", 1, {"cpu": 1000, "memory": 2 * 2**30}),
                ("executor", 2, {"cpu": 2000, "memory": 2 * 2**30}),
            ]
            ((_, flow),) = await h.logged(WorkloadObserved, lambda e: e.name == "wf")
            assert [(p.name, p.count, p.requests) for p in flow.pod_sets] == [
                ("main", 3, {"cpu": 2000, "memory": 2 * 2**30})
            ]
            await h.logged(WorkloadObserved, lambda e: e.name == "forever")
            for name in ("spark", "wf", "forever"):
                await h.decide(admitted(f"user-a/{name}", "zone-b"))

            async def pinned() -> bool:
                app = await h.kube.get(SPARKAPPS, "user-a", "spark")
                wf = await h.kube.get(WORKFLOWS, "user-a", "forever")
                zones = [*selectors(app, "SparkApplication"), *selectors(wf, "Workflow")]
                running = [app["spec"]["suspend"], wf["spec"]["suspend"]] == [False, False]
                return set(zones) == {"zone-b"} and running

            await h.eventually(pinned)
            finished = await h.eventually(_finished_count(h, 2))
            assert sorted(ev.workload for _, ev in finished) == ["user-a/spark", "user-a/wf"]
            assert all(ev.succeeded for _, ev in finished)
            await h.logged(WorkloadObserved, lambda e: e.name == "forever" and not e.suspended)
            await h.decide(preempted("user-a/forever"), "zone-b")
            # Suspended only once the kubelet reports no live Pod node: that releases the quota.
            await h.logged(WorkloadObserved, lambda e: e.name == "forever" and e.suspended)
    finally:
        kubelet.stop()


def _finished_count(
    h: Harness, count: int
) -> Callable[[], Awaitable[list[tuple[Logged, WorkloadFinished]] | None]]:
    async def check() -> list[tuple[Logged, WorkloadFinished]] | None:
        finished = of_type(await h.log(), WorkloadFinished)
        return finished if len(finished) >= count else None

    return check


# --------------------------------------------------------------------------- status


async def test_a_queue_lists_its_first_pending_jobs_and_counts_them_all(h: Harness) -> None:
    await h.kube.create(TREES, "kube-system", tree())
    for name in ("pi-1", "pi-2", "pi-3"):
        await h.kube.create(JOBS, "user-a", job(name))
    async with h.watcher(dataclasses.replace(FAST, queue_status_items=2)):

        async def counted() -> JsonObj | None:
            try:
                obj = await h.kube.get(QUEUES, "kube-queue", "root-department-a-user-a")
            except NotFound:
                return None
            return obj if (obj.get("status") or {}).get("pending") == 3 else None

        queue = await h.eventually(counted)
    names = [i["name"] for i in queue["status"]["queueItemDetails"]["active"]]
    assert names == ["pi-1", "pi-2"]  # the first two in order; the third is counted only


async def test_queues_and_tree_usage_follow_the_log(h: Harness) -> None:
    await h.kube.create(TREES, "kube-system", tree())
    await h.kube.create(CLASSES, None, priority_class("priority-2", 2))
    for name in ("pi-1", "pi-2"):
        await h.kube.create(JOBS, "user-a", job(name))
    await h.kube.create(JOBS, "user-a", job("pi-high", priority_class="priority-2"))
    async with h.watcher():

        async def queue_a() -> JsonObj | None:
            try:
                obj = await h.kube.get(QUEUES, "kube-queue", "root-department-a-user-a")
            except NotFound:
                return None
            active = (obj.get("status") or {}).get("queueItemDetails", {}).get("active", [])
            return obj if len(active) == 3 else None

        queue = await h.eventually(queue_a)
        assert queue["metadata"]["labels"] == {"create-by-kubequeue": "true"}
        assert queue["metadata"]["annotations"]["kube-queue/quota-fullname"] == "root/Department-a"
        assert queue["spec"] == {"queuePolicy": "Round"}
        assert queue["status"]["queueItemDetails"] == {
            "active": [
                {"name": "pi-high", "namespace": "user-a", "position": 1, "priority": 2},
                {"name": "pi-1", "namespace": "user-a", "position": 2, "priority": 0},
                {"name": "pi-2", "namespace": "user-a", "position": 3, "priority": 0},
            ],
            "backoff": [],
        }
        await h.kube.get(QUEUES, "kube-queue", "root-department-b-user-c")

        # An admission on the log moves the job out of the queue and into the tree's usage.
        await h.decide(admitted("user-a/pi-high", "default"))

        async def used() -> JsonObj | None:
            obj = await h.kube.get(TREES, "kube-system", "elasticquotatree")
            usage = (obj.get("status") or {}).get("used", {})
            return usage if usage.get("root/Department-a") else None

        usage = await h.eventually(used)
        assert usage["root/Department-a"] == {"cpu": "10", "memory": "10Gi"}
        assert usage["root"] == {"cpu": "10", "memory": "10Gi"}
        assert usage["root/Department-b"] == {}
        queue = await h.eventually(_queue_with(h, 2))
        names = [i["name"] for i in queue["status"]["queueItemDetails"]["active"]]
        assert names == ["pi-1", "pi-2"]

        # A leaf that vanishes takes its queue with it.
        current = await h.kube.get(TREES, "kube-system", "elasticquotatree")
        current["spec"] = tree(department_b=False)["spec"]
        await h.kube.merge_patch(
            TREES, "kube-system", "elasticquotatree", {"spec": current["spec"]}
        )

        async def b_gone() -> bool:
            listed = await h.kube.list(QUEUES, namespace="kube-queue")
            return [i["metadata"]["name"] for i in listed.items] == ["root-department-a-user-a"]

        await h.eventually(b_gone)


async def test_a_deleted_tree_stays_in_force_and_the_log_says_so(h: Harness) -> None:
    await h.kube.create(TREES, "kube-system", tree())
    await h.kube.create(JOBS, "user-a", job("pi"))
    async with h.watcher():
        await h.logged(QuotaTreeApplied)
        await h.eventually(_queue_with(h, 1))
        await h.kube.delete(TREES, "kube-system", "elasticquotatree")
        [(entry, deleted)] = await h.logged(QuotaTreeDeleted)
        assert (deleted.namespace, deleted.name) == ("kube-system", "elasticquotatree")
        assert entry.subject == h.subjects.quota
        # Nothing changes but that: the queues stay and an admission is carried out.
        await h.decide(admitted("user-a/pi", "default"))

        async def unsuspended() -> bool:
            return (await h.kube.get(JOBS, "user-a", "pi"))["spec"].get("suspend") is False

        await h.eventually(unsuspended)
        listed = await h.kube.list(QUEUES, namespace="kube-queue")
        assert sorted(i["metadata"]["name"] for i in listed.items) == [
            "root-department-a-user-a",
            "root-department-b-user-c",
        ]
    # A restart does not say it again.
    async with h.watcher():
        await h.kube.create(JOBS, "user-a", job("marker"))
        await h.logged(WorkloadObserved, lambda e: e.name == "marker")
    assert len(of_type(await h.log(), QuotaTreeDeleted)) == 1
    view = (await read_state(h.js, h.subjects, EngineConfig())).view(now_ms(), reasons_too=False)
    assert view.tree_deleted is not None
    assert view.tree_deleted.tree == "kube-system/elasticquotatree"
    assert "the last tree stays in force" in view.tree_deleted.describe()
    assert [q.path for q in view.quota][:2] == ["root", "root/Department-a"]
    # `usher quota` says so above the tree still in force (on stderr for scripts' formats).
    target = ("--nats", h.infra.nats_url, "--prefix", h.subjects.prefix, "--home", "/nonexistent")
    table = await asyncio.to_thread(usher, "quota", *target)
    assert table.returncode == 0, table.stderr
    first, *rest = table.stdout.splitlines()
    assert first.startswith("ElasticQuotaTree kube-system/elasticquotatree deleted at ")
    assert first.endswith(": the last tree stays in force and admissions go on under it; "
                          "apply a tree to change it")  # fmt: skip
    assert rest[0].split()[0] == "NODE" and rest[1].split()[0] == "root"
    as_json = await asyncio.to_thread(usher, "quota", "-o", "json", *target)
    assert json.loads(as_json.stdout)[0]["path"] == "root"
    assert as_json.stderr.startswith("usher: ElasticQuotaTree kube-system/elasticquotatree deleted")

    # Applied again, then deleted while no watcher runs: said at the next start, unnamed.
    async with h.watcher():
        await h.kube.create(TREES, "kube-system", tree())
        await h.eventually(_logged_times(h, QuotaTreeApplied, 2))
    await h.kube.delete(TREES, "kube-system", "elasticquotatree")
    async with h.watcher():
        later = (await h.eventually(_logged_times(h, QuotaTreeDeleted, 2)))[1]
    assert (later[1].namespace, later[1].name) == ("", "")
    assert ":gone:quota.deleted.v1" in later[0].envelope.id
    view = (await read_state(h.js, h.subjects, EngineConfig())).view(now_ms(), reasons_too=False)
    assert view.tree_deleted is not None and view.tree_deleted.tree == ""


def _logged_times(
    h: Harness, kind: type[T], count: int
) -> Callable[[], Awaitable[list[tuple[Logged, T]] | None]]:
    async def check() -> list[tuple[Logged, T]] | None:
        found = of_type(await h.log(), kind)
        return found if len(found) == count else None

    return check


def _queue_with(h: Harness, count: int) -> Callable[[], Awaitable[JsonObj | None]]:
    async def check() -> JsonObj | None:
        obj = await h.kube.get(QUEUES, "kube-queue", "root-department-a-user-a")
        active = (obj.get("status") or {}).get("queueItemDetails", {}).get("active", [])
        return obj if len(active) == count else None

    return check


async def test_missing_kubeconfig_is_a_clear_error(h: Harness) -> None:
    ctx = h.context()
    ctx.settings = ServiceSettings(nats_url=h.infra.nats_url, prefix=h.subjects.prefix)
    with pytest.raises(SettingsError, match="kubeconfig"):
        await main(ctx)


def test_a_kind_without_a_pod_reader_reports_its_gang_ready_once_active() -> None:
    # RayJob's operator keeps no per-pod counts: all ready once its cluster runs, none before,
    # so a ready timeout on its quota node evicts only a RayJob that never started (R10).
    from services.watcher.kinds import family_of_kind
    from services.watcher.translate import workload_progress

    family = family_of_kind("ray.io/v1/RayJob")
    assert family is not None and family.pods is None
    subjects = Subjects("t")
    waiting = rayjob("ray")
    running = copy.deepcopy(waiting)
    running["spec"]["suspend"] = False
    running["status"] = {"jobDeploymentStatus": "Running"}
    before = workload_progress(RAYJOBS, family, waiting, subjects, Millis(1))
    after = workload_progress(RAYJOBS, family, running, subjects, Millis(2))
    assert before is not None and isinstance(before.event, WorkloadProgress)
    assert after is not None and isinstance(after.event, WorkloadProgress)
    assert (before.event.ready, before.event.total) == (0, 4)  # head + 1 small + 2 big
    assert (after.event.ready, after.event.total) == (4, 4)
