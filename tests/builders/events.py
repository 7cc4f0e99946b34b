"""Builders of the events the engine folds: quantities in the core's units and the
``WorkloadObserved`` a watcher would publish. Pure values; never touches a server or a log."""

from __future__ import annotations

from schemas import (
    Admitted,
    Millis,
    PodSet,
    QueueName,
    QuotaPath,
    Reservation,
    WorkloadKey,
    WorkloadObserved,
    Zone,
)

CORE = 1000  # one cpu in millicores
GI = 1 << 30  # one GiB in bytes


def cpu(cores: int) -> dict[str, int]:
    return {"cpu": cores * CORE}


def resources(cores: int, memory_gi: int = 0) -> dict[str, int]:
    """``cores`` cpu, and ``memory_gi`` GiB of memory when there is any."""
    out = cpu(cores)
    if memory_gi:
        out["memory"] = memory_gi * GI
    return out


def observed(
    namespace: str,
    name: str,
    cores: int,
    *,
    memory_gi: int = 0,
    created: int = 0,
    count: int = 1,
    priority: int | None = None,
    priority_class: str | None = None,
    zone: str = "default",
    quota_name: str | None = None,
) -> WorkloadObserved:
    """A batch Job ``namespace/name`` of ``count`` pods sharing ``cores`` cpu (and memory)."""
    return WorkloadObserved(
        workload=WorkloadKey(f"{namespace}/{name}"),
        namespace=namespace,
        name=name,
        kind="batch/v1/Job",
        zone=Zone(zone),
        priority=priority,
        priority_class=priority_class,
        created_ms=Millis(created),
        pod_sets=[PodSet(name="main", count=count, requests=_per_pod(cores, memory_gi, count))],
        quota_name=quota_name,
    )


def observed_key(key: str, cores: int, memory_gi: int = 0, *, created: int = 0) -> WorkloadObserved:
    """``observed`` for a workload named by its key ``namespace/name``."""
    namespace, _, name = key.partition("/")
    return observed(namespace, name, cores, memory_gi=memory_gi, created=created)


def _per_pod(cores: int, memory_gi: int, count: int) -> dict[str, int]:
    requests = {"cpu": cores * CORE // count}
    if memory_gi:
        requests["memory"] = memory_gi * GI // count
    return requests


def reservation(name: str, leaf: str, cores: int, **extra: int) -> Reservation:
    """What the ledger store holds for ``ns/name`` on quota ``leaf`` (queue ``q``, zone
    ``default``): ``cores`` cpu plus any ``extra`` resources as given."""
    return Reservation(
        workload=WorkloadKey(f"ns/{name}"),
        queue=QueueName("q"),
        quota=QuotaPath(leaf),
        zone=Zone("default"),
        requests={"cpu": cores * CORE, **extra},
    )


def admitted(
    key: str,
    cores: int,
    *,
    quota: str = "root/A",
    queue: str = "q",
    zone: str = "default",
    memory_gi: int = 0,
) -> Admitted:
    """The ledger's admission of ``key`` on ``quota`` for ``cores`` cpu (and memory)."""
    return Admitted(
        workload=WorkloadKey(key),
        queue=QueueName(queue),
        quota=QuotaPath(quota),
        zone=Zone(zone),
        requests=resources(cores, memory_gi),
    )
