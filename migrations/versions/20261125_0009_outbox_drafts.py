"""outbox drafts

The platform ids of the messages that showed a reply while it streamed: the
stored reply is edited into them when it is sent (outbox); the messages a run
posted before its process died, closed when the message is taken over (inbox).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 18:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ("outbox", "inbox"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("drafts", sa.JSON(), nullable=True))


def downgrade() -> None:
    for table in ("inbox", "outbox"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("drafts")
