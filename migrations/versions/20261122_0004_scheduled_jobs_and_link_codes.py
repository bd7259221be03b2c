"""scheduled jobs and link codes

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 05:51:39.659285
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import bot.store.columns

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "link_codes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("code_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("issued_on", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("expires_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.Column("used_at", bot.store.columns.UTCDateTime(timezone=True), nullable=True),
        sa.Column("used_by", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
        sa.Column("created_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_link_codes_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_link_codes")),
        sa.UniqueConstraint("code_hash", name=op.f("uq_link_codes_code_hash")),
    )
    with op.batch_alter_table("link_codes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_link_codes_user_id"), ["user_id"], unique=False)

    op.create_table(
        "scheduled_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_user_id", sa.Integer(), nullable=False),
        sa.Column("conversation_id", sa.Integer(), nullable=False),
        sa.Column("chat_type", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("trigger_kind", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("trigger_expr", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("timezone", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("anchor_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.Column("description", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("pause_reason", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("next_run_at", bot.store.columns.UTCDateTime(timezone=True), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("running_since", bot.store.columns.UTCDateTime(timezone=True), nullable=True),
        sa.Column("last_run_at", bot.store.columns.UTCDateTime(timezone=True), nullable=True),
        sa.Column("last_status", sqlmodel.sql.sqltypes.AutoString(length=24), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_run_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("run_count", sa.Integer(), nullable=False),
        sa.Column("failure_count", sa.Integer(), nullable=False),
        sa.Column("missed_count", sa.Integer(), nullable=False),
        sa.Column("pending_replies", sa.JSON(), nullable=True),
        sa.Column("retry_at", bot.store.columns.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_scheduled_jobs_conversation_id_conversations"),
        ),
        sa.ForeignKeyConstraint(
            ["owner_user_id"], ["users.id"], name=op.f("fk_scheduled_jobs_owner_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scheduled_jobs")),
    )
    with op.batch_alter_table("scheduled_jobs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_scheduled_jobs_conversation_id"), ["conversation_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_scheduled_jobs_owner_user_id"), ["owner_user_id"], unique=False
        )
        batch_op.create_index(
            "ix_scheduled_jobs_state_next_run_at", ["state", "next_run_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("scheduled_jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_scheduled_jobs_state_next_run_at")
        batch_op.drop_index(batch_op.f("ix_scheduled_jobs_owner_user_id"))
        batch_op.drop_index(batch_op.f("ix_scheduled_jobs_conversation_id"))

    op.drop_table("scheduled_jobs")
    with op.batch_alter_table("link_codes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_link_codes_user_id"))

    op.drop_table("link_codes")
