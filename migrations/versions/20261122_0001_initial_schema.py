"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 05:28:24.532591
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import bot.store.columns

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=400), nullable=False),
        sa.Column("platform", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("channel_id", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("thread_id", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("server_id", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
        sa.Column("persona_name", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=True),
        sa.Column("history_start_id", sa.Integer(), nullable=True),
        sa.Column("created_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversations")),
        sa.UniqueConstraint("key", name=op.f("uq_conversations_key")),
    )
    op.create_table(
        "delivery_failures",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("platform", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("conversation_key", sqlmodel.sql.sqltypes.AutoString(length=400), nullable=False),
        sa.Column("channel_id", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("thread_id", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_delivery_failures")),
    )
    with op.batch_alter_table("delivery_failures", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_delivery_failures_conversation_key"), ["conversation_key"], unique=False
        )

    op.create_table(
        "personas",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("platform", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("server_id", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=True),
        sa.Column("max_tokens", sa.Integer(), nullable=True),
        sa.Column("tool_modules", sa.JSON(), nullable=True),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("source_path", sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
        sa.Column("content_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("updated_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_personas")),
        sa.UniqueConstraint("name", name=op.f("uq_personas_name")),
    )
    op.create_table(
        "processed_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("platform", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("event_id", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("status", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("created_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.Column("finished_at", bot.store.columns.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_processed_events")),
        sa.UniqueConstraint(
            "platform", "event_id", name=op.f("uq_processed_events_platform_event_id")
        ),
    )
    with op.batch_alter_table("processed_events", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_processed_events_created_at"), ["created_at"], unique=False
        )

    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("display_name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
        sa.Column("role", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("created_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("actor_user_id", sa.Integer(), nullable=True),
        sa.Column("actor", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("action", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("target", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
        sa.Column("outcome", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("where", sqlmodel.sql.sqltypes.AutoString(length=400), nullable=True),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.Column("created_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["actor_user_id"], ["users.id"], name=op.f("fk_audit_log_actor_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_audit_log_created_at"), ["created_at"], unique=False)

    op.create_table(
        "budgets",
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("period", sqlmodel.sql.sqltypes.AutoString(length=7), nullable=False),
        sa.Column("used", sa.BigInteger(), nullable=False),
        sa.Column("overage", sa.BigInteger(), nullable=False),
        sa.Column("granted", sa.BigInteger(), nullable=False),
        sa.Column("limit_mode", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("limit_tokens", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_budgets_user_id_users")),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_budgets")),
    )
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("conversation_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("role", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column(
            "platform_message_id", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True
        ),
        sa.Column("tool_use_id", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
        sa.Column("tool_name", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
        sa.Column("data", sa.JSON(), nullable=True),
        sa.Column("is_error", sa.Boolean(), nullable=False),
        sa.Column("silent", sa.Boolean(), nullable=False),
        sa.Column("created_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_messages_conversation_id_conversations"),
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_messages_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_messages")),
    )
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.create_index(
            "ix_messages_conversation_id_id", ["conversation_id", "id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_messages_run_id"), ["run_id"], unique=False)

    op.create_table(
        "platform_links",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("platform", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("platform_user_id", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("username", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
        sa.Column("display_name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
        sa.Column("created_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_platform_links_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_platform_links")),
        sa.UniqueConstraint(
            "platform", "platform_user_id", name=op.f("uq_platform_links_platform_platform_user_id")
        ),
    )
    with op.batch_alter_table("platform_links", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_platform_links_user_id"), ["user_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_platform_links_username"), ["username"], unique=False)

    op.create_table(
        "runs",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("conversation_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("source", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("status", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("persona_name", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=True),
        sa.Column("iterations", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.Column("finished_at", bot.store.columns.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_runs_conversation_id_conversations"),
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_runs_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_runs_conversation_id"), ["conversation_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_runs_started_at"), ["started_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_user_id"), ["user_id"], unique=False)

    op.create_table(
        "token_logs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("conversation_id", sa.Integer(), nullable=True),
        sa.Column("platform", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("purpose", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("cache_read_tokens", sa.Integer(), nullable=False),
        sa.Column("cache_write_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("created_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_token_logs_conversation_id_conversations"),
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_token_logs_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_token_logs")),
    )
    with op.batch_alter_table("token_logs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_token_logs_created_at"), ["created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_token_logs_run_id"), ["run_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_token_logs_user_id"), ["user_id"], unique=False)

    op.create_table(
        "tool_errors",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("conversation_id", sa.Integer(), nullable=True),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("tool_name", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("arguments", sa.JSON(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("created_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_tool_errors_conversation_id_conversations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tool_errors")),
    )
    with op.batch_alter_table("tool_errors", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_tool_errors_conversation_id"), ["conversation_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("tool_errors", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tool_errors_conversation_id"))

    op.drop_table("tool_errors")
    with op.batch_alter_table("token_logs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_token_logs_user_id"))
        batch_op.drop_index(batch_op.f("ix_token_logs_run_id"))
        batch_op.drop_index(batch_op.f("ix_token_logs_created_at"))

    op.drop_table("token_logs")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_user_id"))
        batch_op.drop_index(batch_op.f("ix_runs_started_at"))
        batch_op.drop_index(batch_op.f("ix_runs_conversation_id"))

    op.drop_table("runs")
    with op.batch_alter_table("platform_links", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_platform_links_username"))
        batch_op.drop_index(batch_op.f("ix_platform_links_user_id"))

    op.drop_table("platform_links")
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_messages_run_id"))
        batch_op.drop_index("ix_messages_conversation_id_id")

    op.drop_table("messages")
    op.drop_table("budgets")
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_log_created_at"))

    op.drop_table("audit_log")
    op.drop_table("users")
    with op.batch_alter_table("processed_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_processed_events_created_at"))

    op.drop_table("processed_events")
    op.drop_table("personas")
    with op.batch_alter_table("delivery_failures", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_delivery_failures_conversation_key"))

    op.drop_table("delivery_failures")
    op.drop_table("conversations")
