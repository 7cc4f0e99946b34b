"""The decisions people care about, told as Kubernetes Events on their job.

What it does: ``decision_event`` turns a decision the watcher carried out into a core/v1 Event
on the job object, so that ``kubectl describe job`` (and ``kubectl get events``) shows it as it
shows Kueue's: ``Admitted`` (where, and after how long a wait), ``Preempted`` (for whom, why),
``Requeued`` (not ready in time), ``Retried`` (the next attempt's name and its memory),
``GaveUp`` (no attempt left, or the memory cap reached), ``Inadmissible`` (it can never fit as
things stand) and ``BudgetExhausted`` (a ``Pending`` the watcher reads off its fold of the log:
the job waits because a budget on its path is spent, B1; ``services.watcher.waits``).
``core_event`` builds any Event the watcher records (the quota tree's rejection too);
``cloud_event`` wraps a job's Event as a CloudEvent for a webhook
(``services.watcher.deliveries``).
What it must never do: decide anything, say more than the decision says, or hold up the
carrying out: recording is best effort (``services.watcher.carry_out`` logs a refusal).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from schemas import Admitted, Inadmissible, Pending, Preempted, Requeued, Retried
from usher.core.history.estimate import span

EVENT_COMPONENT: Final = "usher-watcher"
"""The component every Event of the watcher is reported by."""
MAX_MESSAGE: Final = 1024
"""Kubernetes keeps an Event's message to 1 KiB; longer is cut with ``...``."""

Told = Admitted | Preempted | Requeued | Retried | Inadmissible | Pending
"""The decisions that become Events (a ``Pending`` only for a spent budget)."""


def core_event(
    involved: dict[str, Any],
    *,
    kind: str,
    reason: str,
    message: str,
    now: datetime,
    name: str | None = None,
) -> dict[str, Any]:
    """A core/v1 Event about ``involved`` (apiVersion, kind, namespace, name, uid), as a
    controller's event recorder writes one; ``kind`` is ``Normal`` or ``Warning``. Named
    ``name`` when given (a second create is then refused: told once), else generated."""
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
    naming = {"name": name} if name is not None else {"generateName": f"{involved['name']}."}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {**naming, "namespace": involved["namespace"]},
        "involvedObject": involved,
        "type": kind,
        "reason": reason,
        "message": text,
        "source": {"component": EVENT_COMPONENT},
        "reportingComponent": EVENT_COMPONENT,
        "reportingInstance": EVENT_COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def cloud_event(event: dict[str, Any], decision: Told, event_id: str) -> dict[str, Any]:
    """The CloudEvent (1.0, structured JSON) of a job ``event`` this module built, for a
    webhook: ``type`` is ``io.usher.job.<reason in lower case>``, ``subject`` the job, ``data``
    the Event's words and the decision itself (its wire form); ``event_id`` is stable across
    redeliveries (the decision's place on the log), so a receiver can drop a duplicate."""
    involved = event["involvedObject"]
    return {
        "specversion": "1.0",
        "id": event_id,
        "source": EVENT_COMPONENT,
        "type": f"io.usher.job.{event['reason'].lower()}",
        "subject": decision.workload,
        "time": event["firstTimestamp"],
        "datacontenttype": "application/json",
        "data": {
            "job": decision.workload,
            "kind": involved["kind"],
            "apiVersion": involved["apiVersion"],
            "type": event["type"],
            "reason": event["reason"],
            "message": event["message"],
            "decision": msgspec.to_builtins(decision),
        },
    }


def involved_object(obj: dict[str, Any]) -> dict[str, Any]:
    """What an Event names of ``obj``: apiVersion, kind, namespace, name and uid."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion", ""),
        "kind": obj.get("kind", ""),
        "namespace": meta.get("namespace", "default"),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
    }


def decision_event(
    decision: Told, obj: dict[str, Any], now: datetime, name: str | None = None
) -> dict[str, Any]:
    """The Event telling ``decision`` on the job ``obj`` (the workload it names); ``name``:
    see ``core_event``."""
    kind, reason, message = _told(decision, obj, now)
    involved = involved_object(obj)
    return core_event(involved, kind=kind, reason=reason, message=message, now=now, name=name)


def _told(decision: Told, obj: dict[str, Any], now: datetime) -> tuple[str, str, str]:
    """(type, reason, message) of the Event for ``decision``."""
    match decision:
        case Admitted():
            where = f"{decision.quota} (queue {decision.queue}, zone {decision.zone})"
            waited = _waited(obj, now)
            said = f"; {decision.reason.message}" if decision.reason is not None else ""
            return "Normal", "Admitted", f"Admitted by Usher into {where}{waited}{said}"
        case Preempted():
            text = f"Preempted by Usher for {decision.preemptor}: {decision.reason.message}"
            return "Warning", "Preempted", text
        case Requeued():
            last = " (its last attempt: inadmissible from now on)" * (
                decision.retry_after_ms is None
            )
            text = (
                f"Requeued by Usher after attempt {decision.attempt} of "
                f"{decision.max_attempts}: {decision.reason.message}{last}"
            )
            return "Warning", "Requeued", text
        case Retried() if decision.job is not None:
            # The reason says what failed and, after an OOM kill, each container's new memory.
            text = (
                f"Attempt {decision.attempt} {decision.cause}: retried as {decision.job} "
                f"({decision.attempt} of {decision.limit} retries): {decision.reason.message}"
            )
            return "Warning", "Retried", text
        case Retried():
            text = (
                f"Attempt {decision.attempt} {decision.cause}, not retried: "
                f"{decision.reason.message}"
            )
            return "Warning", "GaveUp", text
        case Inadmissible():
            return "Warning", "Inadmissible", f"Usher: {decision.reason.message}"
        case Pending():
            # Only a spent budget's wait is told (services.watcher.waits): its code is the reason.
            text = f"Waits in queue {decision.queue} for a spent budget: {decision.reason.message}"
            return "Warning", decision.reason.code, text


def _waited(obj: dict[str, Any], now: datetime) -> str:
    """`` after waiting 12m`` from the object's creation, or nothing when unknown."""
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    try:
        since = datetime.fromisoformat(str(created))
    except ValueError:
        return ""
    return f" after waiting {span(max(0, int((now - since).total_seconds() * 1000)))}"
