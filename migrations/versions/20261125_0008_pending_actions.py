"""pending actions

Consequential tool calls held for the requester's confirmation, and the
buttons of a stored reply (the confirmation prompt's Confirm / Cancel).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 15:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import bot.store.columns

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.add_column(sa.Column("buttons", sa.JSON(), nullable=True))
    op.create_table(
        "pending_actions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("code", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("role", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("conversation_id", sa.Integer(), nullable=False),
        sa.Column("conversation_key", sqlmodel.sql.sqltypes.AutoString(length=450), nullable=False),
        sa.Column("platform", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("chat_type", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("tool_name", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("sources", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("status", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("decided_by", sa.Integer(), nullable=True),
        sa.Column("created_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.Column("decided_at", bot.store.columns.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_pending_actions_conversation_id_conversations"),
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_pending_actions_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pending_actions")),
        sa.UniqueConstraint("code", name=op.f("uq_pending_actions_code")),
    )
    with op.batch_alter_table("pending_actions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_pending_actions_user_id"), ["user_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_pending_actions_status"), ["status"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_pending_actions_expires_at"), ["expires_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("pending_actions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_pending_actions_expires_at"))
        batch_op.drop_index(batch_op.f("ix_pending_actions_status"))
        batch_op.drop_index(batch_op.f("ix_pending_actions_user_id"))
    op.drop_table("pending_actions")
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_column("buttons")
