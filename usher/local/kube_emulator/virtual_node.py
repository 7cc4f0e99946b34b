"""A virtual node for the emulator: a virtual kubelet's node (ECI, Alibaba Cloud's elastic
containers), for burst zones.

What it does: ``virtual_node_manifest(zone)`` is the Node a virtual kubelet registers -- one
node standing for a whole provider's capacity, so its allocatable is large -- labelled as a
virtual kubelet (``type: virtual-kubelet``) and with the zone Usher serves it as
(``usher.io/zone``, Z3's burst zone), and tainted as a virtual kubelet taints its node
(``virtual-kubelet.io/provider=<zone>:NoSchedule``: only pods that tolerate it land there; the
watcher adds that toleration to the pods it pins to a burst zone); ``add_virtual_node`` puts it
in a store unless a node of that name is there (a restored cluster keeps its own). The fake
kubelet binds pods to it like to any node whose labels the pod template's ``nodeSelector``
names and whose taints it tolerates.
What it must never do: touch any other object.
"""

from __future__ import annotations

import contextlib
from typing import Any, Final

from usher.core.tree.burst_tolerations import VIRTUAL_KUBELET_TAINT_KEY
from usher.local.kube_emulator.errors import ApiError
from usher.local.kube_emulator.resources import RESOURCES
from usher.local.kube_emulator.store import Store

VIRTUAL_KUBELET_LABELS: Final = {"type": "virtual-kubelet", "kubernetes.io/role": "agent"}
"""How a virtual kubelet's node says what it is (the labels virtual-kubelet providers set)."""
VIRTUAL_ALLOCATABLE: Final = {
    "cpu": "2000",
    "memory": "8Ti",
    "nvidia.com/gpu": "64",
    "pods": "10000",
}
"""Large: a provider's capacity, not one machine's (no job of the walkthrough or demo fills it)."""
ZONE_LABEL: Final = "usher.io/zone"
NODES = next(rt for rt in RESOURCES if rt.plural == "nodes")


def virtual_node_name(zone: str) -> str:
    return f"virtual-node-{zone}"


def virtual_kubelet_taint(zone: str) -> dict[str, str]:
    """The taint a virtual kubelet puts on its node (its value names the provider: the
    emulator's is named after the zone it serves)."""
    return {"key": VIRTUAL_KUBELET_TAINT_KEY, "value": zone, "effect": "NoSchedule"}


def virtual_node_manifest(zone: str) -> dict[str, Any]:
    """The Node of a virtual kubelet serving ``zone``."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": virtual_node_name(zone),
            "labels": {**VIRTUAL_KUBELET_LABELS, ZONE_LABEL: zone},
        },
        "spec": {"taints": [virtual_kubelet_taint(zone)]},
        "status": {
            "allocatable": dict(VIRTUAL_ALLOCATABLE),
            "capacity": dict(VIRTUAL_ALLOCATABLE),
        },
    }


def add_virtual_node(store: Store, zone: str) -> None:
    """Register ``zone``'s virtual node in ``store`` unless it is there already."""
    with contextlib.suppress(ApiError):  # already there (restored)
        store.create(NODES, None, virtual_node_manifest(zone))
