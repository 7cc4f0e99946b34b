"""The ledger's tables as SQLAlchemy 2 declarative models.

What it does: declares quota nodes and their per-resource limits/usage, allocations with state
and timestamps, the decision audit, consumer offsets and the transactional outbox. Alembic
migrations in ``migrations/`` create exactly these; a test checks they agree.
What it must never do: open connections or hold business rules (the ledger service does).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    LargeBinary,
    MetaData,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from usher.core.rules.arbitration import AllocationState

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ALLOCATION_STATES = tuple(state.value for state in AllocationState)
"""The values ``allocations.state`` may hold: the core's states, their meaning and moves there."""

_STATE_CHECK = f"state IN ({', '.join(repr(state) for state in ALLOCATION_STATES)})"


class Base(DeclarativeBase):
    """Declarative base with stable constraint names (so migrations can name them)."""

    metadata = MetaData(naming_convention=NAMING)


class QuotaNodeRow(Base):
    """One node of the quota tree in force; ``path`` is ``root/...``."""

    __tablename__ = "quota_nodes"

    path: Mapped[str] = mapped_column(Text, primary_key=True)
    parent_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    name: Mapped[str] = mapped_column(Text)
    attributes: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'"))
    tree_version: Mapped[int] = mapped_column(BigInteger)
    """Stream sequence of the QuotaTreeApplied event that last wrote this node."""
    present: Mapped[bool] = mapped_column(server_default=text("true"))
    """False when a newer tree dropped the node while allocations still count on it."""


class QuotaUsageRow(Base):
    """Limits and usage of one resource on one node; the row a reservation locks."""

    __tablename__ = "quota_usage"
    __table_args__ = (CheckConstraint("used >= 0", name="used_not_negative"),)

    path: Mapped[str] = mapped_column(
        Text, ForeignKey("quota_nodes.path", ondelete="CASCADE"), primary_key=True
    )
    resource: Mapped[str] = mapped_column(Text, primary_key=True)
    min: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    max: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    """None: this node does not limit the resource."""
    used: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))


class AllocationRow(Base):
    """Quota held by one workload: admitted (or held, then admitted), then released.

    A victim of a preemption goes admitted -> preempting -> released. A row counts on its path
    from ``reserved_at`` until ``preempted_at`` or ``released_at``; the stamps are taken after the
    path's usage locks, so the history of intervals follows the lock order.
    """

    __tablename__ = "allocations"
    __table_args__ = (
        CheckConstraint(_STATE_CHECK, name="state_known"),
        # At most one live allocation per workload: the database itself refuses a double
        # admission, whatever the number of racing dequeuers.
        Index(
            "uq_allocations_live_workload",
            "workload",
            unique=True,
            postgresql_where=text("state <> 'released'"),
        ),
        # The victims still stopping for a preemptor: looked up when one of them is released.
        Index(
            "ix_allocations_preempting_preemptor",
            "preemptor",
            postgresql_where=text("state = 'preempting'"),
        ),
        # A preemptor's requeues for readiness (R10): looked up when it would reclaim.
        Index(
            "ix_allocations_requeued_workload",
            "workload",
            postgresql_where=text("release_cause = 'Requeued'"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    workload: Mapped[str] = mapped_column(Text)
    zone: Mapped[str] = mapped_column(Text)
    quota_path: Mapped[str] = mapped_column(Text)
    queue: Mapped[str] = mapped_column(Text)
    requests: Mapped[dict[str, Any]] = mapped_column(JSONB)
    priority: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    state: Mapped[str] = mapped_column(String(16))
    reserved_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    admitted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    released_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    release_cause: Mapped[str | None] = mapped_column(Text, nullable=True)
    preemptor: Mapped[str | None] = mapped_column(Text, nullable=True)
    """On a victim: the workload its quota was moved to."""
    preempted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    request_id: Mapped[str | None] = mapped_column(Text, nullable=True, index=True)
    """The reserve request that granted it: a repeat of that request is answered, not granted
    again (even once the allocation was released)."""
    preempted_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    """The log's last sequence when the victim was preempted: an observation of it suspended at
    or below this sequence predates the preemption and releases nothing."""
    """When the victim's usage left the tree (its interval ends here, not at ``released_at``)."""


class DecisionAuditRow(Base):
    """Every decision as recorded on the log, for people's queries and ``usher audit``."""

    __tablename__ = "decision_audit"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(Text, unique=True)
    stream_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    workload: Mapped[str] = mapped_column(Text, index=True)
    decision: Mapped[str] = mapped_column(Text)
    quota_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    reason: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    recorded_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )


class ConsumerOffsetRow(Base):
    """Last stream sequence a consumer applied, written in the same transaction as its rows."""

    __tablename__ = "consumer_offsets"

    consumer: Mapped[str] = mapped_column(Text, primary_key=True)
    stream: Mapped[str] = mapped_column(Text)
    last_seq: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )


class EndedWorkloadRow(Base):
    """A workload the ledger saw finish or be deleted, and at which log sequence (R8).

    A reservation proposed on a view of the log older than that end is refused: it would be
    a grant nobody ever releases. A job created again under the same name is proposed on a
    view that has seen its new observation, after the end, and is granted."""

    __tablename__ = "ended_workloads"

    workload: Mapped[str] = mapped_column(Text, primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    cause: Mapped[str] = mapped_column(Text)


class OutboxRow(Base):
    """A decision to publish; written with the rows it describes, published by the relay."""

    __tablename__ = "outbox"
    __table_args__ = (
        # What the relay reads after every commit: the unpublished rows in id order. Without
        # it PostgreSQL walks the primary key past every row ever published (a cost that grew
        # with the ledger's age: 3.5 ms per read at 40,000 rows, on the admission path).
        Index("ix_outbox_unpublished_id", "id", postgresql_where=text("published_at IS NULL")),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(Text, unique=True)
    subject: Mapped[str] = mapped_column(Text)
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    published_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True, index=True
    )
