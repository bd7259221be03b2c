"""Persistence: SQLModel tables, the async engine and sessions, migrations."""

from bot.store.db import Store

__all__ = ["Store"]
