"""TP1 outside the core: the watcher publishes a node's topology labels, its admission patch
pins every pod template of every kind to the chosen domain beside the zone, and the local
cluster's racked nodes take a pinned Job's pods only in that domain."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from schemas import NodeObserved, TopologyPin
from services.watcher.kinds import JOB_FAMILIES, JobFamily, admit_patch
from services.watcher.translate import node_observed
from tests.core.test_kinds import job, jobset, rayjob, spark, tfjob, workflow
from usher.adapters.nats.subjects import Subjects
from usher.local.cluster import ensure_nodes, parse_racks, racked_nodes
from usher.local.kube_emulator import Store
from usher.local.kube_emulator.patches import merge_patch
from usher.local.kube_emulator.pods import node_for

Obj = dict[str, Any]
MANIFESTS = [job, tfjob, rayjob, jobset, spark, workflow]
RACK = "topology.usher.io/rack"
PIN = TopologyPin(level=RACK, domain="b1-r2")


def family(kind: str) -> JobFamily:
    return next(f for f in JOB_FAMILIES if f.kind == kind)


@pytest.mark.parametrize("make", MANIFESTS, ids=[m.__name__ for m in MANIFESTS])
def test_an_admission_pins_every_template_to_the_domain_beside_the_zone(make: Any) -> None:
    manifest = make()
    f = family(manifest["kind"])
    patch = admit_patch(f, manifest, "a", None, (), PIN)
    assert patch is not None
    after = merge_patch(copy.deepcopy(manifest), patch)
    templates = f.templates(after["spec"])
    selectors = [template.get("spec", template).get("nodeSelector") for template in templates]
    assert selectors and all(s == {"usher.io/zone": "a", RACK: "b1-r2"} for s in selectors)
    unpinned = merge_patch(copy.deepcopy(manifest), admit_patch(f, manifest, "a"))
    assert all(
        RACK not in (t.get("spec", t).get("nodeSelector") or {})
        for t in f.templates(unpinned["spec"])
    )


def test_a_node_is_published_with_its_topology_labels_only() -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n1",
            "uid": "u1",
            "resourceVersion": "3",
            "labels": {
                "usher.io/zone": "a",
                RACK: "b1-r2",
                "topology.usher.io/block": "b1",
                "kubernetes.io/hostname": "n1",
                "kubernetes.io/os": "linux",
            },
        },
        "status": {"allocatable": {"cpu": "8"}},
    }
    out = node_observed(node, Subjects("usher"))
    assert isinstance(out.event, NodeObserved)
    assert out.event.labels == {
        "kubernetes.io/hostname": "n1",
        "topology.usher.io/block": "b1",
        RACK: "b1-r2",
    }


def test_racked_nodes_take_a_pinned_jobs_pods_only_in_its_rack() -> None:
    racks = parse_racks("2x2x2")
    assert racks == (2, 2, 2)
    store = Store()
    ensure_nodes(store, ["a"], racks=racks)
    assert len(racked_nodes("a", racks)) == 8
    manifest = job()
    manifest["spec"]["template"]["spec"]["nodeSelector"] = {"usher.io/zone": "a", RACK: "b1-r2"}
    bound = {node_for(store, manifest, index) for index in range(8)}
    assert bound == {"node-a-b1-r2-n1", "node-a-b1-r2-n2"}
    manifest["spec"]["template"]["spec"]["nodeSelector"][RACK] = "b9-r9"
    assert node_for(store, manifest, 0) == ""  # no such rack: the pod stays pending


@pytest.mark.parametrize("raw", ["2x2", "0x1x1", "9x1x1", "axbxc", "1x1x\uff11"])
def test_a_bad_rack_layout_says_what_is_wrong(raw: str) -> None:
    with pytest.raises(ValueError, match="BxRxN"):
        parse_racks(raw)
