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

DEFAULT_ZONE = Zone("default")


def workload_key(namespace: str, name: str) -> WorkloadKey:
    """Build the ``namespace/name`` key of a workload."""
    return WorkloadKey(f"{namespace}/{name}")
