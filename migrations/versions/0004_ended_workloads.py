"""ended workloads: the log sequence at which the ledger saw each workload finish or go

A reservation proposed on a view of the log older than that end is refused (R8 in
docs/admission-rules.md); without it, a dequeuer that had not yet read a deletion could be
granted quota for a workload nobody will ever release.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ended_workloads",
        sa.Column("workload", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("cause", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("workload", name=op.f("pk_ended_workloads")),
    )


def downgrade() -> None:
    op.drop_table("ended_workloads")
