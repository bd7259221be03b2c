"""Storage: migrations on SQLite and PostgreSQL, no drift, SQLite tuning."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from bot.store import Store
from bot.store.migrate import current, drift
from bot.store.models import User
from tests.conftest import Database


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    from bot.store.migrate import alembic_config

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


async def test_migrations_apply_and_match_the_models(store: Store):
    head = head_revision()
    assert head is not None
    assert await current(store.engine) == head
    assert await drift(store.engine) == []
    await store.upgrade()  # idempotent
    assert await current(store.engine) == head


async def test_sqlite_is_tuned_for_a_service(sqlite_database: Database):
    store = sqlite_database.store()
    await store.upgrade()
    async with store.engine.connect() as conn:
        journal = (await conn.execute(text("PRAGMA journal_mode"))).scalar()
        busy = (await conn.execute(text("PRAGMA busy_timeout"))).scalar()
        sync = (await conn.execute(text("PRAGMA synchronous"))).scalar()
        fks = (await conn.execute(text("PRAGMA foreign_keys"))).scalar()
        autocheckpoint = (await conn.execute(text("PRAGMA wal_autocheckpoint"))).scalar()
        raw = await conn.get_raw_connection()
        patience = raw.driver_connection.patience_ms
    await store.dispose()
    assert (journal, sync, fks) == ("wal", 1, 1)  # synchronous 1 = NORMAL
    # Statements run on the event loop's thread: SQLite never waits for a lock
    # or syncs a checkpoint there; a locked database is waited for on the
    # connection's worker thread, up to the configured busy timeout.
    assert (busy, autocheckpoint, patience) == (0, 0, 5000)


async def test_sqlite_off_the_loop_keeps_the_busy_timeout(sqlite_database: Database):
    store = sqlite_database.store(sqlite_on_loop=False)
    await store.upgrade()
    async with store.engine.connect() as conn:
        busy = (await conn.execute(text("PRAGMA busy_timeout"))).scalar()
        autocheckpoint = (await conn.execute(text("PRAGMA wal_autocheckpoint"))).scalar()
        raw = await conn.get_raw_connection()
        patience = raw.driver_connection.patience_ms
    await store.dispose()
    assert (busy, autocheckpoint, patience) == (5000, 1000, None)


async def test_concurrent_writers_do_not_fail_on_sqlite(sqlite_database: Database):
    """BEGIN IMMEDIATE: read-then-write transactions queue instead of failing
    with "database is locked" when they would upgrade a shared lock."""
    store = sqlite_database.store()
    await store.upgrade()

    async def writer(i: int) -> None:
        async with store.write() as session:
            await session.exec(text("SELECT count(*) FROM users"))  # type: ignore[call-overload]
            await asyncio.sleep(0.001)
            session.add(User(display_name=f"u{i}"))

    await asyncio.gather(*(writer(i) for i in range(40)))
    async with store.read() as session:
        count = (await session.exec(text("SELECT count(*) FROM users"))).one()  # type: ignore[call-overload]
    await store.dispose()
    assert count[0] == 40


async def test_roundtrip_keeps_aware_utc_datetimes(store: Store):
    async with store.write() as session:
        user = User(display_name="x")
        session.add(user)
    async with store.read() as session:
        loaded = await session.get(User, user.id)
    assert loaded is not None and loaded.created_at.utcoffset() is not None
    assert abs((loaded.created_at - user.created_at).total_seconds()) < 1
