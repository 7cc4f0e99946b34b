"""TP1 through the whole system: every pod of each gang lands in the one rack its admission chose.

emulator (racked nodes, its kubelet binding pods by node selector) -> watcher (nodes' topology
labels on the log) -> dequeuer (one domain per gang) -> ledger -> watcher (the rack pinned in
the unsuspending patch) -> emulator. Two blocks of two racks of two 64-cpu nodes (the local
stack's ``--racks 2x2x2``). Four gangs of 3 x 40 cpu each require a rack: a rack holds one (128
cpu), so all four are admitted, each into a rack of its own, and each gang's pods run only on
its rack's nodes. A fifth gang requiring a rack waits with ``TopologyNoFit`` though the
department has quota for it. The log breaks no invariant.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client
from nats.js import JetStreamContext

from schemas import Admitted
from tests.builders.manifests import one_department_tree, sleeping_job
from tests.conftest import Infra
from tests.e2e.checks import assert_log_invariants
from tests.e2e.harness import create_object, events_of, in_process_stack, kube_api
from usher.adapters.nats.subjects import Subjects
from usher.core.model.config import EngineConfig
from usher.local.cluster import RACK_LABEL, TOPOLOGY_LEVELS, racked_nodes
from usher.local.kube_emulator import KubeEmulator

NAMESPACE = "user-a"
WITHIN_S = 30.0
GANGS = ("g1", "g2", "g3", "g4")
REQUIRED = {"usher.io/topology-required": RACK_LABEL, "usher.io/sim-duration": "600"}


def gang(name: str) -> dict[str, Any]:
    return sleeping_job(name, NAMESPACE, cpu="40", memory="1Gi", pods=3, annotations=REQUIRED)


async def test_every_pod_of_each_gang_runs_in_the_rack_its_admission_chose(
    infra: Infra, subjects: Subjects, js: JetStreamContext, migrated_url: str, emu: KubeEmulator
) -> None:
    quota = {"cpu": "1000", "memory": "100Gi"}
    tree = one_department_tree(
        NAMESPACE,
        root=quota,
        department=quota,
        attributes={"usher.io/topology-levels": TOPOLOGY_LEVELS},
    )
    async with in_process_stack(infra.nats_url, migrated_url, subjects, emu) as stack:
        async with kube_api(emu) as api:
            nodes = racked_nodes("default", (2, 2, 2))
            for node in nodes:
                await create_object(api, node)
            rack_of = {n["metadata"]["name"]: n["metadata"]["labels"][RACK_LABEL] for n in nodes}
            await create_object(api, tree)
            for name in GANGS:
                await create_object(api, gang(name))

            async def all_admitted() -> dict[str, Admitted] | None:
                found = {a.workload: a for a in await events_of(js, subjects, Admitted)}
                wanted = {f"{NAMESPACE}/{name}" for name in GANGS}
                return found if wanted <= found.keys() else None

            admitted = await stack.until(all_admitted, "four gangs admitted", within_s=WITHIN_S)
            chosen = {}
            for name in GANGS:
                pin = admitted[f"{NAMESPACE}/{name}"].topology
                assert pin is not None and pin.level == RACK_LABEL, name
                chosen[name] = pin.domain
            assert sorted(chosen.values()) == ["b1-r1", "b1-r2", "b2-r1", "b2-r2"]

            core = client.CoreV1Api(api)

            async def placed() -> dict[str, set[str]] | None:
                pods = (await core.list_namespaced_pod(NAMESPACE)).items
                racks: dict[str, set[str]] = {name: set() for name in GANGS}
                counts = dict.fromkeys(GANGS, 0)
                for pod in pods:
                    owner = pod.metadata.labels.get("job-name")
                    if owner in racks and pod.spec.node_name:
                        racks[owner].add(rack_of[pod.spec.node_name])
                        counts[owner] += 1
                return racks if all(count == 3 for count in counts.values()) else None

            racks = await stack.until(placed, "every pod bound to a node", within_s=WITHIN_S)
            assert racks == {name: {chosen[name]} for name in GANGS}

            await create_object(api, gang("g5"))

            async def g5_waits() -> bool:
                admitted_now = await events_of(js, subjects, Admitted)
                job = await client.BatchV1Api(api).read_namespaced_job("g5", NAMESPACE)
                return bool(job.spec.suspend) and all(
                    a.workload != f"{NAMESPACE}/g5" for a in admitted_now
                )

            assert await g5_waits()
        assert stack.failures() == []
    await assert_log_invariants(js, subjects, EngineConfig())
