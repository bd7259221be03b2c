"""The pending actions table: consequential tool calls held for a human's
confirmation (`bot.tools.actions`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Text
from sqlmodel import Field, SQLModel

from bot.store.models import _ts, _ts_optional


class PendingAction(SQLModel, table=True):
    """One held tool call: pending → confirmed | cancelled | expired."""

    __tablename__ = "pending_actions"

    id: int | None = Field(default=None, primary_key=True)
    code: str = Field(max_length=16, unique=True)
    user_id: int = Field(foreign_key="users.id", index=True)
    """The requester: only they (or an admin) may confirm."""
    role: str = Field(max_length=16)
    """The requester's role when the call was made; the tool runs with it."""
    conversation_id: int = Field(foreign_key="conversations.id")
    conversation_key: str = Field(max_length=450)
    platform: str = Field(max_length=32)
    chat_type: str = Field(default="direct", max_length=16)
    run_id: str = Field(max_length=32)
    tool_name: str = Field(max_length=128)
    args: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    summary: str = Field(default="", sa_type=Text)
    sources: str = Field(default="", max_length=200)
    """Why it was held: the untrusted sources in the run's context."""
    status: str = Field(default="pending", max_length=16, index=True)
    result: str | None = Field(default=None, sa_type=Text)
    decided_by: int | None = Field(default=None)
    created_at: datetime = _ts()
    expires_at: datetime = _ts(index=True)
    decided_at: datetime | None = _ts_optional()
