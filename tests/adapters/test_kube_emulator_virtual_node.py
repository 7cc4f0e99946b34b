"""The emulator's virtual node (Z3's burst zone): a virtual kubelet's node with large
allocatable, tainted as a virtual kubelet taints it, which the fake kubelet binds a zone's pods
to when they tolerate the taint (and leaves them Pending, Unschedulable, saying why, when they
do not), in the emulator's command and in the one-machine cluster of ``usher up
--burst-zones``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.builders.manifests import batch_job, container, pod_template
from tests.services.helpers import eventually
from usher.core.tree.burst_tolerations import DEFAULT_TOLERATIONS
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
    assert node["spec"]["taints"] == [
        {"key": "virtual-kubelet.io/provider", "value": "eci", "effect": "NoSchedule"}
    ]


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


def burst_job(name: str, tolerations: list[dict[str, str]] | None) -> dict[str, Any]:
    """A Job of two pods pinned to zone ``eci``; ``tolerations``: its template's (None: none)."""
    template = pod_template(container(), node_selector={"usher.io/zone": "eci"})
    if tolerations is not None:
        template["spec"]["tolerations"] = tolerations
    return batch_job(name, "team", template=template, suspend=None, parallelism=2, completions=2)


async def test_a_job_pinned_to_the_burst_zone_runs_on_the_virtual_node(emu: KubeEmulator) -> None:
    job = burst_job("burst", list(DEFAULT_TOLERATIONS))  # as the watcher pins it (Z3)
    emu.store.create(resource("batch", "v1", "jobs"), "team", job)

    async def running() -> bool:
        pods = emu.store.objects(PODS)
        return len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)

    assert await eventually(running, timeout_s=10.0)
    assert {p["spec"]["nodeName"] for p in emu.store.objects(PODS)} == {virtual_node_name("eci")}


async def test_a_pod_not_tolerating_the_taint_stays_pending_saying_why(emu: KubeEmulator) -> None:
    add_plain_node(emu.store)
    emu.store.create(resource("batch", "v1", "jobs"), "team", burst_job("plain", None))

    async def pending() -> bool:
        pods = emu.store.objects(PODS)
        return len(pods) == 2 and all(p.get("status", {}).get("conditions") for p in pods)

    assert await eventually(pending, timeout_s=10.0)
    for pod in emu.store.objects(PODS):
        assert "nodeName" not in pod["spec"]
        assert pod["status"]["phase"] == "Pending"
        [scheduled] = pod["status"]["conditions"]
        assert (scheduled["type"], scheduled["status"], scheduled["reason"]) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        )
        assert scheduled["message"] == (
            "0/2 nodes are available: 1 node(s) had untolerated taint "
            "{virtual-kubelet.io/provider: eci}, 1 node(s) didn't match Pod's node "
            "affinity/selector."
        )


async def test_a_toleration_of_another_taint_does_not_let_a_pod_on(emu: KubeEmulator) -> None:
    other = [{"key": "example.com/spot", "operator": "Exists", "effect": "NoSchedule"}]
    emu.store.create(resource("batch", "v1", "jobs"), "team", burst_job("spot", other))
    tolerating = [{"key": "virtual-kubelet.io/provider", "operator": "Equal", "value": "eci"}]
    emu.store.create(resource("batch", "v1", "jobs"), "team", burst_job("vk", tolerating))

    async def settled() -> bool:
        pods = emu.store.objects(PODS)
        return len(pods) == 4 and all(p.get("status", {}).get("phase") for p in pods)

    assert await eventually(settled, timeout_s=10.0)
    pods = emu.store.objects(PODS)
    placed = sorted((p["metadata"]["generateName"], p["spec"].get("nodeName", "")) for p in pods)
    vk = virtual_node_name("eci")
    assert placed == [("spot-", ""), ("spot-", ""), ("vk-", vk), ("vk-", vk)]


def add_plain_node(store: Store) -> None:
    """An untainted node of another zone (a cluster's own machine)."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a",
            "labels": {"usher.io/zone": "a"}}}  # fmt: skip
    store.create(NODES, None, node)
