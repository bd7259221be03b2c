"""leases and instances

Named leases (conversation runs, compaction, heartbeats, pollers on SQLite) and
the instances registry, for several instances on one database.

Revision ID: 0007
Revises: 0005
Create Date: 2026-11-23 15:11:00.764473
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import bot.store.columns

revision: str = "0007"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "instances",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=120), nullable=False),
        sa.Column("host", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("platforms", sa.JSON(), nullable=True),
        sa.Column("started_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.Column("seen_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instances")),
    )
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_instances_seen_at"), ["seen_at"], unique=False)

    op.create_table(
        "leases",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=450), nullable=False),
        sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(length=120), nullable=False),
        sa.Column("token", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("expires_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("stop_requested_by", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
        sa.Column("acquired_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leases")),
    )
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_leases_expires_at"), ["expires_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_leases_expires_at"))

    op.drop_table("leases")
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_instances_seen_at"))

    op.drop_table("instances")
