"""media usage and documents stored for their sender

What people send costs more than tokens: the seconds of audio transcribed and
the characters of documents read are recorded on the run (`runs`), and a
document too long for the context is stored in `tool_results` for the user
who sent it (`user_id`), readable with `get_tool_result` by them (and admins)
whichever run answers the message.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07 15:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("audio_seconds", sa.Float(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("document_chars", sa.BigInteger(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("tool_results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("user_id", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tool_results", schema=None) as batch_op:
        batch_op.drop_column("user_id")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("document_chars")
        batch_op.drop_column("audio_seconds")
