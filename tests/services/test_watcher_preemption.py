"""A victim preempted before its admission was carried out still gets a stop observation.

Without it the ledger would never release the victim and the preemptor's hold would wait
forever: the job never ran, so nothing about it changes in the cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client
from nats.js import JetStreamContext

from schemas import (
    Admitted,
    Preempted,
    QueueName,
    QuotaPath,
    Reason,
    WorkloadKey,
    WorkloadObserved,
    Zone,
)
from services.common.settings import ServiceSettings
from services.watcher.service import main
from tests.builders.manifests import batch_job, container, pod_template
from tests.conftest import Infra
from tests.e2e.harness import kube_api, read_log
from tests.services.helpers import eventually, publish, running
from usher.adapters.nats.subjects import Subjects
from usher.local.kube_emulator import KubeEmulator

VICTIM = WorkloadKey("user-a/victim")


@pytest.fixture
async def emu(tmp_path: Path) -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator(kubeconfig_path=tmp_path / "kubeconfig", kubelet=True) as emulator:
        yield emulator


def suspended_job() -> dict[str, object]:
    main = container("w", cpu="1")
    return batch_job("victim", "user-a", template=pod_template(main))


async def test_preempted_before_it_ran_is_reported_stopped_after_the_preemption(
    infra: Infra, subjects: Subjects, js: JetStreamContext, emu: KubeEmulator
) -> None:
    settings = ServiceSettings(
        nats_url=infra.nats_url, kubeconfig=emu.kubeconfig_path, prefix=subjects.prefix
    )
    async with kube_api(emu) as api:
        await client.BatchV1Api(api).create_namespaced_job("user-a", suspended_job())
        async with running("watcher", main, settings, subjects):

            async def observed() -> bool:
                entries = await read_log(js, subjects)
                return any(isinstance(e.event, WorkloadObserved) for _, _, e in entries)

            assert await eventually(observed)
        # While the watcher is away, the job is admitted and at once preempted (a reclaim
        # right after an admission): when it comes back both decisions are on the log.
        zone = Zone("default")
        await publish(
            js,
            subjects.decision(zone, "admitted", "user-a", "victim"),
            Admitted(
                workload=VICTIM,
                queue=QueueName("q"),
                quota=QuotaPath("root/A"),
                zone=zone,
                requests={"cpu": 1000},
            ),
        )
        await publish(
            js,
            subjects.decision(zone, "preempted", "user-a", "victim"),
            Preempted(
                workload=VICTIM,
                queue=QueueName("q"),
                quota=QuotaPath("root/A"),
                preemptor=WorkloadKey("user-c/claim"),
                reason=Reason(code="Reclaim", message="r"),
            ),
        )
        preempted_seq = int((await js.stream_info(subjects.stream_name)).state.last_seq)
        async with running("watcher", main, settings, subjects):

            async def stops_after_preemption() -> list[str]:
                entries = await read_log(js, subjects)
                return [
                    e.id
                    for s, _, e in entries
                    if s > preempted_seq
                    and isinstance(e.event, WorkloadObserved)
                    and e.event.suspended
                ]

            ids = await eventually(stops_after_preemption)
            assert ids == [ids[0]] and ids[0].endswith(f":after-preemption:{preempted_seq}")
        job = await client.BatchV1Api(api).read_namespaced_job("victim", "user-a")
        assert job.spec.suspend is True
