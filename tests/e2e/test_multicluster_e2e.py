"""Two clusters under one queue, one of them killed and restored mid-run (M1, issue 36).

The borrowing load of ``test_borrowing_load`` (the demo tree, bursts of mixed jobs) split
over two clusters: the default one (zones ``a``, ``b``, ``default``: the e2e emulator) and
``c2`` (zone ``c2``: the on-disk cluster of ``usher up``, which keeps its objects across a
restart), each with its own watcher, all on one log, one ledger, one dequeuer per zone.
Midway, cluster ``c2``'s API server is SIGKILLed right after it acknowledged three creates
(it keeps every write it acknowledged, as a real one does: the emulator journals each before
answering); once its watcher has said so on the log (``ClusterDisconnected``) the watcher is
SIGKILLed too; both come back a few seconds later.

The run must end with every job of both clusters complete, the invariant checker clean at
every log entry, the ledger's history within ``max`` at every instant and drained, and
``usher audit`` exiting 0; and while ``c2`` was disconnected nothing was admitted into it.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections.abc import AsyncIterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from nats.js import JetStreamContext

from schemas import Admitted, ClusterConnected, ClusterDisconnected, WorkloadObserved
from tests.builders.manifests import batch_job, container, pod_template
from tests.conftest import Infra
from tests.e2e.checks import (
    assert_audit_clean,
    assert_log_invariants,
    history_violations,
    story_checks,
)
from tests.e2e.harness import quiesce, read_log
from tests.e2e.procs import ServiceProcesses, start_emulator
from tests.e2e.test_borrowing_load import (
    NAMESPACES,
    PRIORITIES,
    _api,
    _ledger_is_drained,
    _setup,
    _wait_all_finished,
    walkthrough_tree,
)
from usher.adapters.nats.subjects import Subjects
from usher.core.model.config import EngineConfig
from usher.local.processes import ManagedProcess

OTHER = "c2"
CLUSTERS = f"default=default,a,b;{OTHER}={OTHER}"
ZONES = ("a", "b", "default", OTHER)
COUNT = 200


def _job(index: int, rng: random.Random) -> tuple[dict[str, Any], str, str]:
    """A job of a random size, priority and zone; its cluster and key on the log."""
    namespace = NAMESPACES[rng.randrange(len(NAMESPACES))]
    name = f"mc-{index:04d}"
    zone = ZONES[rng.randrange(len(ZONES))]
    labels = {} if zone == "default" else {"usher.io/zone": zone}
    pods = rng.randint(1, 3)
    manifest = batch_job(
        name,
        namespace,
        template=pod_template(
            container("w", cpu=str(rng.randint(1, 10))),
            priority_class=rng.choice(sorted(PRIORITIES)),
        ),
        parallelism=pods,
        completions=pods,
        labels=labels,
        annotations={"usher.io/sim-duration": f"{rng.uniform(0.2, 1.2):.2f}"},
    )
    if zone == OTHER:
        return manifest, OTHER, f"{namespace}/{name}@{OTHER}"
    return manifest, "default", f"{namespace}/{name}"


def _start_other(tmp_path: Path, run: int) -> ManagedProcess:
    """Cluster ``c2``: the on-disk cluster (objects kept in its state file across kills)."""
    folder = tmp_path / OTHER
    kubeconfig = folder / "kubeconfig"
    kubeconfig.unlink(missing_ok=True)
    proc = ManagedProcess(
        f"emulator-{OTHER}",
        [sys.executable, "-m", "usher.local.cluster", "--kubeconfig", str(kubeconfig),
         "--state", str(folder / "objects.json"), "--zones", OTHER],
        tmp_path / f"emulator-{OTHER}.{run}.log",
    )  # fmt: skip
    proc.start()
    deadline = time.monotonic() + 30
    while not kubeconfig.exists():
        if time.monotonic() > deadline or not proc.running():
            raise RuntimeError(f"cluster {OTHER} did not start: {proc.log_tail()}")
        time.sleep(0.05)
    return proc


class Clusters:
    """Both clusters' API clients, and cluster ``c2``'s emulator, which the run kills."""

    def __init__(self, tmp_path: Path, default_api: client.ApiClient) -> None:
        self.tmp_path = tmp_path
        self.apis: dict[str, client.ApiClient] = {"default": default_api}
        self.other: ManagedProcess | None = None
        self.runs = 0

    async def start_other(self) -> None:
        self.runs += 1
        self.other = _start_other(self.tmp_path, self.runs)
        old = self.apis.pop(OTHER, None)
        if old is not None:
            await old.close()
        self.apis[OTHER] = await _api(self.tmp_path / OTHER / "kubeconfig")

    def kill_other(self) -> None:
        """Cluster c2's API server dies at once (SIGKILL: no handler, no last save); like a
        real API server it loses no write it acknowledged (the emulator's journal), so an
        admission carried out the moment before is still there when it comes back."""
        assert self.other is not None and self.other.popen is not None
        self.other.popen.kill()
        self.other.popen.wait(timeout=10)

    async def close(self) -> None:
        for api in self.apis.values():
            await api.close()
        if self.other is not None:
            self.other.stop()


@pytest.fixture
async def two_clusters(
    infra: Infra, subjects: Subjects, js: JetStreamContext, migrated_url: str, tmp_path: Path
) -> AsyncIterator[tuple[ServiceProcesses, Clusters]]:
    kubeconfig = tmp_path / "kubeconfig"
    emulator = start_emulator(kubeconfig, tmp_path / "emulator.log")
    clusters = Clusters(tmp_path, await _api(kubeconfig))
    await clusters.start_other()
    procs = ServiceProcesses(
        env={
            "USHER_NATS_URL": infra.nats_url,
            "USHER_DATABASE_URL": migrated_url,
            "KUBECONFIG": str(kubeconfig),
            "USHER_PREFIX": subjects.prefix,
            "USHER_HOME": str(tmp_path / "home"),
            "USHER_SETTLE_MS": "20",
            "USHER_CLUSTERS": CLUSTERS,
        },
        logs=tmp_path / "logs",
        zones=ZONES,
        watchers=("watcher", f"watcher-{OTHER}"),
        per_service={
            "watcher": {"USHER_CLUSTER": "default"},
            f"watcher-{OTHER}": {
                "USHER_CLUSTER": OTHER,
                "KUBECONFIG": str(tmp_path / OTHER / "kubeconfig"),
            },
        },
    )
    procs.start_all()
    try:
        yield procs, clusters
    finally:
        procs.stop_all()
        await clusters.close()
        emulator.stop()


async def _submit(clusters: Clusters, count: int, seed: int, paused: asyncio.Event) -> set[str]:
    """``count`` jobs in bursts, each created in its zone's cluster; none while ``paused``
    is clear (cluster ``c2`` is down: a create there would fail)."""
    rng = random.Random(seed)
    made: set[str] = set()
    index = 0
    while index < count:
        await paused.wait()
        burst = min(count - index, rng.choice((5, 10, 20)))
        jobs = [_job(index + n, rng) for n in range(burst)]
        await asyncio.gather(
            *(
                client.BatchV1Api(clusters.apis[cluster]).create_namespaced_job(
                    manifest["metadata"]["namespace"], manifest
                )
                for manifest, cluster, _ in jobs
            )
        )
        made |= {key for _, _, key in jobs}
        index += burst
        await asyncio.sleep(burst / 20)
    return made


async def _saw(
    js: JetStreamContext, subjects: Subjects, kind: type, timeout_s: float, cluster: str = OTHER
) -> None:
    """Wait until the last word of the log about ``cluster`` is a ``kind``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        entries = await read_log(js, subjects)
        said = (ClusterConnected, ClusterDisconnected)
        last = [
            e for _, _, e in entries if isinstance(e.event, said) and e.event.cluster == cluster
        ]
        if last and isinstance(last[-1].event, kind):
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"no {kind.__name__} of cluster {cluster} on the log")


