"""The one-machine Kubernetes cluster: the API emulator + fake kubelet, kept on disk.

What it does: ``python -m usher.local.cluster --kubeconfig F --state S --zones a,b
[--burst-zones eci]`` runs the Kubernetes API emulator with its fake kubelet on 127.0.0.1,
restores every object it held when it last acknowledged a write, from the state file ``S``
and the journal beside it (``kube_emulator.journal``: same uid, resourceVersion,
creationTimestamp and status, so the watcher sees nothing new and the log stays the truth),
creates the namespaces a cluster starts with, Usher's own and the walkthrough's (an object in
any other namespace is refused until that namespace is created, as on a cluster),
creates one schedulable Node per zone listed (labelled ``usher.io/zone``; a burst zone's is a
virtual kubelet's node with large allocatable, Z3) unless it exists -- with ``--racks BxRxN``,
B blocks of R racks of N nodes per zone instead, labelled with their topology (TP1:
``topology.usher.io/block``, ``topology.usher.io/rack``, ``kubernetes.io/hostname``) --, writes
the kubeconfig,
and from then on journals every write before answering it (a SIGKILL loses nothing it
acknowledged, as etcd behind a real API server), folding the journal into ``S`` now and then
and on SIGTERM. A restored running job runs its ``usher.io/sim-duration`` again from the start
(the kubelet's timers are not persisted). With ``--webhook-url URL --webhook-ca PEM`` it
registers Usher's admission webhook (the ``MutatingWebhookConfiguration`` of deploy/webhook,
calling URL and trusting PEM only) before serving: jobs of managed namespaces are created
suspended, and an admitted one's pod sets may not change (R16).
What it must never do: listen on anything but 127.0.0.1, write a half state file, or lose
an acknowledged write, on a clean stop or a kill.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

from usher.core.kinds import FAMILIES
from usher.local.kube_emulator import RESOURCES, ApiError, KubeEmulator, Store
from usher.local.kube_emulator.journal import Journal, PersistentStore, storage_types
from usher.local.kube_emulator.store import CLUSTER_NAMESPACES
from usher.local.kube_emulator.virtual_node import add_virtual_node

COMPACT_CHECK_S = 1.0
ZONE_LABEL = "usher.io/zone"
DEFAULT_ZONE = "default"
NODE_ALLOCATABLE = {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "4", "pods": "110"}
"""Each zone gets one node this large: the demo's whole tree (100 cpu) fits in two zones, and
no walkthrough job is refused for want of a node."""

JsonObj = dict[str, Any]


def node_manifest(zone: str, name: str | None = None, labels: JsonObj | None = None) -> JsonObj:
    """One schedulable node of ``zone`` (the fake kubelet binds a Job's pods to it; capacity
    is counted by Usher from the node, never from the pods)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name or f"node-{zone}",
            "labels": {ZONE_LABEL: zone, **(labels or {})},
        },
        "status": {"allocatable": dict(NODE_ALLOCATABLE), "capacity": dict(NODE_ALLOCATABLE)},
    }


BLOCK_LABEL = "topology.usher.io/block"
RACK_LABEL = "topology.usher.io/rack"
HOST_LABEL = "kubernetes.io/hostname"
TOPOLOGY_LEVELS = f"{BLOCK_LABEL}, {RACK_LABEL}, {HOST_LABEL}"
"""The tree attribute ``usher.io/topology-levels`` that names the racked nodes' levels (TP1)."""
MOST_PER_LEVEL = 8
"""The most blocks per zone, racks per block and nodes per rack ``--racks`` makes."""
Racks = tuple[int, int, int]


