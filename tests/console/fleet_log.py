"""A log of two clusters and a topology of racks (M1, TP1), written as the services record
it: what the console's and the CLI's tests show. Pure values; never touches a server.

Cluster ``default`` (zone ``default``): four 8-gpu nodes, rack-1 holding n1 and n2, rack-2 n3
and rack-3 n4, all in block b1. Gang ``train/a`` (2 x 8 gpu, one rack required) is admitted
pinned to rack-1; gang ``train/c`` (the same) waits: the zone has 16 gpu free but no rack does.
Cluster ``west`` (zone ``west``, two 8-gpu nodes): ``train/w1@west`` is admitted, then west's
watcher loses its API server; ``train/w2@west``, seen before that, waits for it.
"""

from __future__ import annotations

from schemas import (
    Admitted,
    ClusterConnected,
    ClusterDisconnected,
    ClusterName,
    NodeName,
    NodeObserved,
    QueueName,
    QuotaNode,
    QuotaPath,
    TopologyAsk,
    TopologyPin,
    WorkloadKey,
    Zone,
)
from tests.builders.log import Log

RACK = "topology.usher.io/rack"
BLOCK = "topology.usher.io/block"
LEAF = QuotaPath("root/train")
QUEUE = QueueName("root-train-train")
GPU = "nvidia.com/gpu"
POD = {"cpu": 4000, GPU: 8}
GANG = {"cpu": 8000, GPU: 16}


def topology_tree() -> QuotaNode:
    amounts = {"cpu": 1_000_000, GPU: 100}
    return QuotaNode(
        name="root",
        min=amounts,
        max=amounts,
        attributes={"usher.io/topology-levels": f"{BLOCK}, {RACK}, kubernetes.io/hostname"},
        children=[QuotaNode(name="train", min=amounts, max=amounts, namespaces=["train"])],
    )


def _node(log: Log, name: str, rack: str, zone: str = "default") -> None:
    labels = {BLOCK: "b1", RACK: rack, "kubernetes.io/hostname": name}
    log.add(
        0,
        NodeObserved(
            node=NodeName(name),
            zone=Zone(zone),
            allocatable={"cpu": 32000, GPU: 8},
            labels=labels,
        ),
    )


def _gang(log: Log, at: float, key: str, zone: str = "default") -> None:
    ask = TopologyAsk(level=RACK) if zone == "default" else None
    log.job(at, key, 0, pods=2, zone=zone, pod_requests=POD, topology=ask)


def _admitted(log: Log, at: float, key: str, zone: str, pin: TopologyPin | None) -> None:
    log.add(
        at,
        Admitted(
            workload=WorkloadKey(key),
            queue=QUEUE,
            quota=LEAF,
            zone=Zone(zone),
            requests=GANG,
            topology=pin,
        ),
        id=f"ledger:admitted:{key}:1",
    )


def fleet_log() -> Log:
    """The log the module docstring tells."""
    log = Log().tree(0, topology_tree())
    log.add(0, ClusterConnected(cluster=ClusterName("default"), zones=[Zone("default")]))
    log.add(0, ClusterConnected(cluster=ClusterName("west"), zones=[Zone("west")]))
    for name, rack in (("n1", "rack-1"), ("n2", "rack-1"), ("n3", "rack-2"), ("n4", "rack-3")):
        _node(log, name, rack)
    _node(log, "w-n1", "rack-w", zone="west")
    _node(log, "w-n2", "rack-w", zone="west")
    _gang(log, 1, "train/a")
    _admitted(log, 2, "train/a", "default", TopologyPin(level=RACK, domain="rack-1"))
    _gang(log, 3, "train/c")
    _gang(log, 4, "train/w1@west", zone="west")
    _admitted(log, 5, "train/w1@west", "west", None)
    _gang(log, 6, "train/w2@west", zone="west")
    log.add(7, ClusterDisconnected(cluster=ClusterName("west"), reason="connection refused"))
    return log
