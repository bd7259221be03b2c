"""Storage: migrations on SQLite and PostgreSQL, no drift, SQLite tuning."""

from __future__ import annotations

import asyncio

import pytest
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


async def test_a_pooled_connection_the_server_dropped_is_replaced_on_checkout(
    database: Database,
):
    """PostgreSQL: the backend of the pool's one idle connection is terminated
    (a restart, an administrator): the next transaction finds out when it takes
    the connection from the pool, and runs on a new one instead of failing."""
    if database.backend != "postgres":
        pytest.skip("a server connection to cut")
    store = database.store(pool_size=1, max_overflow=0)
    await store.upgrade()
    try:
        async with store.write() as session:
            session.add(User(display_name="before", role="guest"))
            pid = (await session.exec(text("SELECT pg_backend_pid()"))).one()[0]  # type: ignore[call-overload]
        async with store.read() as session:  # a live connection is kept, not replaced
            same = (await session.exec(text("SELECT pg_backend_pid()"))).one()[0]  # type: ignore[call-overload]
        assert same == pid
        async with store.urgent_engine.connect() as other:
            await other.execute(text(f"SELECT pg_terminate_backend({int(pid)})"))
        async with store.write() as session:  # the same pool: its one connection was cut
            session.add(User(display_name="after", role="guest"))
            again = (await session.exec(text("SELECT pg_backend_pid()"))).one()[0]  # type: ignore[call-overload]
        assert again != pid
        async with store.read() as session:
            names = (await session.exec(text("SELECT display_name FROM users"))).all()  # type: ignore[call-overload]
        assert sorted(n[0] for n in names) == ["after", "before"]
    finally:
        await store.dispose()


async def test_postgres_reads_take_no_transaction_and_writes_one(database: Database):
    """PostgreSQL: a read session's statements run in autocommit (no BEGIN and
    COMMIT round trips; at READ COMMITTED each saw its own snapshot anyway); a
    write session's are one transaction."""
    if database.backend != "postgres":
        pytest.skip("SQLite's reads take no transaction either (no BEGIN is sent)")
    store = database.store()
    await store.upgrade()
    xid = text("SELECT txid_current()")
    try:
        async with store.read() as session:
            first, second = [(await session.exec(xid)).one()[0] for _ in range(2)]  # type: ignore[call-overload]
        assert first != second
        async with store.write() as session:
            first, second = [(await session.exec(xid)).one()[0] for _ in range(2)]  # type: ignore[call-overload]
        assert first == second
    finally:
        await store.dispose()
