"""initial ledger schema

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "allocations",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("workload", sa.Text(), nullable=False),
        sa.Column("zone", sa.Text(), nullable=False),
        sa.Column("quota_path", sa.Text(), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("requests", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("priority", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column(
            "reserved_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("admitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("release_cause", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "state IN ('reserved', 'admitted', 'released')", name=op.f("ck_allocations_state_known")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_allocations")),
    )
    op.create_index(
        "uq_allocations_live_workload",
        "allocations",
        ["workload"],
        unique=True,
        postgresql_where=sa.text("state <> 'released'"),
    )
    op.create_table(
        "consumer_offsets",
        sa.Column("consumer", sa.Text(), nullable=False),
        sa.Column("stream", sa.Text(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("consumer", name=op.f("pk_consumer_offsets")),
    )
    op.create_table(
        "decision_audit",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("stream_seq", sa.BigInteger(), nullable=True),
        sa.Column("workload", sa.Text(), nullable=False),
        sa.Column("decision", sa.Text(), nullable=False),
        sa.Column("quota_path", sa.Text(), nullable=True),
        sa.Column("reason", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "recorded_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decision_audit")),
        sa.UniqueConstraint("event_id", name=op.f("uq_decision_audit_event_id")),
    )
    op.create_index(
        op.f("ix_decision_audit_workload"), "decision_audit", ["workload"], unique=False
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
        sa.UniqueConstraint("event_id", name=op.f("uq_outbox_event_id")),
    )
    op.create_index(op.f("ix_outbox_published_at"), "outbox", ["published_at"], unique=False)
    op.create_table(
        "quota_nodes",
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("parent_path", sa.Text(), nullable=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column(
            "attributes",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.Column("tree_version", sa.BigInteger(), nullable=False),
        sa.Column("present", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.PrimaryKeyConstraint("path", name=op.f("pk_quota_nodes")),
    )
    op.create_table(
        "quota_usage",
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("min", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("max", sa.BigInteger(), nullable=True),
        sa.Column("used", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint("used >= 0", name=op.f("ck_quota_usage_used_not_negative")),
        sa.ForeignKeyConstraint(
            ["path"],
            ["quota_nodes.path"],
            name=op.f("fk_quota_usage_path_quota_nodes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("path", "resource", name=op.f("pk_quota_usage")),
    )


def downgrade() -> None:
    op.drop_table("quota_usage")
    op.drop_table("quota_nodes")
    op.drop_index(op.f("ix_outbox_published_at"), table_name="outbox")
    op.drop_table("outbox")
    op.drop_index(op.f("ix_decision_audit_workload"), table_name="decision_audit")
    op.drop_table("decision_audit")
    op.drop_table("consumer_offsets")
    op.drop_index(
        "uq_allocations_live_workload",
        table_name="allocations",
        postgresql_where=sa.text("state <> 'released'"),
    )
    op.drop_table("allocations")
