"""Carrying out decisions from the watch's last object (no GET first), against the emulator.

* ``LastSeen``: bounded, oldest out first, one kind's object never answers for another's,
  managedFields left out (table-driven, and a hypothesis property over hostile sequences).
* A decision patches the copy the watch left, with no GET; when someone else changed the job
  meanwhile (the copy is behind: 409 Conflict on its resourceVersion), the copy is dropped,
  the server's copy read and the patch made from it: the decision is carried out, and the
  other change is kept.
* The running watcher carries out an admission and tells it (its Event) without reading the
  job at all: 0 GETs per admission (two before: one before the patch, one for the Event).
* A copy that says "nothing to do" is never the last word: a job suspended by someone else
  after its admission was carried out is unsuspended again by a later admission, a job whose
  copy says it finished is read again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.js import JetStreamContext

from schemas import WorkloadKey, WorkloadObserved
from services.common.runtime import ServiceContext
from services.common.settings import ServiceSettings
from services.watcher.carry_out import DecisionRunner
from services.watcher.kinds import EVENTS, JOB_FAMILIES
from services.watcher.objects import LastSeen
from services.watcher.observe import ClusterView
from services.watcher.options import WatcherOptions
from services.watcher.projection import WatcherProjection
from tests.builders import events
from tests.builders.manifests import batch_job, container, pod_template
from tests.conftest import Infra
from tests.services.test_watcher import FAST, Harness
from usher.adapters.kube import JsonObj, KubeClient, Resource
from usher.adapters.logs import get_logger
from usher.adapters.nats.subjects import Subjects
from usher.core.engine.facade import Engine
from usher.local.kube_emulator import KubeEmulator

JOBS = next(f for f in JOB_FAMILIES if f.kind == "Job").candidates[0]
TFJOBS = next(f for f in JOB_FAMILIES if f.kind == "TFJob").candidates[0]
KEY = WorkloadKey("user-a/pi")


def obj(name: str, version: str, **metadata: Any) -> JsonObj:
    return {"metadata": {"name": name, "resourceVersion": version, **metadata}, "spec": {}}


# --------------------------------------------------------------------------- LastSeen


def test_the_oldest_stored_object_leaves_first_past_capacity() -> None:
    seen = LastSeen(capacity=2)
    seen.put(WorkloadKey("a/1"), JOBS, obj("1", "1"))
    seen.put(WorkloadKey("a/2"), JOBS, obj("2", "2"))
    seen.put(WorkloadKey("a/1"), JOBS, obj("1", "3"))  # stored again: the newest now
    seen.put(WorkloadKey("a/3"), JOBS, obj("3", "4"))
    assert seen.get(WorkloadKey("a/2"), JOBS) is None
    assert seen.get(WorkloadKey("a/1"), JOBS) == obj("1", "3")
    assert seen.get(WorkloadKey("a/3"), JOBS) == obj("3", "4")
    assert len(seen) == 2


@pytest.mark.parametrize(
    ("stored", "asked", "found"),
    [
        (JOBS, JOBS, True),
        (JOBS, TFJOBS, False),  # another kind of the same name: read it, never patch this one
        (TFJOBS, TFJOBS, True),
    ],
)
def test_an_object_answers_only_for_its_own_kind(
    stored: Resource, asked: Resource, found: bool
) -> None:
    seen = LastSeen()
    seen.put(KEY, stored, obj("pi", "7"))
    assert (seen.get(KEY, asked) is not None) is found


def test_managed_fields_are_not_kept_and_dropped_objects_are_gone() -> None:
    seen = LastSeen()
    seen.put(KEY, JOBS, obj("pi", "7", managedFields=[{"manager": "kubectl"}], uid="u"))
    assert seen.get(KEY, JOBS) == obj("pi", "7", uid="u")
    seen.drop(KEY)
    seen.drop(KEY)  # twice: nothing to forget is fine
    assert seen.get(KEY, JOBS) is None and len(seen) == 0


def test_capacity_zero_keeps_nothing_and_a_negative_one_is_refused() -> None:
    seen = LastSeen(capacity=0)
    seen.put(KEY, JOBS, obj("pi", "1"))
    assert seen.get(KEY, JOBS) is None
    with pytest.raises(ValueError, match="capacity"):
        LastSeen(capacity=-1)


OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["put", "drop"]), st.integers(0, 12), st.integers(0, 99)),
    max_size=200,
)


@given(capacity=st.integers(0, 6), operations=OPERATIONS)
def test_last_seen_is_bounded_and_answers_with_the_last_put(
    capacity: int, operations: list[tuple[str, int, int]]
) -> None:
    """Whatever the sequence: never more than ``capacity`` objects; what it answers is the
    last object put for that key and not dropped since, unless ``capacity`` newer keys came."""
    seen = LastSeen(capacity)
    last: dict[WorkloadKey, JsonObj] = {}
    order: list[WorkloadKey] = []
    for operation, n, version in operations:
        key = WorkloadKey(f"ns/{n}")
        if operation == "put":
            last[key] = obj(str(n), str(version))
            seen.put(key, JOBS, last[key])
            order = ([k for k in order if k != key] + [key])[-capacity:] if capacity else []
        else:
            last.pop(key, None)
            seen.drop(key)
            order = [k for k in order if k != key]
        assert len(seen) <= capacity
    for key in {WorkloadKey(f"ns/{n}") for n in range(13)}:
        assert seen.get(key, JOBS) == (last[key] if key in order else None)


# --------------------------------------------------------------------------- carrying out


class CountingKube(KubeClient):
    """The real client, counting the GETs it sends."""

    gets = 0

    async def get(self, resource: Resource, namespace: str | None, name: str) -> JsonObj:
        self.gets += 1
        return await super().get(resource, namespace, name)


@pytest.fixture
async def emu(tmp_path: Path) -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator(kubeconfig_path=tmp_path / "kubeconfig") as emulator:
        yield emulator


@pytest.fixture
async def kube(emu: KubeEmulator) -> AsyncIterator[CountingKube]:
    async with await CountingKube.from_kubeconfig(emu.kubeconfig_path) as client:
        yield client


@pytest.fixture
def runner(
    infra: Infra, nc: Client, js: JetStreamContext, subjects: Subjects, kube: CountingKube
) -> DecisionRunner:
    """The watcher's decision runner alone: the test plays its observers (the copies)."""
    settings = ServiceSettings(nats_url=infra.nats_url, prefix=subjects.prefix)
    log = get_logger(service="watcher", test=subjects.prefix)
    ctx = ServiceContext("watcher", settings, nc, js, subjects, asyncio.Event(), log)
    view = WatcherProjection.empty(Engine(settings.engine), subjects)
    cluster = ClusterView()
    cluster.workloads[KEY] = JOBS
    return DecisionRunner(ctx, kube, view, cluster, WatcherOptions())


