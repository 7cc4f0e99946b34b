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
from typing import Any

from kubernetes_asyncio import client
from nats.js import JetStreamContext

from schemas import Admitted, WorkloadFinished, WorkloadProgress
from tests.builders.manifests import one_department_tree, sleeping_job
from tests.conftest import Infra
from tests.e2e.checks import assert_log_invariants
from tests.e2e.harness import (
    create_object,
    events_of,
    in_process_stack,
    kube_api,
    node_manifest,
)
from usher.adapters.nats.subjects import Subjects
from usher.core.model.config import EngineConfig
from usher.local.kube_emulator import KubeEmulator

NAMESPACE = "user-a"
WITHIN_S = 12.0
NODE = node_manifest(
    {"name": "node-1", "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}
)


def job(name: str, pods: int, annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    """A suspended Job of ``pods`` pods of 1 cpu and 4Gi each."""
    return sleeping_job(name, NAMESPACE, cpu="1", memory="4Gi", pods=pods,
                        annotations=annotations, spec=spec or None)  # fmt: skip


def tree() -> dict[str, Any]:
    """Department-a (``user-a``): 3 cpu, no more, no borrowing; a ready timeout long enough
    never to requeue, so pod progress is on the log (R10)."""
    quota = {"cpu": "3", "memory": "64Gi"}
    timeout = {"usher.io/ready-timeout-seconds": "3600"}
    return one_department_tree(NAMESPACE, root=quota, department=quota, attributes=timeout)


async def test_an_oom_kill_is_on_the_log_and_min_success_frees_quota_before_slow_pods_end(
    infra: Infra, subjects: Subjects, js: JetStreamContext, migrated_url: str, emu: KubeEmulator
) -> None:
    async with in_process_stack(infra.nats_url, migrated_url, subjects, emu) as stack:
        async with kube_api(emu) as api:
            await create_object(api, NODE)
            await create_object(api, tree())
            oom = {"emulator.usher.io/oom-below-memory": "6Gi", "usher.io/sim-duration": "0.2"}
            await create_object(api, job("oom", 1, oom, backoffLimit=0))

            async def finished(name: str) -> WorkloadFinished | None:
                found = await events_of(js, subjects, WorkloadFinished)
                return next((e for e in found if e.workload == f"{NAMESPACE}/{name}"), None)

            failed = await stack.until(lambda: finished("oom"), "oom finished", within_s=WITHIN_S)
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

            await stack.until(waiting_admitted, "quota freed", within_s=WITHIN_S)
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

            await stack.until(last_pod_stopped, "the last pod stopped", within_s=WITHIN_S)
        assert stack.failures() == []
    await assert_log_invariants(js, subjects, EngineConfig())
