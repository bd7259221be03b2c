"""pending inbox index

A partial index on the inbox's waiting messages by conversation, for the claim
of what waits for a conversation: it searched the messages of every
conversation in the waiting state (or of the conversation in every state).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28 05:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = sa.text("state = 'pending'")


def upgrade() -> None:
    with op.batch_alter_table("inbox", schema=None) as batch_op:
        batch_op.create_index(
            "ix_inbox_pending_conversation_key",
            ["conversation_key", "state"],
            unique=False,
            sqlite_where=PENDING,
            postgresql_where=PENDING,
        )


def downgrade() -> None:
    with op.batch_alter_table("inbox", schema=None) as batch_op:
        batch_op.drop_index("ix_inbox_pending_conversation_key")
