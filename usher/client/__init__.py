"""The Usher client library: what kube-queue's Jobctl offered notebooks, typed.

What it does: ``Client`` (blocking, notebook-safe) and ``AsyncClient`` (asyncio) submit jobs to
Kubernetes and read states, queue positions, reasons and quota usage from Usher's log; results
are msgspec Structs (``JobInfo``, ``QueueInfo``, ``QuotaInfo``, ``Submitted``, ``Applied``,
``DryRun`` of ``dry_run``, a pending job's ``Estimate``),
failures typed ``ClientError``s. By default it talks to the running ``usher up``
(``$USHER_HOME/stack.json``); pass ``kubeconfig=`` and ``nats_url=`` for a real installation.

    from usher.client import Client
    with Client() as usher:
        job = usher.submit("train", namespace="user-a", image="pytorch:2", cpu=4, gpu=1)
        print(usher.wait(job.job).state)

What it must never do: decide anything or publish on the log (it is a client like kubectl).
"""

from typing import TYPE_CHECKING, Any

from usher.client.errors import (
    AlreadyExists,
    BadInput,
    ClientError,
    NotFound,
    NotRunning,
    Refused,
    WaitTimeout,
)
from usher.client.timing import UNKNOWN_GRACE_S

if TYPE_CHECKING:
    from usher.client.client import Applied, AsyncClient, Client, Deleted, Submitted
    from usher.client.manifests import JobRequest, job_manifest
    from usher.client.state import (
        DecisionInfo,
        JobInfo,
        PeopleProjection,
        QueuedJob,
        QueueInfo,
        QuotaInfo,
        StateView,
        TreeDeletion,
        TreeRejection,
    )
    from usher.client.target import Target, resolve_target, target_of_stack
    from usher.core.history.dryrun import DryRun
    from usher.core.history.estimate import Estimate

_LAZY = {
    "usher.client.client": (
        "Applied",
        "AsyncClient",
        "Client",
        "Deleted",
        "Submitted",
    ),
    "usher.client.manifests": ("JobRequest", "job_manifest"),
    "usher.client.state": (
        "DecisionInfo",
        "JobInfo",
        "PeopleProjection",
        "QueuedJob",
        "QueueInfo",
        "QuotaInfo",
        "StateView",
        "TreeDeletion",
        "TreeRejection",
    ),
    "usher.client.target": ("Target", "resolve_target", "target_of_stack"),
    "usher.core.history.dryrun": ("DryRun",),
    "usher.core.history.estimate": ("Estimate",),
}
"""Names imported on first use (PEP 562): the errors alone must not pull NATS, YAML and the
core in (the CLI catches them in every command, ``usher --version`` included)."""


def __getattr__(name: str) -> Any:
    import importlib

    for module, names in _LAZY.items():
        if name in names:
            return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "UNKNOWN_GRACE_S",
    "AlreadyExists",
    "Applied",
    "AsyncClient",
    "BadInput",
    "Client",
    "ClientError",
    "DecisionInfo",
    "Deleted",
    "DryRun",
    "Estimate",
    "JobInfo",
    "JobRequest",
    "NotFound",
    "NotRunning",
    "PeopleProjection",
    "QueueInfo",
    "QueuedJob",
    "QuotaInfo",
    "Refused",
    "StateView",
    "Submitted",
    "Target",
    "TreeDeletion",
    "TreeRejection",
    "WaitTimeout",
    "job_manifest",
    "resolve_target",
    "target_of_stack",
]
