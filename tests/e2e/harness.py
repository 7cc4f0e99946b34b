"""End-to-end harness: every service running against real NATS, PostgreSQL and the emulator.

What it does: starts the four services in this process, each with its own NATS connection
(as separate processes would have), plays scenario files through the Kubernetes API with
kubernetes_asyncio, waits until the log is quiet, and reads back what the system did: job
states from the log and the emulator, queue orders from the ``Queue`` objects the watcher
writes, quota usage from the ledger.
What it must never do: feed the services anything but Kubernetes objects, or read state the
services did not publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import nats
import yaml
from kubernetes_asyncio import client, config
from nats.aio.client import Client
from nats.js import JetStreamContext
from sqlalchemy.ext.asyncio import create_async_engine

from schemas import Millis, QuotaPath, WorkloadKey, Zone, decode_envelope
from services.common.runtime import ServiceContext, ServiceMain
from services.common.settings import ServiceSettings
from services.dequeuer.service import main as dequeuer_main
from services.ledger.service import main as ledger_main
from services.preemptor.service import main as preemptor_main
from services.watcher.service import main as watcher_main
from tests.services.helpers import eventually
from usher.adapters.logs import get_logger
from usher.adapters.nats.subjects import Subjects
from usher.adapters.pg.ledger_store import LedgerStore
from usher.core.engine.facade import Engine
from usher.core.model.config import EngineConfig
from usher.local.kube_emulator import KubeEmulator

EQT = ("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees")
QUEUES = ("scheduling.x-k8s.io", "v1alpha1", "queues")
T = TypeVar("T")


@dataclass
class RunningService:
    name: str
    nc: Client
    stop: asyncio.Event
    task: asyncio.Task[None]


@dataclass
class InProcessStack:
    """The four services as tasks of this event loop."""

    nats_url: str
    database_url: str
    subjects: Subjects
    kubeconfig: Path
    engine: EngineConfig
    zones: tuple[str, ...] = ("default",)
    settle_ms: int = 150
    running: list[RunningService] = field(default_factory=list)

    def settings(self, zone: str | None = None) -> ServiceSettings:
        return ServiceSettings(
            nats_url=self.nats_url,
            database_url=self.database_url,
            kubeconfig=self.kubeconfig,
            prefix=self.subjects.prefix,
            zone=Zone(zone) if zone else None,
            engine=EngineConfig(
                policy=self.engine.policy,
                oversell_rate=self.engine.oversell_rate,
                within_quota=self.engine.within_quota,
                min_runtime_ms=self.engine.min_runtime_ms,
                zones=frozenset({Zone(zone)}) if zone else None,
            ),
            request_timeout_s=3.0,
            status_interval_s=0.1,
            settle_ms=self.settle_ms,
        )

    async def start_service(self, name: str, main: ServiceMain, zone: str | None = None) -> None:
        nc = await nats.connect(self.nats_url, connect_timeout=5, max_reconnect_attempts=-1)
        stop = asyncio.Event()
        settings = self.settings(zone)
        ctx = ServiceContext(
            name=name,
            settings=settings,
            nc=nc,
            js=nc.jetstream(),
            subjects=self.subjects,
            stop=stop,
            log=get_logger(service=name, zone=zone),
        )
        task = asyncio.create_task(main(ctx), name=f"{name}-{zone}")
        self.running.append(RunningService(name, nc, stop, task))

    async def start(self) -> None:
        await self.start_service("ledger", ledger_main)
        await self.start_service("preemptor", preemptor_main)
        for zone in self.zones:
            await self.start_service("dequeuer", dequeuer_main, zone)
        await self.start_service("watcher", watcher_main)

    async def stop(self) -> None:
        for service in reversed(self.running):
            service.stop.set()
        for service in reversed(self.running):
            try:
                await asyncio.wait_for(service.task, timeout=10)
            finally:
                with contextlib.suppress(Exception):
                    await service.nc.drain()
        self.running.clear()

    def failures(self) -> list[str]:
        """Services whose task ended with an exception (a crashed loop)."""
        out = []
        for service in self.running:
            if service.task.done() and service.task.exception() is not None:
                out.append(f"{service.name}: {service.task.exception()!r}")
        return out

    async def until(
        self, check: Callable[[], Awaitable[T | None]], what: str, *, within_s: float
    ) -> T:
        """Poll ``check`` until it returns something truthy and return that, failing at once
        when a service crashed and after ``within_s`` with ``what`` was not reached."""

        async def while_healthy() -> T | None:
            assert self.failures() == []
            return await check()

        found = await eventually(while_healthy, timeout_s=within_s, every_s=0.1)
        assert found, f"{what} not within {within_s}s"
        return found


@contextlib.asynccontextmanager
async def in_process_stack(
    nats_url: str, database_url: str, subjects: Subjects, emu: KubeEmulator
) -> AsyncIterator[InProcessStack]:
    """The four services over this test's subjects, database and emulator, with the default
    engine settings, for the block; stopped whatever happens in it (or in starting them)."""
    stack = InProcessStack(
        nats_url=nats_url,
        database_url=database_url,
        subjects=subjects,
        kubeconfig=emu.kubeconfig_path,
        engine=EngineConfig(),
    )
    try:
        await stack.start()
        yield stack
    finally:
        await stack.stop()


@contextlib.asynccontextmanager
async def kube_api(emu: KubeEmulator) -> AsyncIterator[client.ApiClient]:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(emu.kubeconfig_path), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        yield api


async def quiesce(
    js: JetStreamContext, subjects: Subjects, *, quiet_s: float = 0.8, timeout_s: float = 30.0
) -> int:
    """Wait until the log's last sequence has not moved for ``quiet_s``; returns it."""
    deadline = time.monotonic() + timeout_s
    last = -1
    since = time.monotonic()
    while time.monotonic() < deadline:
        info = await js.stream_info(subjects.stream_name)
        seq = int(info.state.last_seq)
        if seq != last:
            last, since = seq, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return seq
        await asyncio.sleep(0.05)
    raise TimeoutError(f"the log kept moving for {timeout_s}s (last seq {last})")


