"""Which zones live in which cluster (C1): the mapping an operator writes, strictly parsed.

What it does: ``cluster_name`` reads a cluster's name (a DNS-1123 label: it goes into NATS
subjects, workload keys and Kubernetes labels); ``parse_cluster_zones`` reads a mapping
``"gpu-east=a100,h100;gpu-west=b200"`` into cluster -> its zones, in order, refusing an empty
or repeated cluster, a zone named twice (in one cluster or two), more than ``MAX_CLUSTERS``
clusters or a cluster with more than ``names.MAX_ZONES`` zones; ``format_cluster_zones`` is its
inverse. Each refusal is a ``ValueRefused`` naming the field.
What it must never do: accept an unbounded mapping, reorder zones, drop a name, or do I/O.
"""

from __future__ import annotations

from typing import Final

from schemas import ClusterName, Zone
from usher.core.model.errors import ValueRefused
from usher.core.values import names
from usher.core.values.shown import shown

MAX_CLUSTERS: Final = 64
"""The most clusters one mapping may name."""
MAX_MAPPING: Final = MAX_CLUSTERS * (names.MAX_LABEL + 1) * (names.MAX_ZONES + 1)
"""The longest mapping text read at all (longer text is refused before it is split)."""
CLUSTER_SEPARATOR: Final = ";"
ZONES_SEPARATOR: Final = "="

ClusterZones = dict[ClusterName, tuple[Zone, ...]]
"""Cluster -> its zones, in the order the mapping names them."""


def cluster_name(raw: object, path: str) -> ClusterName:
    """A cluster's name: a DNS-1123 label."""
    return ClusterName(names.dns_label(raw, path, what="a cluster name"))


def parse_cluster_zones(raw: object, path: str) -> ClusterZones:
    """``"<cluster>=<zone>,<zone>;<cluster>=<zone>"`` as cluster -> zones (see the module)."""
    if not isinstance(raw, str):
        raise ValueRefused(path, "invalid-type", f"expected text, got {shown(raw)}")
    if len(raw) > MAX_MAPPING:
        raise ValueRefused(path, "too-long", f"at most {MAX_MAPPING} characters")
    parts = [part.strip() for part in raw.split(CLUSTER_SEPARATOR)]
    if len(parts) > MAX_CLUSTERS:
        raise ValueRefused(path, "too-many", f"at most {MAX_CLUSTERS} clusters, got {len(parts)}")
    mapping: ClusterZones = {}
    owner: dict[Zone, ClusterName] = {}
    for index, part in enumerate(parts):
        at = f"{path}[{index}]"
        name, sep, zones_text = part.partition(ZONES_SEPARATOR)
        if not sep:
            raise ValueRefused(
                at, "invalid-format", f"expected <cluster>=<zones>, got {shown(part)}"
            )
        cluster = cluster_name(name.strip(), f"{at}.cluster")
        if cluster in mapping:
            raise ValueRefused(f"{at}.cluster", "duplicate", f"cluster {cluster} is named twice")
        zones = names.zone_names(zones_text, f"{at}.zones")
        if not zones:
            raise ValueRefused(f"{at}.zones", "empty", f"cluster {cluster} names no zone")
        for zone in zones:
            if zone in owner:
                raise ValueRefused(
                    f"{at}.zones", "duplicate", f"zone {zone} is already cluster {owner[zone]}'s"
                )
            owner[zone] = cluster
        mapping[cluster] = tuple(zones)
    return mapping


def format_cluster_zones(mapping: ClusterZones) -> str:
    """The text ``parse_cluster_zones`` reads back as ``mapping``."""
    return CLUSTER_SEPARATOR.join(
        f"{cluster}{ZONES_SEPARATOR}{','.join(zones)}" for cluster, zones in mapping.items()
    )
