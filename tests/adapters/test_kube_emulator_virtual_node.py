"""The emulator's virtual node (Z3's burst zone): a virtual kubelet's node with large
allocatable, which the fake kubelet binds a zone's pods to, in the emulator's command and in
the one-machine cluster of ``usher up --burst-zones``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.builders.manifests import batch_job, container, pod_template
from tests.services.helpers import eventually
from usher.local import cluster
from usher.local.kube_emulator import KubeEmulator, Store, resource
from usher.local.kube_emulator.__main__ import parse_args
from usher.local.kube_emulator.virtual_node import (
    VIRTUAL_ALLOCATABLE,
    add_virtual_node,
    virtual_node_name,
)

NODES = resource("", "v1", "nodes")
PODS = resource("", "v1", "pods")


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    store = Store()
    add_virtual_node(store, "eci")
    async with KubeEmulator(store=store, kubelet=True) as emulator:
        yield emulator


def _labels(store: Store) -> dict[str, dict[str, str]]:
    return {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in store.objects(NODES)}


def test_the_virtual_node_says_it_is_a_virtual_kubelet_of_its_zone() -> None:
    store = Store()
    add_virtual_node(store, "eci")
    add_virtual_node(store, "eci")  # already there (a restored cluster): left alone
    [node] = store.objects(NODES)
    assert node["metadata"]["name"] == virtual_node_name("eci")
    assert node["metadata"]["labels"]["type"] == "virtual-kubelet"
    assert node["metadata"]["labels"]["usher.io/zone"] == "eci"
    assert node["status"]["allocatable"] == VIRTUAL_ALLOCATABLE
    assert int(node["status"]["allocatable"]["cpu"]) > int(cluster.NODE_ALLOCATABLE["cpu"])


def test_the_local_cluster_gives_a_burst_zone_a_virtual_node_and_others_a_plain_one() -> None:
    store = Store()
    cluster.ensure_nodes(store, ["default", "a", "eci"], frozenset({"eci"}))
    labels = _labels(store)
    assert sorted(labels) == ["node-a", virtual_node_name("eci")]
    assert labels["node-a"] == {"usher.io/zone": "a"}
    assert labels[virtual_node_name("eci")]["type"] == "virtual-kubelet"
    args = cluster.parse_args(["--kubeconfig", "k", "--state", "s", "--burst-zones", "eci"])
    assert args.burst_zones == "eci"


def test_the_emulator_command_takes_virtual_nodes() -> None:
    args = parse_args(["--kubeconfig", "k", "--virtual-node", "eci", "--virtual-node", "aci"])
    assert args.virtual_node == ["eci", "aci"]
    assert parse_args(["--kubeconfig", "k"]).virtual_node == []


async def test_a_job_pinned_to_the_burst_zone_runs_on_the_virtual_node(emu: KubeEmulator) -> None:
    job: dict[str, Any] = batch_job(
        "burst",
        "team",
        template=pod_template(container(), node_selector={"usher.io/zone": "eci"}),
        suspend=None,
        parallelism=2,
        completions=2,
    )
    emu.store.create(resource("batch", "v1", "jobs"), "team", job)

    async def running() -> bool:
        pods = emu.store.objects(PODS)
        return len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)

    assert await eventually(running, timeout_s=10.0)
    assert {p["spec"]["nodeName"] for p in emu.store.objects(PODS)} == {virtual_node_name("eci")}
