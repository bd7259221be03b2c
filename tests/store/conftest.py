"""Fixtures shared by the store tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.store import Store


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Store]:
    """A migrated SQLite store at `tmp_path / "sqlite.db"` whose locked writes
    fail after 0.2 s (tests open their own connections to that file)."""
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'sqlite.db'}", busy_timeout_ms=200)
    await store.upgrade()
    yield store
    await store.dispose()