def job() -> JsonObj:
    template = pod_template(container(cpu="1"))
    labels = {"usher.io/zone": "zone-a"}
    return batch_job("pi", "user-a", template=template, suspend=True, labels=labels)


def admitted(zone: str = "zone-a") -> Any:
    return events.admitted(KEY, 1, quota="root/a", queue="q", zone=zone)


async def read(kube: KubeClient) -> JsonObj:
    return await KubeClient.get(kube, JOBS, "user-a", "pi")


def zone_of(job: JsonObj) -> object:
    return job["spec"]["template"]["spec"].get("nodeSelector", {}).get("usher.io/zone")


async def test_an_admission_patches_the_watched_copy_without_a_get(
    runner: DecisionRunner, kube: CountingKube
) -> None:
    created = await kube.create(JOBS, "user-a", job())
    runner.cluster.objects.put(KEY, JOBS, created)  # what the watch showed
    assert await runner.carry_out(admitted(), seq=1) == "patched"
    assert kube.gets == 0
    now = await read(kube)
    assert (now["spec"]["suspend"], zone_of(now)) == (False, "zone-a")
    kept = runner.cluster.objects.get(KEY, JOBS)
    assert kept is not None  # the server's answer to the patch: the next one needs no GET
    assert kept["metadata"]["resourceVersion"] == now["metadata"]["resourceVersion"]


