"""Storage: migrations on SQLite and PostgreSQL, no drift, SQLite tuning."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from bot.store import Store, pool
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


@pytest.mark.fast_path
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


@pytest.mark.fast_path
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
        await _terminate(store, pid)
        await asyncio.sleep(0.2)  # the server's goodbye reaches the idle connection
        async with store.write() as session:  # the same pool: its one connection was cut
            session.add(User(display_name="after", role="guest"))
            again = (await session.exec(text("SELECT pg_backend_pid()"))).one()[0]  # type: ignore[call-overload]
        assert again != pid
        async with store.read() as session:
            names = (await session.exec(text("SELECT display_name FROM users"))).all()  # type: ignore[call-overload]
        assert sorted(n[0] for n in names) == ["after", "before"]
    finally:
        await store.dispose()


async def _terminate(store: Store, pid: int) -> None:
    """End backend `pid` from another connection, and wait until it is gone
    (pg_terminate_backend only signals it)."""
    async with store.urgent_engine.connect() as other:
        await other.execute(text(f"SELECT pg_terminate_backend({int(pid)})"))
        alive = text(f"SELECT count(*) FROM pg_stat_activity WHERE pid = {int(pid)}")
        for _ in range(500):
            gone = (await other.execute(alive)).scalar_one() == 0
            # A transaction sees one snapshot of pg_stat_activity: end it, so
            # the next look is a new one.
            await other.rollback()
            if gone:
                return
            await asyncio.sleep(0.01)
    raise AssertionError(f"backend {pid} still there")


async def test_a_connection_cut_as_it_is_taken_fails_one_transaction_only(
    database: Database,
):
    """PostgreSQL: a connection used a moment ago is not pinged, so one whose
    backend ends just as it is taken (before its goodbye has reached us) fails
    the transaction that takes it, cleanly, with nothing of it written; the pool
    replaces it, and the next transaction runs on a new backend."""
    if database.backend != "postgres":
        pytest.skip("a server connection to cut")
    store = database.store(pool_size=1, max_overflow=0)
    await store.upgrade()
    try:
        for attempt in range(5):
            async with store.read() as session:
                pid = (await session.exec(text("SELECT pg_backend_pid()"))).one()[0]  # type: ignore[call-overload]
            await _terminate(store, pid)
            written = True
            try:
                async with store.write() as session:
                    session.add(User(display_name=f"cut {attempt}", role="guest"))
                    await session.exec(text("SELECT 1"))  # type: ignore[call-overload]
            except DBAPIError:
                written = False
            async with store.write() as session:
                session.add(User(display_name=f"next {attempt}", role="guest"))
                again = (await session.exec(text("SELECT pg_backend_pid()"))).one()[0]  # type: ignore[call-overload]
            assert again != pid
            async with store.read() as session:
                rows = (await session.exec(text("SELECT display_name FROM users"))).all()  # type: ignore[call-overload]
            names = {row[0] for row in rows}
            assert f"next {attempt}" in names
            assert (f"cut {attempt}" in names) is written
    finally:
        await store.dispose()


@pytest.mark.fast_path
async def test_a_pooled_connection_is_pinged_only_after_sitting_idle(
    database: Database, monkeypatch: pytest.MonkeyPatch
):
    """PostgreSQL: a connection taken from the pool right after it was used is
    not pinged (a round trip per checkout, several per message); one that sat
    in the pool longer than PING_IDLE_S is, with one `SELECT 1`. Seen from the
    server: the backend's last query."""
    if database.backend != "postgres":
        pytest.skip("SQLite's connections are not pinged")
    monkeypatch.setattr(pool, "PING_IDLE_S", 0.3)
    store = database.store(pool_size=1, max_overflow=0)
    await store.upgrade()

    async def last_query(pid: int) -> str:
        async with store.urgent_engine.connect() as other:
            sql = f"SELECT query FROM pg_stat_activity WHERE pid = {pid}"
            return str((await other.execute(text(sql))).scalar_one())

    try:
        async with store.engine.connect() as conn:
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        async with store.engine.connect():  # taken again at once
            assert await last_query(pid) != "SELECT 1"
        await asyncio.sleep(0.4)
        async with store.engine.connect() as conn:  # after sitting idle
            assert await last_query(pid) == "SELECT 1"
            assert (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one() == pid
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
