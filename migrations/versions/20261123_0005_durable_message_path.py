"""durable inbox, outbox, budget reservations, fire leases

`processed_events` (dedupe only) becomes `inbox` (the message queue): the
delivery ids already seen are copied over as finished items, so a redelivery
after the upgrade is still recognised.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 13:59:04.824504
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import bot.store.columns

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "inbox",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("platform", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("event_id", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("conversation_key", sqlmodel.sql.sqltypes.AutoString(length=400), nullable=False),
        sa.Column("source", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=True),
        sa.Column("deliver", sa.Boolean(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("lease_owner", sqlmodel.sql.sqltypes.AutoString(length=120), nullable=True),
        sa.Column("lease_expires_at", bot.store.columns.UTCDateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.Column("finished_at", bot.store.columns.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_inbox")),
        sa.UniqueConstraint("platform", "event_id", name=op.f("uq_inbox_platform_event_id")),
    )
    with op.batch_alter_table("inbox", schema=None) as batch_op:
        batch_op.create_index(
            "ix_inbox_conversation_key_id", ["conversation_key", "id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_inbox_created_at"), ["created_at"], unique=False)
        batch_op.create_index(
            "ix_inbox_state_lease_expires_at", ["state", "lease_expires_at"], unique=False
        )

    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("inbox_id", sa.Integer(), nullable=True),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("platform", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("channel_id", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("thread_id", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
        sa.Column(
            "reply_to_message_id", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True
        ),
        sa.Column("server_id", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("private", sa.Boolean(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("part_ids", sa.JSON(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sqlmodel.sql.sqltypes.AutoString(length=120), nullable=True),
        sa.Column("lease_expires_at", bot.store.columns.UTCDateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.Column("sent_at", bot.store.columns.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
    )
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_outbox_inbox_id"), ["inbox_id"], unique=False)
        batch_op.create_index(
            "ix_outbox_state_lease_expires_at", ["state", "lease_expires_at"], unique=False
        )

    op.execute(
        "INSERT INTO inbox (platform, event_id, conversation_key, source, state, deliver,"
        " attempts, created_at, finished_at)"
        " SELECT platform, event_id, '', 'user',"
        " CASE WHEN status = 'received' THEN 'failed' ELSE status END,"
        " true, 1, created_at, COALESCE(finished_at, created_at) FROM processed_events"
    )
    with op.batch_alter_table("processed_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_processed_events_created_at"))

    op.drop_table("processed_events")
    with op.batch_alter_table("budgets", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("reserved", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("reserved_until", bot.store.columns.UTCDateTime(timezone=True), nullable=True)
        )

    with op.batch_alter_table("scheduled_jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("fire_at", bot.store.columns.UTCDateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column("lease_owner", sqlmodel.sql.sqltypes.AutoString(length=120), nullable=True)
        )
        batch_op.add_column(
            sa.Column(
                "lease_expires_at", bot.store.columns.UTCDateTime(timezone=True), nullable=True
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("scheduled_jobs", schema=None) as batch_op:
        batch_op.drop_column("lease_expires_at")
        batch_op.drop_column("lease_owner")
        batch_op.drop_column("fire_at")

    with op.batch_alter_table("budgets", schema=None) as batch_op:
        batch_op.drop_column("reserved_until")
        batch_op.drop_column("reserved")

    op.create_table(
        "processed_events",
        sa.Column("id", sa.INTEGER(), nullable=False),
        sa.Column("platform", sa.VARCHAR(length=32), nullable=False),
        sa.Column("event_id", sa.VARCHAR(length=200), nullable=False),
        sa.Column("status", sa.VARCHAR(length=16), nullable=False),
        sa.Column("created_at", sa.DATETIME(), nullable=False),
        sa.Column("finished_at", sa.DATETIME(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_processed_events")),
        sa.UniqueConstraint(
            "platform", "event_id", name=op.f("uq_processed_events_platform_event_id")
        ),
    )
    with op.batch_alter_table("processed_events", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_processed_events_created_at"), ["created_at"], unique=False
        )

    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_index("ix_outbox_state_lease_expires_at")
        batch_op.drop_index(batch_op.f("ix_outbox_inbox_id"))

    op.drop_table("outbox")
    with op.batch_alter_table("inbox", schema=None) as batch_op:
        batch_op.drop_index("ix_inbox_state_lease_expires_at")
        batch_op.drop_index(batch_op.f("ix_inbox_created_at"))
        batch_op.drop_index("ix_inbox_conversation_key_id")

    op.drop_table("inbox")
