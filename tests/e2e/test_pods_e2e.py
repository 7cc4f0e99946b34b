"""Pods through the whole system: an OOM kill on the log, and a minSuccess that frees quota early.

emulator (its kubelet playing pods) -> watcher -> NATS -> dequeuer / preemptor -> ledger ->
watcher -> emulator, all four services in this process (``harness.InProcessStack``).
Department-a has room for exactly one 3-pod job. ``oom`` (one pod asking 4Gi where the
emulator kills below 6Gi) finishes failed, and its ``WorkloadFinished`` says ``OOMKilled``
(exit code 137). ``quorum`` declares ``usher.io/min-success: "2"``; its third pod would run a
minute, yet once two pods succeeded it is finished, its quota released (``waiting``, queued
behind it for the same room, is admitted) and its last pod stopped, well before that minute.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from nats.js import JetStreamContext

from schemas import Admitted, WorkloadFinished, WorkloadProgress
from tests.builders.manifests import batch_job, container, elastic_quota_tree, pod_template
from tests.conftest import Infra
from tests.e2e.checks import assert_log_invariants
from tests.e2e.harness import InProcessStack, create_object, kube_api, read_log
from tests.services.helpers import eventually
from usher.adapters.nats.subjects import Subjects
from usher.core.config import EngineConfig
from usher.local.kube_emulator import KubeEmulator

NAMESPACE = "user-a"
WITHIN_S = 12.0


@pytest.fixture
async def emu(tmp_path: Path) -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator(kubeconfig_path=tmp_path / "kubeconfig", kubelet=True) as emulator:
        yield emulator


def job(name: str, pods: int, annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    """A suspended Job of ``pods`` pods of 1 cpu and 4Gi each."""
    main = container(cpu="1", memory="4Gi", command=["sleep", "1d"])
    return batch_job(name, NAMESPACE, template=pod_template(main), parallelism=pods,
                     completions=pods, annotations=annotations, spec=spec or None)  # fmt: skip


def tree() -> dict[str, Any]:
    """Department-a (``user-a``): 3 cpu, no more, no borrowing; a ready timeout long enough
    never to requeue, so pod progress is on the log (R10)."""
    quota = {"min": {"cpu": "3", "memory": "64Gi"}, "max": {"cpu": "3", "memory": "64Gi"}}
    timeout = {"usher.io/ready-timeout-seconds": "3600"}
    leaf = {"name": "Department-a", **quota, "namespaces": [NAMESPACE], "attributes": timeout}
    return elastic_quota_tree({"name": "root", **quota, "children": [leaf]})


NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "node-1", "labels": {"usher.io/zone": "default"}},
    "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
}


async def events_of(js: JetStreamContext, subjects: Subjects, kind: type[Any]) -> list[Any]:
    return [envelope.event for _, _, envelope in await read_log(js, subjects)
            if isinstance(envelope.event, kind)]  # fmt: skip


async def test_an_oom_kill_is_on_the_log_and_min_success_frees_quota_before_slow_pods_end(
    infra: Infra, subjects: Subjects, js: JetStreamContext, migrated_url: str, emu: KubeEmulator
) -> None:
    stack = InProcessStack(
        nats_url=infra.nats_url,
        database_url=migrated_url,
        subjects=subjects,
        kubeconfig=emu.kubeconfig_path,
        engine=EngineConfig(),
    )
    await stack.start()
    try:
        async with kube_api(emu) as api:
            await create_object(api, NODE)
            await create_object(api, tree())
            oom = {"emulator.usher.io/oom-below-memory": "6Gi", "usher.io/sim-duration": "0.2"}
            await create_object(api, job("oom", 1, oom, backoffLimit=0))

            async def finished(name: str) -> WorkloadFinished | None:
                found = await events_of(js, subjects, WorkloadFinished)
                return next((e for e in found if e.workload == f"{NAMESPACE}/{name}"), None)

            failed = await eventually(lambda: finished("oom"), timeout_s=WITHIN_S)
            assert failed is not None and failed.succeeded is False
            assert [(t.reason, t.exit_code) for t in failed.terminations] == [("OOMKilled", 137)]

            quorum = {
                "usher.io/min-success": "2",
                "emulator.usher.io/pod-durations-seconds": "0.3,0.6,60",
            }
            started = time.monotonic()
            await create_object(api, job("quorum", 3, quorum))
            await create_object(api, job("waiting", 3, {}))

            async def waiting_admitted() -> bool:
                admitted = await events_of(js, subjects, Admitted)
                return any(a.workload == f"{NAMESPACE}/waiting" for a in admitted)

            assert await eventually(waiting_admitted, timeout_s=WITHIN_S), "quota never freed"
            assert time.monotonic() - started < 30  # the slow pod would have run 60 s
            done = await finished("quorum")
            assert done is not None and (done.succeeded, done.min_success) == (True, 2)
            progress = [
                p
                for p in await events_of(js, subjects, WorkloadProgress)
                if p.workload == f"{NAMESPACE}/quorum"
            ]
            assert progress and progress[0].total == 3

            async def last_pod_stopped() -> bool:
                quorum_job = await client.BatchV1Api(api).read_namespaced_job("quorum", NAMESPACE)
                return bool(quorum_job.spec.suspend) and not quorum_job.status.active

            assert await eventually(last_pod_stopped, timeout_s=WITHIN_S)
        assert stack.failures() == []
    finally:
        await stack.stop()
    await assert_log_invariants(js, subjects, EngineConfig())
