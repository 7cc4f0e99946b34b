"""Its cluster connected, as a gate (M1): nothing is admitted into a cluster its watcher
cannot see.

What it does: shuts a waiting workload whose own cluster (the one its key names) is
disconnected or declared lost, or that accepts a zone another cluster holds, with the reason
(``usher.core.rules.clusters.stop``) and what opens it (its watcher connects again).
What it must never do: shut anything on a log that never spoke of clusters, release quota,
or read a clock.
"""

from __future__ import annotations

from schemas import QuotaPath, Reason
from usher.core.gates.view import AdmissionView, Gate, Opening, stop_gate
from usher.core.rules import clusters
from usher.core.state.indexed import Job


def stop(view: AdmissionView, job: Job) -> Reason | None:
    links = view.state.clusters
    if not links:
        return None
    return clusters.stop(links, clusters.zone_owners(links), job.key, job.zones or (job.zone,))


def opens(view: AdmissionView, job: Job) -> Opening:
    return Opening(on=clusters.opening(view.state.clusters, job.key))


def may_shut(view: AdmissionView, leaf: QuotaPath) -> bool:
    return clusters.any_shut(view.state.clusters)


GATE: Gate = stop_gate(
    "M1 cluster connected",
    "its cluster is disconnected or lost, or a zone it accepts is another cluster's (M1)",
    stop,
    opens=opens,
    may_shut=may_shut,
)