def parse_racks(raw: str) -> Racks | None:
    """``BxRxN`` (blocks per zone, racks per block, nodes per rack, each 1 to 8) as numbers;
    None for ''. Raises ``ValueError`` saying what is wrong."""
    if not raw:
        return None
    parts = raw.split("x")
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
        raise ValueError(f"expected BxRxN (blocks, racks per block, nodes per rack), got {raw!r}")
    blocks, racks, nodes = (int(p) for p in parts)
    if not all(1 <= n <= MOST_PER_LEVEL for n in (blocks, racks, nodes)):
        raise ValueError(f"each of BxRxN must be 1 to {MOST_PER_LEVEL}, got {raw!r}")
    return blocks, racks, nodes


def racked_nodes(zone: str, racks: Racks) -> list[JsonObj]:
    """The nodes of ``zone`` in ``racks``' blocks and racks, labelled with their topology:
    block ``b1``, rack ``b1-r2``, host ``node-<zone>-b1-r2-n3`` (TP1)."""
    blocks, per_block, per_rack = racks
    found = []
    for b in range(1, blocks + 1):
        for r in range(1, per_block + 1):
            for n in range(1, per_rack + 1):
                name = f"node-{zone}-b{b}-r{r}-n{n}"
                labels = {BLOCK_LABEL: f"b{b}", RACK_LABEL: f"b{b}-r{r}", HOST_LABEL: name}
                found.append(node_manifest(zone, name, labels))
    return found


SYSTEM_NAMESPACES = (*CLUSTER_NAMESPACES, "usher-system", "kube-queue")
"""The namespaces every cluster starts with, and deploy/base/namespaces.yaml's."""
WALKTHROUGH_NAMESPACES = ("user-a", "user-b", "user-c", "user-d", "user-x", "user-y")
"""The namespaces the README's walkthrough and the demo put jobs in: the local cluster starts
with them (as the walkthrough's cluster has them); any other namespace must be created
(``kubectl create namespace``) before a job can be put in it, as on a cluster."""


def used_namespaces(store: Store) -> list[str]:
    """Every namespace an object of ``store`` is in (a state saved before namespaces had to
    exist keeps its objects: their namespaces are made on restore)."""
    used = {
        obj["metadata"].get("namespace")
        for rt in storage_types().values()
        if rt.namespaced
        for obj in store.objects(rt)
    }
    return sorted(ns for ns in used if ns)


def restored_store(state: JsonObj, history: int) -> tuple[PersistentStore, int]:
    """The cluster's store from a saved snapshot (and how many objects it held), with the
    namespaces it starts with; it refuses objects in any other namespace until one is made."""
    store = PersistentStore(history_size=history, strict_namespaces=True, validate=True)
    restored = store.restore(state)
    _ensure_namespaces(store)
    return store, restored


def recovered_store(state: Path, history: int) -> tuple[PersistentStore, Journal, int]:
    """The cluster's store as it was when it last acknowledged a write (its snapshot and
    journal), with the namespaces it starts with, and the journal to keep it by."""
    store = PersistentStore(history_size=history, strict_namespaces=True, validate=True)
    journal = Journal(state, store)
    restored = journal.recover()
    _ensure_namespaces(store)
    return store, journal, restored


def _ensure_namespaces(store: Store) -> None:
    store.ensure_namespaces((*SYSTEM_NAMESPACES, *WALKTHROUGH_NAMESPACES, *used_namespaces(store)))


def ensure_nodes(
    store: Store, zones: list[str], burst: frozenset[str] = frozenset(), racks: Racks | None = None
) -> None:
    """One node per zone unless there, or ``racks``' racked nodes (TP1); a burst zone's is a
    virtual node (Z3)."""
    nodes = next(rt for rt in RESOURCES if rt.plural == "nodes")
    for zone in zones:
        if zone == DEFAULT_ZONE:
            continue  # jobs without a zone label: no nodes, only quota limits them
        if zone in burst:
            add_virtual_node(store, zone)
            continue
        for manifest in [node_manifest(zone)] if racks is None else racked_nodes(zone, racks):
            with contextlib.suppress(ApiError):  # already there (restored)
                store.create(nodes, None, manifest)


