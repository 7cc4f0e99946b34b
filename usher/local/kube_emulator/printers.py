"""Server-side printing: the ``Table`` columns kube-apiserver 1.32 gives kubectl per kind.

What it does: jobs get Name, Status, Completions, Duration, Age (and, with ``-o wide``,
Containers, Images, Selector); pods get Name, Ready, Status, Restarts, Age (and IP, Node,
Nominated Node, Readiness Gates); every other kind gets Name and Age, as a CRD without
printer columns does. Cells are computed as Kubernetes' printers compute them, and durations
are written as ``k8s.io/apimachinery/pkg/util/duration.HumanDuration`` writes them.
What it must never do: change an object; I/O; know anything beyond how a kind is printed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from usher.local.kube_emulator.resources import ResourceType
from usher.local.kube_emulator.wire import JsonObj

NAME_DOC = "Name must be unique within a namespace."
AGE_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created."
)

COMPLETIONS_DOC = "The desired number of successfully finished pods the job should be run with."
RESTARTS_DOC = (
    "The number of times the containers in this pod have been restarted and when the last "
    "container in this pod has restarted."
)


@dataclass(frozen=True)
class Column:
    name: str
    description: str
    priority: int = 0
    format: str = ""

    def definition(self) -> JsonObj:
        return {"name": self.name, "type": "string", "format": self.format,
                "description": self.description, "priority": self.priority}  # fmt: skip


Printer = Callable[[JsonObj, datetime], list[Any]]


def human_duration(seconds: float) -> str:
    """``HumanDuration``: 45s, 3m20s, 15m, 5h30m, 36h, 3d4h, 20d, 1y30d."""
    if seconds < -1:
        return "<invalid>"
    s = max(int(seconds), 0)
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d" if hours % 24 == 0 else f"{days}d{hours % 24}h"
    if days < 365 * 2:
        return f"{days}d"
    if days < 365 * 8:
        return f"{days // 365}y" if days % 365 == 0 else f"{days // 365}y{days % 365}d"
    return f"{days // 365}y"


def parse_time(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def age(obj: JsonObj, now: datetime) -> str:
    """The AGE cell: ``<unknown>`` without a creation time."""
    created = parse_time(obj["metadata"].get("creationTimestamp"))
    return "<unknown>" if created is None else human_duration((now - created).total_seconds())


def _conditions(obj: JsonObj) -> dict[str, str]:
    status = obj.get("status") or {}
    return {str(c.get("type")): str(c.get("status")) for c in status.get("conditions") or []}


def job_status(job: JsonObj) -> str:
    conditions = _conditions(job)
    for kind, shown in (("Complete", "Complete"), ("Failed", "Failed")):
        if conditions.get(kind) == "True":
            return shown
    if job["metadata"].get("deletionTimestamp"):
        return "Terminating"
    for kind in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if conditions.get(kind) == "True":
            return kind
    return "Running"


def job_completions(job: JsonObj) -> str:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        return f"{succeeded}/{spec['completions']}"
    parallelism = int(spec.get("parallelism") or 0)
    return f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"


def job_duration(job: JsonObj, now: datetime) -> str:
    status = job.get("status") or {}
    start = parse_time(status.get("startTime"))
    if start is None:
        return ""
    end = parse_time(status.get("completionTime")) or now
    return human_duration((end - start).total_seconds())


def _template_containers(job: JsonObj) -> list[JsonObj]:
    spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [c for c in spec.get("containers") or [] if isinstance(c, dict)]


def _selector(job: JsonObj) -> str:
    labels = ((job.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"


def print_job(job: JsonObj, now: datetime) -> list[Any]:
    containers = _template_containers(job)
    return [
        job["metadata"]["name"],
        job_status(job),
        job_completions(job),
        job_duration(job, now),
        age(job, now),
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
        _selector(job),
    ]


def pod_status_text(pod: JsonObj) -> str:
    """The STATUS cell: a terminated or waiting container's reason, else the phase."""
    status = pod.get("status") or {}
    reason = str(status.get("reason") or status.get("phase") or "Unknown")
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        for key in ("waiting", "terminated"):
            if state.get(key, {}).get("reason"):
                reason = str(state[key]["reason"])
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    return reason


def print_pod(pod: JsonObj, now: datetime) -> list[Any]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        pod_status_text(pod),
        str(restarts),
        age(pod, now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


def print_default(obj: JsonObj, now: datetime) -> list[Any]:
    return [obj["metadata"]["name"], age(obj, now)]


def print_queue(queue: JsonObj, now: datetime) -> list[Any]:
    """A Queue: the default cells, and (``-o wide``) its hold (R14/R15) or ``<none>``."""
    hold = (queue.get("status") or {}).get("hold")
    return [*print_default(queue, now), hold or "<none>"]


def print_namespace(namespace: JsonObj, now: datetime) -> list[Any]:
    phase = (namespace.get("status") or {}).get("phase", "")
    return [namespace["metadata"]["name"], phase, age(namespace, now)]


DEFAULT_COLUMNS = (Column("Name", NAME_DOC, format="name"), Column("Age", AGE_DOC))
HOLD_DOC = "The hold or drain of a node on the queue's path: node, who, when and why."
PRINTERS: dict[tuple[str, str], tuple[tuple[Column, ...], Printer]] = {
    ("scheduling.x-k8s.io", "queues"): (
        (*DEFAULT_COLUMNS, Column("Hold", HOLD_DOC, 1)),
        print_queue,
    ),
    ("", "namespaces"): (
        (
            Column("Name", NAME_DOC, format="name"),
            Column("Status", "The status of the namespace"),
            Column("Age", AGE_DOC),
        ),
        print_namespace,
    ),
    ("batch", "jobs"): (
        (
            Column("Name", NAME_DOC, format="name"),
            Column("Status", "Status of the job."),
            Column("Completions", COMPLETIONS_DOC),
            Column("Duration", "Time required to complete the job."),
            Column("Age", AGE_DOC),
            Column("Containers", "Names of each container in the template.", 1),
            Column("Images", "Images referenced by each container in the template.", 1),
            Column("Selector", "A label query over pods that should match the pod count.", 1),
        ),
        print_job,
    ),
    ("", "pods"): (
        (
            Column("Name", NAME_DOC, format="name"),
            Column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
            Column("Status", "The aggregate status of the containers in this pod."),
            Column("Restarts", RESTARTS_DOC),
            Column("Age", AGE_DOC),
            Column("IP", "IP address allocated to the pod.", 1),
            Column("Node", "Name of the Node this pod is assigned to.", 1),
            Column("Nominated Node", "Name of the node the pod is nominated for.", 1),
            Column("Readiness Gates", "Pod readiness gates.", 1),
        ),
        print_pod,
    ),
}


def table(rt: ResourceType, items: list[JsonObj], metadata: JsonObj, now: datetime) -> JsonObj:
    """A ``meta.k8s.io/v1`` Table of ``items`` with the kind's columns."""
    columns, printer = PRINTERS.get(rt.storage_key, (DEFAULT_COLUMNS, print_default))
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": [c.definition() for c in columns],
        "rows": [
            {
                "cells": printer(o, now),
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": o["metadata"],
                },
            }
            for o in items
        ],
    }
