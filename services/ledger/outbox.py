"""Outbox rows for the ledger's decisions: deterministic ids, envelopes, subjects.

What it does: turns a decision the store took (``Admitted``, ``Preempted``, ``Released``) into
the ``OutboxMessage`` that announces it: id ``ledger:<action>:<workload>:<allocation id>`` (also
``Nats-Msg-Id``, so a republish after a crash is dropped by the server), an ``Envelope`` from
``usher/ledger`` timed by the store's transaction stamp (the allocation's own times), on
``<p>.decision.<zone>.<action>.<ns>.<name>``; and an operator's hold,
drain or resume (R14/R15) into one on ``<p>.hold.<node>``, id
``ledger:hold:<request id>`` (a retried request is one order).
What it must never do: touch the database or NATS; the store calls it inside its transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

from schemas import (
    DECISION_ACTIONS,
    LEDGER_SOURCE,
    Envelope,
    EventId,
    NodeHeld,
    NodeResumed,
    RequestId,
    Zone,
    encode,
)
from usher.adapters.nats.subjects import Subjects
from usher.adapters.pg.ledger_store import LedgerDecision, OutboxBuilder, OutboxMessage

SOURCE: Final = LEDGER_SOURCE


def event_id(decision: LedgerDecision, allocation_id: int) -> EventId:
    """The decision's id: one per (action, allocation), whatever the number of retries."""
    return EventId(f"ledger:{DECISION_ACTIONS[type(decision)]}:{decision.workload}:{allocation_id}")


def outbox_builder(
    subjects: Subjects, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> OutboxBuilder:
    """The store's ``OutboxBuilder`` for this installation's subjects."""

    def build(
        decision: LedgerDecision, zone: Zone, allocation_id: int, at: datetime | None = None
    ) -> OutboxMessage:
        # The store's stamp, when given: the allocation's interval and the log say the same time.
        when = at if at is not None else clock()
        envelope = Envelope(
            id=event_id(decision, allocation_id), time=when, source=SOURCE, event=decision
        )
        return OutboxMessage(
            event_id=envelope.id,
            subject=subjects.decision_for(decision, zone),
            payload=encode(envelope),
        )

    return build


def hold_outbox(
    subjects: Subjects,
    request_id: RequestId,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Callable[[NodeHeld | NodeResumed], OutboxMessage]:
    """The outbox row recording one operator's order (R14/R15)."""

    def build(event: NodeHeld | NodeResumed) -> OutboxMessage:
        envelope = Envelope(
            id=EventId(f"ledger:hold:{request_id}"), time=clock(), source=SOURCE, event=event
        )
        return OutboxMessage(
            event_id=envelope.id, subject=subjects.hold(event.node), payload=encode(envelope)
        )

    return build


__all__ = ["SOURCE", "event_id", "hold_outbox", "outbox_builder"]