def _big(index: int) -> dict[str, Any]:
    """A 60-cpu job of cluster c2: with the load running, it waits for room (at most one of
    them fits under the root's 100 cpu at a time)."""
    return batch_job(
        f"big-{index}",
        NAMESPACES[index % len(NAMESPACES)],
        template=pod_template(container("w", cpu="60")),
        labels={"usher.io/zone": OTHER},
        annotations={"usher.io/sim-duration": "0.5"},
    )


async def _kill_and_restore(
    procs: ServiceProcesses,
    clusters: Clusters,
    js: JetStreamContext,
    subjects: Subjects,
    paused: asyncio.Event,
) -> set[str]:
    """Midway: three big jobs are created in cluster c2 (some wait through what follows),
    then its API server is SIGKILLed at once, its watcher says so, the watcher dies too; a
    few seconds later both come back (the objects from the cluster's state file and
    journal). The big jobs' keys."""
    await asyncio.sleep(4.0)
    paused.clear()
    await asyncio.sleep(0.5)  # a burst of _submit under way has been answered
    big = [_big(index) for index in range(3)]
    batch = client.BatchV1Api(clusters.apis[OTHER])
    for manifest in big:
        await batch.create_namespaced_job(manifest["metadata"]["namespace"], manifest)
    clusters.kill_other()  # right after it acknowledged them: they are kept
    await _saw(js, subjects, ClusterDisconnected, timeout_s=30)
    procs.kill(f"watcher-{OTHER}")
    await asyncio.sleep(6.0)  # disconnected: nothing is admitted into c2 meanwhile
    await clusters.start_other()
    procs.start(f"watcher-{OTHER}")
    await _saw(js, subjects, ClusterConnected, timeout_s=60)
    paused.set()
    return {f"{m['metadata']['namespace']}/{m['metadata']['name']}@{OTHER}" for m in big}


