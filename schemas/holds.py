"""Holds and drains of a quota node: an operator's order on the log, with who and why.

What it does: ``NodeHeld`` (a node and everything below it admits nothing new; with
``mode="Drain"`` its running work is also preempted once ``grace_seconds`` have passed) and
``NodeResumed`` (lifts the order on that node), docs/admission-rules.md R14/R15. The ledger
records them through its outbox (it owns every decision that moves quota, R9); ``HoldRequest``
is how an operator asks it (``<prefix>.ledger.hold``), answered by ``HoldReply``.
What it must never do: hold logic (the core decides what a hold means) or change a tag.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from schemas.ids import Millis, QuotaPath, RequestId

HoldMode = Literal["Hold", "Drain"]
HOLD_MODES: Final[tuple[HoldMode, ...]] = ("Hold", "Drain")


class _HoldEvent(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of the hold events; the ``type`` tag selects the concrete struct."""


class NodeHeld(_HoldEvent, frozen=True, kw_only=True, tag="hold.placed.v1"):
    """``node`` (a quota path) admits nothing new below it from ``at_ms`` on (R14); a drain
    also preempts the running work below it once ``grace_seconds`` have passed (R15)."""

    node: QuotaPath
    mode: HoldMode
    grace_seconds: int = 0
    """Drain only: seconds between the order and the preemption of the running work."""
    by: str
    """Who ordered it, as the ledger established it (never what the requester claimed)."""
    reason: str = ""
    at_ms: Millis
    """When the order took effect (the drain's grace counts from it)."""


class NodeResumed(_HoldEvent, frozen=True, kw_only=True, tag="hold.lifted.v1"):
    """The hold or drain ordered on ``node`` is lifted: its queues admit again (R14)."""

    node: QuotaPath
    by: str
    reason: str = ""
    at_ms: Millis


HoldEvent = NodeHeld | NodeResumed

HOLD_EVENT_TYPES: tuple[type[_HoldEvent], ...] = (NodeHeld, NodeResumed)

HoldAction = Literal["Hold", "Drain", "Resume"]


class HoldRequest(msgspec.Struct, frozen=True, kw_only=True, tag="ledger.hold.v1"):
    """An operator asks the ledger to hold, drain or resume a node (R14, R15), on
    ``<prefix>.ledger.hold.<identity>``: the identity is who asks.

    ``target`` is a quota path (``root/research``; ``usher hold`` resolves a node or queue
    name first); the ledger judges it against the tree in force and refuses what names
    nothing, naming the field.
    """

    request_id: RequestId
    action: HoldAction
    target: str
    reason: str = ""
    grace_seconds: int | None = None
    """Drain only; None: the node's ``usher.io/drain-grace-seconds`` (inherited), else 0."""


class HoldReply(msgspec.Struct, frozen=True, kw_only=True, tag="ledger.hold-reply.v1"):
    """The ledger's answer: the event it recorded, or why it refused (``field`` named)."""

    request_id: RequestId
    recorded: NodeHeld | NodeResumed | None = None
    field: str | None = None
    """The request field that was refused (``target``, ``grace_seconds``...)."""
    message: str = ""
