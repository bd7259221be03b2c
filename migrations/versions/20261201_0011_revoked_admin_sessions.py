"""revoked admin sessions

Sessions of the admin dashboard ended by a logout (the SHA-256 of the
session's nonce, until the session would have expired), so that every
instance on the database refuses the cookie, not only the one that served the
logout.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import bot.store.columns

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "revoked_sessions",
        sa.Column("digest", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("expires_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", bot.store.columns.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_revoked_sessions")),
    )
    with op.batch_alter_table("revoked_sessions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_revoked_sessions_expires_at"), ["expires_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("revoked_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_revoked_sessions_expires_at"))
    op.drop_table("revoked_sessions")
