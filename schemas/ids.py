"""Typed identifiers shared by every layer of Usher.

What it does: names the string and integer ids that cross layer boundaries (workload keys,
quota paths, queue names, zones, milliseconds) as ``NewType`` so mypy keeps them apart.
What it must never do: hold logic or import anything beyond the standard library.
"""

from __future__ import annotations

from typing import NewType

WorkloadKey = NewType("WorkloadKey", str)
"""``namespace/name`` of a workload; unique across kinds within a namespace."""

QuotaPath = NewType("QuotaPath", str)
"""Path of a quota tree node from the root, ``/``-separated, e.g. ``root/Department-a``."""

QueueName = NewType("QueueName", str)
"""Name of a leaf's queue, e.g. ``root-department-a-user-a`` (T5, docs/admission-rules.md)."""

Zone = NewType("Zone", str)
"""Node zone (label ``usher.io/zone``); one dequeuer serves each zone."""

NodeName = NewType("NodeName", str)
"""Kubernetes Node name."""

Millis = NewType("Millis", int)
"""A point in time as integer milliseconds (epoch in the live system, scenario time in sim)."""

EventId = NewType("EventId", str)
"""Deterministic id of an event; used as ``Nats-Msg-Id`` for de-duplication."""

RequestId = NewType("RequestId", str)
"""Id of a ledger request, echoed in its reply."""

ClusterName = NewType("ClusterName", str)
"""Name of a Kubernetes cluster one watcher sees (a DNS label); ``DEFAULT_CLUSTER`` is the
one every installation has, whose workload keys carry no cluster."""

DEFAULT_ZONE = Zone("default")
DEFAULT_CLUSTER = ClusterName("default")

CLUSTER_SEPARATOR = "@"
"""Between a workload's name and its cluster in the key of a workload of another cluster than
``DEFAULT_CLUSTER`` (``ns/name@gpu-east``): no Kubernetes name or namespace may hold it, so
keys of the same ``ns/name`` in two clusters never collide and old keys stay as they were."""


def workload_key(namespace: str, name: str, cluster: ClusterName = DEFAULT_CLUSTER) -> WorkloadKey:
    """Build the key of a workload: ``namespace/name``, with ``@cluster`` outside the default
    cluster."""
    if cluster == DEFAULT_CLUSTER:
        return WorkloadKey(f"{namespace}/{name}")
    return WorkloadKey(f"{namespace}/{name}{CLUSTER_SEPARATOR}{cluster}")


def cluster_of(key: WorkloadKey) -> ClusterName:
    """The cluster a workload key names (``DEFAULT_CLUSTER`` when it names none)."""
    _, sep, cluster = key.rpartition(CLUSTER_SEPARATOR)
    return ClusterName(cluster) if sep and cluster else DEFAULT_CLUSTER


def object_name(key: WorkloadKey) -> tuple[str, str]:
    """``(namespace, name)`` of the Kubernetes object a workload key stands for, in its own
    cluster (the key without its ``@cluster``)."""
    namespace, _, name = key.partition("/")
    head, sep, cluster = name.rpartition(CLUSTER_SEPARATOR)
    return namespace, head if sep and cluster else name