async def test_a_copy_behind_someone_elses_change_is_read_again_and_nothing_is_lost(
    runner: DecisionRunner, kube: CountingKube
) -> None:
    created = await kube.create(JOBS, "user-a", job())
    runner.cluster.objects.put(KEY, JOBS, created)
    # Someone else changes the job before the watch tells the watcher: the copy is behind.
    await kube.merge_patch(JOBS, "user-a", "pi", {"metadata": {"labels": {"team": "x"}}})
    assert await runner.carry_out(admitted(), seq=1) == "patched"
    assert kube.gets == 1  # the 409 on the copy's resourceVersion, then the server's copy
    now = await read(kube)
    assert (now["spec"]["suspend"], zone_of(now)) == (False, "zone-a")
    assert now["metadata"]["labels"]["team"] == "x"  # their change is kept
    kept = runner.cluster.objects.get(KEY, JOBS)
    assert kept is not None
    assert kept["metadata"]["resourceVersion"] == now["metadata"]["resourceVersion"]


async def test_a_copy_that_says_nothing_to_do_is_checked_with_the_server(
    runner: DecisionRunner, kube: CountingKube
) -> None:
    await kube.create(JOBS, "user-a", job())
    runner.cluster.objects.put(KEY, JOBS, await read(kube))
    assert await runner.carry_out(admitted(), seq=1) == "patched"
    # Suspended again by someone else; the copy (the patch's answer) still says it runs.
    await kube.merge_patch(JOBS, "user-a", "pi", {"spec": {"suspend": True}})
    gets = kube.gets
    assert await runner.carry_out(admitted(), seq=3) == "patched"
    assert kube.gets == gets + 1
    assert (await read(kube))["spec"]["suspend"] is False


async def test_a_copy_that_says_finished_is_checked_with_the_server(
    runner: DecisionRunner, kube: CountingKube
) -> None:
    created = await kube.create(JOBS, "user-a", job())
    finished = {
        **created,
        "status": {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1},
    }
    runner.cluster.objects.put(KEY, JOBS, finished)  # a copy the server never held
    assert await runner.carry_out(admitted(), seq=1) == "patched"
    assert kube.gets == 1
    assert (await read(kube))["spec"]["suspend"] is False


async def test_a_decision_for_a_job_deleted_behind_its_copy_is_gone_and_forgotten(
    runner: DecisionRunner, kube: CountingKube
) -> None:
    created = await kube.create(JOBS, "user-a", job())
    runner.cluster.objects.put(KEY, JOBS, created)
    await kube.delete(JOBS, "user-a", "pi")
    assert await runner.carry_out(admitted(), seq=1) == "gone"
    assert runner.cluster.objects.get(KEY, JOBS) is None


async def test_the_running_watcher_admits_and_tells_without_reading_the_job(
    tmp_path: Path, infra: Infra, nc: Client, js: JetStreamContext, subjects: Subjects
) -> None:
    reads: list[str] = []

    @web.middleware
    async def count_reads(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == "GET" and request.path.endswith("/jobs/pi"):
            reads.append(request.path)
        response: web.StreamResponse = await handler(request)
        return response

    emulator = KubeEmulator(kubeconfig_path=tmp_path / "kubeconfig")
    emulator.app.middlewares.append(count_reads)
    async with emulator, await KubeClient.from_kubeconfig(emulator.kubeconfig_path) as kube:
        h = Harness(infra, nc, js, subjects, emulator, kube)
        await kube.create(JOBS, "user-a", job())
        async with h.watcher(FAST):
            await h.logged(WorkloadObserved, lambda e: e.name == "pi")
            await h.decide(admitted(), "zone-a")
            await h.logged(WorkloadObserved, lambda e: e.name == "pi" and not e.suspended)

            async def told() -> bool:
                recorded = await kube.list(EVENTS, namespace="user-a")
                return any(e.get("reason") == "Admitted" for e in recorded.items)

            await h.eventually(told)
    assert reads == []
