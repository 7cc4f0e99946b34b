"""A job that grows after its admission, through the whole system with no webhook in the way
(docs/admission-rules.md R16).

emulator -> watcher -> NATS -> dequeuer -> ledger -> watcher -> emulator, the services in this
process (``harness.InProcessStack``), no admission webhook (as in a cluster that runs none).
Department-a has 100 cpu; ``grower`` (10 cpu) and ``other`` (50 cpu) are admitted and run.
``grower``'s container is then patched from 10 to 95 cpu: its dequeuer stops it through the
ledger (a ``Preempted`` of which it is its own preemptor, reason ``GrewAfterAdmission``), the
watcher suspends it, the ledger counts its 10 cpu until it is seen stopped, then releases
them; at 95 cpu it does not fit beside ``other`` and waits. The log never over-commits (the
invariants, and the audit of the log and the ledger, agree), and nothing ever counted 95.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from nats.js import JetStreamContext

from schemas import Admitted, Preempted, Released
from tests.builders.manifests import one_department_tree, sleeping_job
from tests.conftest import Infra
from tests.e2e.checks import assert_audit_clean, assert_log_invariants
from tests.e2e.harness import (
    create_object,
    decisions,
    events_of,
    in_process_stack,
    kube_api,
    quiesce,
)
from usher.adapters.nats.subjects import Subjects
from usher.core.model.config import EngineConfig
from usher.local.kube_emulator import KubeEmulator

NAMESPACE = "user-a"
DECISIONS = (Admitted, Preempted, Released)
CPU = "/spec/template/spec/containers/0/resources/requests/cpu"


def quota_tree() -> dict[str, Any]:
    return one_department_tree(
        NAMESPACE,
        root={"cpu": "100", "memory": "100Gi"},
        department={"cpu": "100", "memory": "100Gi"},
    )


async def test_a_job_grown_after_admission_is_stopped_and_waits_at_its_new_size(
    infra: Infra,
    subjects: Subjects,
    js: JetStreamContext,
    migrated_url: str,
    emu: KubeEmulator,
    tmp_path: Path,
) -> None:
    async def on_log(wanted: tuple[str, str]) -> bool:
        return wanted in await decisions(js, subjects, DECISIONS)

    async with in_process_stack(infra.nats_url, migrated_url, subjects, emu) as stack:
        async with kube_api(emu) as api:
            await create_object(api, quota_tree())
            batch = client.BatchV1Api(api)
            await create_object(api, sleeping_job("grower", NAMESPACE, cpu="10", memory="1Gi"))
            await create_object(api, sleeping_job("other", NAMESPACE, cpu="50", memory="1Gi"))
            both = [("Admitted", f"{NAMESPACE}/grower"), ("Admitted", f"{NAMESPACE}/other")]

            async def both_admitted() -> bool:
                found = await decisions(js, subjects, DECISIONS)
                return all(wanted in found for wanted in both)

            await stack.until(both_admitted, "grower and other admitted", within_s=15.0)

            async def running() -> bool:
                job = await batch.read_namespaced_job("grower", NAMESPACE)
                return job.spec.suspend is False and bool(job.status.active)

            await stack.until(running, "grower running", within_s=15.0)
            await batch.patch_namespaced_job(
                "grower", NAMESPACE, [{"op": "replace", "path": CPU, "value": "95"}]
            )
            released = ("Released", f"{NAMESPACE}/grower")
            await stack.until(lambda: on_log(released), str(released), within_s=20.0)
            grower = await batch.read_namespaced_job("grower", NAMESPACE)
            assert grower.spec.suspend is True
            await quiesce(js, subjects)
        assert stack.failures() == []
    found = await decisions(js, subjects, DECISIONS)
    grower_story = [kind for kind, key in found if key == f"{NAMESPACE}/grower"]
    assert grower_story == ["Admitted", "Preempted", "Released"], found  # not admitted again
    [stop] = await events_of(js, subjects, Preempted)
    assert (stop.workload, stop.preemptor) == (f"{NAMESPACE}/grower", f"{NAMESPACE}/grower")
    assert stop.reason.code == "GrewAfterAdmission"
    assert "cpu 10 -> 95" in stop.reason.message
    # What the ledger granted and released is the admitted 10 cpu: 95 never counted.
    [first] = [a for a in await events_of(js, subjects, Admitted) if a.workload.endswith("grower")]
    [gone] = [r for r in await events_of(js, subjects, Released) if r.workload.endswith("grower")]
    assert first.requests["cpu"] == gone.requests["cpu"] == 10_000
    assert stop.quota == first.quota == gone.quota
    await assert_log_invariants(js, subjects, EngineConfig())
    env = {"USHER_NATS_URL": infra.nats_url, "USHER_HOME": str(tmp_path / "home")}
    await assert_audit_clean(env, subjects.prefix, migrated_url)