async def _finished(clusters: Clusters) -> set[str]:
    done: set[str] = set()
    for cluster, api in clusters.apis.items():
        jobs = await client.BatchV1Api(api).list_job_for_all_namespaces()
        suffix = "" if cluster == "default" else f"@{cluster}"
        done |= {
            f"{j.metadata.namespace}/{j.metadata.name}{suffix}"
            for j in jobs.items
            if any(
                c.type in ("Complete", "Failed") and c.status == "True"
                for c in j.status.conditions or []
            )
        }
    return done


def _outage(entries: list[tuple[int, str, Any]]) -> tuple[list[str], list[str]]:
    """Admissions into zone c2 logged while c2's last word was ``ClusterDisconnected``, and
    those after it connected again of workloads observed before it disconnected (they
    waited through the outage)."""
    disconnected, outages = False, 0
    seen_before: set[str] = set()
    wrong: list[str] = []
    waited: list[str] = []
    for _, _, envelope in entries:
        event = envelope.event
        if isinstance(event, ClusterConnected | ClusterDisconnected) and event.cluster == OTHER:
            disconnected = isinstance(event, ClusterDisconnected)
            outages += disconnected
        elif isinstance(event, WorkloadObserved) and not outages:
            seen_before.add(event.workload)
        elif isinstance(event, Admitted) and event.zone == OTHER:
            if disconnected:
                wrong.append(event.workload)
            elif outages and event.workload in seen_before:
                waited.append(event.workload)
    return wrong, waited


async def test_borrowing_load_over_two_clusters_with_one_killed_and_restored_ends_clean(
    two_clusters: tuple[ServiceProcesses, Clusters],
    subjects: Subjects,
    js: JetStreamContext,
    migrated_url: str,
) -> None:
    procs, clusters = two_clusters
    await _setup(clusters.apis["default"], walkthrough_tree())
    for cluster in ("default", OTHER):  # each watcher has listed its cluster
        await _saw(js, subjects, ClusterConnected, timeout_s=120, cluster=cluster)
    paused = asyncio.Event()
    paused.set()
    submitted, big = await asyncio.gather(
        _submit(clusters, COUNT, 20261128, paused),
        _kill_and_restore(procs, clusters, js, subjects, paused),
    )
    jobs = submitted | big
    assert any(key.endswith(f"@{OTHER}") for key in jobs)
    await _wait_all_finished(lambda: _finished(clusters), jobs, procs, timeout_s=300)
    await quiesce(js, subjects, quiet_s=1.5, timeout_s=60)
    entries = await read_log(js, subjects)
    assert story_checks(entries, jobs) > 0, "no reclaim happened: this run proves nothing"
    wrong, waited = _outage(entries)
    assert wrong == [], "admitted into cluster c2 while it was disconnected"
    assert waited, "no job of c2 waited through its outage: the run proves nothing about it"
    # At every log entry: running usage within max, nobody admitted while live, every
    # Preempted justified; at the end nobody pending with a reason saying it fits now.
    await assert_log_invariants(js, subjects, EngineConfig())
    assert await history_violations(migrated_url, Fraction(1)) == []
    assert await _ledger_is_drained(migrated_url) == (0, 0)
    await assert_audit_clean(procs.env, subjects.prefix, migrated_url)