async def read_log(js: JetStreamContext, subjects: Subjects) -> list[tuple[int, str, Any]]:
    """Every entry of the log as (seq, subject, envelope), via direct gets (no consumer)."""
    info = await js.stream_info(subjects.stream_name)
    out = []
    # An empty stream reports first and last sequence 0, and a get of sequence 0 is refused.
    for seq in range(max(1, int(info.state.first_seq)), int(info.state.last_seq) + 1):
        msg = await js.get_msg(subjects.stream_name, seq, direct=True)
        out.append((seq, msg.subject, decode_envelope(msg.data or b"")))
    return out


async def events_of(js: JetStreamContext, subjects: Subjects, kind: type[T]) -> list[T]:
    """The events of type ``kind`` on the log, in order."""
    return [envelope.event for _, _, envelope in await read_log(js, subjects)
            if isinstance(envelope.event, kind)]  # fmt: skip


async def decisions(
    js: JetStreamContext, subjects: Subjects, kinds: tuple[type[Any], ...]
) -> list[tuple[str, str]]:
    """(event type, workload) of each event of ``kinds`` on the log, in order (none while the
    log is empty)."""
    if not (await js.stream_info(subjects.stream_name)).state.last_seq:
        return []
    return [
        (type(envelope.event).__name__, envelope.event.workload)
        for _, _, envelope in await read_log(js, subjects)
        if isinstance(envelope.event, kinds)
    ]


# ------------------------------------------------------------------ scenario playback


def load_raw(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


async def create_object(api: client.ApiClient, manifest: dict[str, Any]) -> None:
    """Create any manifest of the scenario through the matching API."""
    kind = manifest["kind"]
    api_version = manifest["apiVersion"]
    meta = manifest.get("metadata", {})
    namespace = meta.get("namespace")
    if kind == "Job":
        await client.BatchV1Api(api).create_namespaced_job(namespace, manifest)
    elif kind == "PriorityClass":
        await client.SchedulingV1Api(api).create_priority_class(manifest)
    elif kind == "Node":
        await client.CoreV1Api(api).create_node(manifest)
    else:
        group, version = api_version.split("/")
        plural = {"ElasticQuotaTree": "elasticquotatrees"}.get(kind, kind.lower() + "s")
        custom = client.CustomObjectsApi(api)
        if namespace:
            await custom.create_namespaced_custom_object(
                group, version, namespace, plural, manifest
            )
        else:
            await custom.create_cluster_custom_object(group, version, plural, manifest)


async def apply_tree(api: client.ApiClient, manifest: dict[str, Any]) -> None:
    custom = client.CustomObjectsApi(api)
    meta = manifest["metadata"]
    current = await custom.get_namespaced_custom_object(
        *EQT[:2], meta["namespace"], EQT[2], meta["name"]
    )
    body = dict(manifest)
    body["metadata"] = dict(meta, resourceVersion=current["metadata"]["resourceVersion"])
    await custom.replace_namespaced_custom_object(
        *EQT[:2], meta["namespace"], EQT[2], meta["name"], body
    )


async def finish_job(api: client.ApiClient, key: str) -> None:
    namespace, name = key.split("/")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
        "status": {
            "active": 0,
            "succeeded": 1,
            "completionTime": now,
            "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": now}],
        }
    }
    await client.BatchV1Api(api).patch_namespaced_job_status(name, namespace, status)


