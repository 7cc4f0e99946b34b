"""An OOMKilled job retried with more memory, through the whole system (R12, R13).

emulator (its kubelet playing pods) -> watcher -> NATS -> dequeuer -> ledger -> watcher ->
emulator, the services in this process (``harness.InProcessStack``). ``train`` opts in to
retries (``usher.io/retry-limit: "2"``) and asks 4Gi where the emulator's kubelet OOM-kills
below 5Gi: its one pod is OOMKilled, the watcher reports the container's 4Gi with the
termination, the dequeuer of its zone decides ``Retried`` (``train-retry-1`` at 6Gi), the
watcher creates that Job (suspended, linked to ``train``), which is admitted at its new size
and succeeds. The quiet log breaks no invariant and ``usher audit`` of the log and the ledger
exits 0 (every ``Retried`` re-derived from the failed finish before it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from nats.js import JetStreamContext

from schemas import Admitted, Retried, WorkloadFinished
from tests.builders.manifests import one_department_tree, sleeping_job
from tests.conftest import Infra
from tests.e2e.checks import assert_audit_clean, assert_log_invariants
from tests.e2e.harness import (
    create_object,
    events_of,
    in_process_stack,
    kube_api,
    node_manifest,
    quiesce,
)
from usher.adapters.nats.subjects import Subjects
from usher.core.model.config import EngineConfig
from usher.core.rules.retry import RETRY_OF_ANNOTATION
from usher.local.kube_emulator import KubeEmulator
from usher.local.kube_emulator.playbook import OOM_BELOW

NAMESPACE = "user-a"
WITHIN_S = 20.0
GI = 2**30
NODE = node_manifest(
    {"name": "node-1", "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}
)


def train() -> dict[str, Any]:
    """One pod of 1 cpu and 4Gi, OOM-killed by the emulator below 5Gi, with two retries."""
    annotations = {
        "usher.io/retry-limit": "2",
        OOM_BELOW: "5Gi",
        "usher.io/sim-duration": "0.3",
    }
    return sleeping_job("train", NAMESPACE, cpu="1", memory="4Gi", annotations=annotations,
                        spec={"backoffLimit": 0})  # fmt: skip


def tree() -> dict[str, Any]:
    quota = {"cpu": "4", "memory": "16Gi"}
    return one_department_tree(NAMESPACE, root=quota, department=quota)


async def test_an_oom_killed_job_is_retried_with_more_memory_and_succeeds(
    infra: Infra,
    subjects: Subjects,
    js: JetStreamContext,
    migrated_url: str,
    emu: KubeEmulator,
    tmp_path: Path,
) -> None:
    retry = f"{NAMESPACE}/train-retry-1"
    async with in_process_stack(infra.nats_url, migrated_url, subjects, emu) as stack:
        async with kube_api(emu) as api:
            await create_object(api, NODE)
            await create_object(api, tree())
            await create_object(api, train())

            async def retry_succeeded() -> WorkloadFinished | None:
                found = await events_of(js, subjects, WorkloadFinished)
                return next((e for e in found if e.workload == retry and e.succeeded), None)

            await stack.until(retry_succeeded, "a successful retry", within_s=WITHIN_S)

            async def told() -> dict[tuple[str, str], str] | None:
                listed = await client.CoreV1Api(api).list_namespaced_event(NAMESPACE)
                seen = {(e.involved_object.name, e.reason): e.message for e in listed.items}
                wanted = {
                    ("train", "Admitted"),
                    ("train", "Retried"),
                    ("train-retry-1", "Admitted"),
                }
                return seen if wanted <= seen.keys() else None

            said = await stack.until(told, "the jobs' Events", within_s=WITHIN_S)
            assert said[("train", "Retried")].startswith(
                f"Attempt 1 OOMKilled: retried as {retry} (1 of 2 retries): "
            )
            assert "main/main memory 4Gi -> 6Gi" in said[("train", "Retried")]
            assert said[("train-retry-1", "Admitted")].startswith(
                "Admitted by Usher into root/Department-a (queue "
            )
            created = await client.BatchV1Api(api).read_namespaced_job("train-retry-1", NAMESPACE)
            assert created.metadata.annotations[RETRY_OF_ANNOTATION] == f"{NAMESPACE}/train"
            [main] = created.spec.template.spec.containers
            assert main.resources.requests["memory"] == "6144Mi"
            await quiesce(js, subjects)
        assert stack.failures() == []
    [failed] = [
        e for e in await events_of(js, subjects, WorkloadFinished) if e.workload.endswith("/train")
    ]
    assert failed.succeeded is False
    assert [(t.reason, t.memory_request) for t in failed.terminations] == [("OOMKilled", 4 * GI)]
    [decision] = await events_of(js, subjects, Retried)
    assert (decision.workload, decision.job, decision.cause) == (
        f"{NAMESPACE}/train",
        retry,
        "OOMKilled",
    )
    assert [(r.request, r.new_request) for r in decision.resized] == [(4 * GI, 6 * GI)]
    # The ledger admitted the retry at its new size.
    [admitted] = [a for a in await events_of(js, subjects, Admitted) if a.workload == retry]
    assert admitted.requests["memory"] == 6 * GI
    await assert_log_invariants(js, subjects, EngineConfig())
    env = {"USHER_NATS_URL": infra.nats_url, "USHER_HOME": str(tmp_path / "home")}
    await assert_audit_clean(env, subjects.prefix, migrated_url)
