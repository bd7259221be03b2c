"""budget holds

Tokens held for LLM calls in flight become rows of their own, one per call,
owned by a run and an instance (`budget_holds`), instead of one shared counter
on the budget (`reserved`, `reserved_until`), which a dead process's
reservation kept full and every later reservation kept alive. `awaited_until`:
a message waits for the user's holds to be released until then.

A counter left by the old version is dropped: the calls it held were made by
a process that has stopped.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import bot.store.columns

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "budget_holds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("instance", sqlmodel.sql.sqltypes.AutoString(length=120), nullable=False),
        sa.Column("conversation_key", sqlmodel.sql.sqltypes.AutoString(length=400), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.Column("created_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_budget_holds_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budget_holds")),
    )
    with op.batch_alter_table("budget_holds", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_budget_holds_user_id"), ["user_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_budget_holds_run_id"), ["run_id"], unique=False)

    with op.batch_alter_table("budgets", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("awaited_until", bot.store.columns.UTCDateTime(timezone=True), nullable=True)
        )
        batch_op.drop_column("reserved_until")
        batch_op.drop_column("reserved")


def downgrade() -> None:
    with op.batch_alter_table("budgets", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("reserved", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("reserved_until", bot.store.columns.UTCDateTime(timezone=True), nullable=True)
        )
        batch_op.drop_column("awaited_until")

    with op.batch_alter_table("budget_holds", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_budget_holds_run_id"))
        batch_op.drop_index(batch_op.f("ix_budget_holds_user_id"))
    op.drop_table("budget_holds")
