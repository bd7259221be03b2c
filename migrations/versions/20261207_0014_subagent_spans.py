"""sub-agents' spans under the call that ran them

A run's `delegate_task` call runs a child agent whose LLM calls and tools are
spans of the run; `call_id` names a tool span's call, and `parent_call_id`
the `delegate_task` call a child's span ran under (`switchboard trace show`
indents them beneath it).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("trace_spans", schema=None) as batch_op:
        batch_op.add_column(sa.Column("call_id", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("parent_call_id", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trace_spans", schema=None) as batch_op:
        batch_op.drop_column("parent_call_id")
        batch_op.drop_column("call_id")
