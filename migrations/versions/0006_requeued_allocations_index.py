"""allocations: a partial index of the allocations requeued for readiness (R10)

A workload requeued for not becoming ready takes only free room on its later attempts unless
its tree allows it to preempt: the ledger looks up a preemptor's requeued allocations when
it re-checks a reclaim. The partial index holds only those rows (``release_cause`` is
``Requeued`` from the moment the requeue's stop begins).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_allocations_requeued_workload",
        "allocations",
        ["workload"],
        unique=False,
        postgresql_where=sa.text("release_cause = 'Requeued'"),
    )


def downgrade() -> None:
    op.drop_index("ix_allocations_requeued_workload", table_name="allocations")