WEBHOOK_CONFIGURATION = "usher-webhook"
NOT_SENT_TO_THE_WEBHOOK = ("kube-system", "kube-public", "kube-node-lease", "usher-system")
"""As in deploy/webhook/mutatingwebhook.yaml: Usher's own and the system namespaces."""
WEBHOOK_SKIP_LABEL = "usher.io/webhook"
"""A namespace labelled ``usher.io/webhook: skip`` is never sent to the webhook either."""


def webhook_configuration(url: str, ca_pem: bytes) -> JsonObj:
    """The ``MutatingWebhookConfiguration`` of deploy/webhook, calling ``url`` (the local
    webhook process) and trusting ``ca_pem`` only: every kind Usher admits, on create (made
    suspended) and update (an admitted job's pod sets may not change, R16)."""
    rules = [
        {"operations": ["CREATE", "UPDATE"], "apiGroups": [family.group],
         "apiVersions": sorted(family.versions), "resources": [family.plural],
         "scope": "Namespaced"}
        for family in FAMILIES
    ]  # fmt: skip
    system_namespaces = {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": list(NOT_SENT_TO_THE_WEBHOOK),
    }
    # A namespace labelled usher.io/webhook=skip is never sent (deploy/webhook, install guide).
    opted_out = {"key": WEBHOOK_SKIP_LABEL, "operator": "NotIn", "values": ["skip"]}
    hook = {
        "name": "jobs.usher.io",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 5,
        "reinvocationPolicy": "Never",
        "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
        "namespaceSelector": {"matchExpressions": [system_namespaces, opted_out]},
        "rules": rules,
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION},
        "webhooks": [hook],
    }


def ensure_webhook(store: Store, url: str, ca_pem: bytes) -> None:
    """Register the webhook (replacing one a previous run left with another port and CA)."""
    configurations = next(rt for rt in RESOURCES if rt.plural == "mutatingwebhookconfigurations")
    with contextlib.suppress(ApiError):
        store.delete(configurations, None, WEBHOOK_CONFIGURATION)
    store.create(configurations, None, webhook_configuration(url, ca_pem))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m usher.local.cluster")
    parser.add_argument("--kubeconfig", type=Path, required=True, help="kubeconfig to write")
    parser.add_argument("--state", type=Path, required=True, help="file the objects live in")
    parser.add_argument("--zones", default="", help="comma-separated zones to give a node")
    parser.add_argument(
        "--burst-zones", default="", help="those of --zones whose node is a virtual node (Z3)"
    )
    parser.add_argument(
        "--racks", default="", help="BxRxN: per zone B blocks of R racks of N nodes (TP1)"
    )
    parser.add_argument("--speed", type=float, default=1.0, help="kubelet clock speed-up")
    parser.add_argument("--history", type=int, default=100_000, help="watch events kept")
    parser.add_argument("--webhook-url", default="", help="the admission webhook's https URL")
    parser.add_argument("--webhook-ca", type=Path, help="PEM file the webhook's TLS chains to")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    store, journal, restored = recovered_store(args.state, args.history)
    burst = frozenset(z for z in args.burst_zones.split(",") if z)
    ensure_nodes(store, [z for z in args.zones.split(",") if z], burst, parse_racks(args.racks))
    if args.webhook_url:
        # Before it serves anything: no job is ever created here without the webhook's say.
        ensure_webhook(store, args.webhook_url, args.webhook_ca.read_bytes())
    journal.start()  # from here on every write is on disk before it is answered
    emulator = KubeEmulator(
        store=store, kubeconfig_path=args.kubeconfig, kubelet=True, kubelet_speed=args.speed
    )
    async with emulator:
        print(f"{emulator.url} ({restored} objects restored)", flush=True)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=COMPACT_CHECK_S)
            if journal.due():
                journal.compact_now()
    journal.close()


def main(argv: list[str] | None = None) -> int:
    asyncio.run(serve(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
