"""The registry of job kinds: one module per family, everything else derives from it.

What it does: gathers the ``KindFamily`` of every job kind Usher admits -- batch Job
(``batch``), Kubeflow TFJob/PyTorchJob/MPIJob (``kubeflow``), RayJob (``ray``), JobSet
(``jobset``), SparkApplication (``spark``), Argo Workflow (``argo``) -- and of the kinds it
observes only to reject (Kubeflow's XGBoostJob, PaddleJob, MXJob). The core's workload parsing,
the watcher, the client's manifests, the webhook and the Kubernetes emulator (served resources,
fake kubelet) all read their kind knowledge from here (how each kind's pods are counted and
found too: ``KindFamily.pods``; ``usher.io/min-success`` is read by ``success``, a declared
maximum runtime by ``runtime``, RT1), and the watcher's RBAC rules are checked against it.
Adding a kind is one module and one line below.
What it must never do: do I/O, or hold knowledge of a kind outside its family module.
"""

from __future__ import annotations

from usher.core.kinds import argo, batch, jobset, kubeflow, ray, spark
from usher.core.kinds.family import KindFamily, Outcome, PodSetSource, parse_time_ms

__all__ = [
    "FAMILIES",
    "OBSERVED",
    "REJECTED",
    "SUPPORTED_KINDS",
    "KindFamily",
    "Outcome",
    "PodSetSource",
    "family_of_kind_id",
    "parse_time_ms",
]

FAMILIES: tuple[KindFamily, ...] = (
    *batch.FAMILIES,
    *kubeflow.FAMILIES,
    *ray.FAMILIES,
    *jobset.FAMILIES,
    *spark.FAMILIES,
    *argo.FAMILIES,
)
"""Every job kind Usher admits, in the order its tables list them."""

REJECTED: tuple[KindFamily, ...] = kubeflow.REJECTED
"""Job kinds Usher does not admit but a cluster may serve: each object is rejected on the log."""

OBSERVED: tuple[KindFamily, ...] = FAMILIES + REJECTED
"""Every job kind the watcher lists and watches."""

_BY_KIND_ID: dict[str, KindFamily] = {
    # Versions sorted so that the table reads the same however a family orders its preference.
    f"{family.group}/{version}/{family.kind}": family
    for family in FAMILIES
    for version in sorted(family.versions)
}

SUPPORTED_KINDS: tuple[str, ...] = tuple(_BY_KIND_ID)
"""Every ``apiVersion/kind`` Usher admits, e.g. ``batch/v1/Job``."""


def family_of_kind_id(kind_id: str) -> KindFamily | None:
    """The admitted family of an ``apiVersion/Kind`` id (``batch/v1/Job``); None otherwise."""
    return _BY_KIND_ID.get(kind_id)
