"""preemption holds: allocation states held/preempting, preemptor, preempted_at/_seq

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_OLD_STATES = "state IN ('reserved', 'admitted', 'released')"
_NEW_STATES = "state IN ('reserved', 'admitted', 'held', 'preempting', 'released')"


def upgrade() -> None:
    op.add_column("allocations", sa.Column("preemptor", sa.Text(), nullable=True))
    op.add_column(
        "allocations", sa.Column("preempted_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("allocations", sa.Column("preempted_seq", sa.BigInteger(), nullable=True))
    op.add_column("allocations", sa.Column("request_id", sa.Text(), nullable=True))
    op.create_index(op.f("ix_allocations_request_id"), "allocations", ["request_id"], unique=False)
    op.drop_constraint(op.f("ck_allocations_state_known"), "allocations", type_="check")
    op.create_check_constraint(op.f("ck_allocations_state_known"), "allocations", _NEW_STATES)
    op.create_index(
        "ix_allocations_preempting_preemptor",
        "allocations",
        ["preemptor"],
        unique=False,
        postgresql_where=sa.text("state = 'preempting'"),
    )


def downgrade() -> None:
    # Map the new states onto the old ones without changing what counts on the tree: a victim
    # being preempted no longer counts (released, cause Preempted, at its preemption time); a
    # hold counts (admitted, from when it was reserved).
    op.execute(
        "UPDATE allocations SET state = 'released', release_cause = 'Preempted', "
        "released_at = coalesce(released_at, preempted_at) WHERE state = 'preempting'"
    )
    op.execute(
        "UPDATE allocations SET state = 'admitted', admitted_at = coalesce(admitted_at, "
        "reserved_at) WHERE state = 'held'"
    )
    op.drop_index(
        "ix_allocations_preempting_preemptor",
        table_name="allocations",
        postgresql_where=sa.text("state = 'preempting'"),
    )
    op.drop_constraint(op.f("ck_allocations_state_known"), "allocations", type_="check")
    op.create_check_constraint(op.f("ck_allocations_state_known"), "allocations", _OLD_STATES)
    op.drop_index(op.f("ix_allocations_request_id"), table_name="allocations")
    op.drop_column("allocations", "request_id")
    op.drop_column("allocations", "preempted_seq")
    op.drop_column("allocations", "preempted_at")
    op.drop_column("allocations", "preemptor")