def node_manifest(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": raw["name"], "labels": {"usher.io/zone": raw.get("zone", "default")}},
        "status": {"allocatable": dict(raw.get("allocatable", {}))},
    }


async def play(path: Path, api: client.ApiClient, js: JetStreamContext, subjects: Subjects) -> None:
    """Apply the scenario's objects and timeline through the Kubernetes API, group by group."""
    raw = load_raw(path)
    for node in raw.get("nodes") or []:
        await create_object(api, node_manifest(node))
    for manifest in raw.get("objects") or []:
        await create_object(api, manifest)
    await quiesce(js, subjects)
    groups: dict[float, list[dict[str, Any]]] = {}
    for entry in raw.get("timeline") or []:
        groups.setdefault(float(entry["at"]), []).append(entry)
    for _, entries in sorted(groups.items()):
        # Kubernetes stamps creation in whole seconds: a later group must be in a later second
        # so that creation order matches the scenario's.
        await asyncio.sleep(1.0 - (time.time() % 1.0) + 0.01)
        for entry in entries:
            await play_entry(api, entry)
        await quiesce(js, subjects)


async def play_entry(api: client.ApiClient, entry: dict[str, Any]) -> None:
    if "create" in entry:
        manifest = dict(entry["create"])
        meta = dict(manifest.get("metadata", {}))
        if entry.get("name"):
            meta.pop("generateName", None)
            meta["name"] = entry["name"]
        manifest["metadata"] = meta
        await create_object(api, manifest)
    elif "finish" in entry:
        await finish_job(api, entry["finish"])
    elif "delete" in entry:
        namespace, name = entry["delete"].split("/")
        await client.BatchV1Api(api).delete_namespaced_job(name, namespace)
    elif "apply" in entry:
        await apply_tree(api, entry["apply"])
    elif "node" in entry:
        await create_object(api, node_manifest(entry["node"]))
    elif "removeNode" in entry:
        await client.CoreV1Api(api).delete_node(entry["removeNode"]["name"])


# ------------------------------------------------------------------ what the system did


@dataclass
class Outcome:
    jobs: dict[str, str]
    queues: dict[str, list[str]]
    quota: dict[str, dict[str, int]]
    preempted: list[str]


async def outcome(
    api: client.ApiClient,
    js: JetStreamContext,
    subjects: Subjects,
    database_url: str,
    engine_config: EngineConfig,
) -> Outcome:
    """Job states rebuilt from the log, queues from Queue objects, usage from the ledger."""
    projection = Engine(engine_config)
    preempted: set[str] = set()
    for _, _, envelope in await read_log(js, subjects):
        event = envelope.event
        if type(event).__name__ == "Preempted":
            preempted.add(event.workload)
        projection.apply(event, Millis(int(envelope.time.timestamp() * 1000)))
    jobs = {str(k): v.state for k, v in projection.jobs().items()}
    await _check_kubernetes_agrees(api, jobs)
    queue_objects = await client.CustomObjectsApi(api).list_namespaced_custom_object(
        QUEUES[0], QUEUES[1], "kube-queue", QUEUES[2]
    )
    queues: dict[str, list[str]] = {}
    for item in queue_objects["items"]:
        active = ((item.get("status") or {}).get("queueItemDetails") or {}).get("active") or []
        ordered = sorted(active, key=lambda e: e["position"])
        queues[item["metadata"]["name"]] = [f"{e['namespace']}/{e['name']}" for e in ordered]
    engine = create_async_engine(database_url)
    try:
        usage = await LedgerStore(engine, engine_config.oversell_rate).usage()
    finally:
        await engine.dispose()
    quota = {str(path): {r: v for r, v in used.items() if v} for path, used in usage.items()}
    return Outcome(jobs=jobs, queues=queues, quota=quota, preempted=sorted(preempted))


async def _check_kubernetes_agrees(api: client.ApiClient, jobs: dict[str, str]) -> None:
    """An admitted job runs (unsuspended) in the cluster; a pending one is suspended."""
    listed = await client.BatchV1Api(api).list_job_for_all_namespaces()
    for job in listed.items:
        key = f"{job.metadata.namespace}/{job.metadata.name}"
        state = jobs.get(key)
        if state == "Admitted":
            assert job.spec.suspend is False, f"{key} is admitted but still suspended"
        elif state == "Pending":
            assert job.spec.suspend is True, f"{key} is pending but runs"


def expected_quota(used: dict[QuotaPath, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {str(p): {r: v for r, v in u.items() if v} for p, u in used.items()}


def keys(items: list[WorkloadKey]) -> list[str]:
    return [str(i) for i in items]
