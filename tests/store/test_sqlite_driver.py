"""The SQLite engine's driver (`bot.store.sqlite_driver`: one thread hand-off
per statement) behaves as aiosqlite does through SQLAlchemy: rows, RETURNING,
executemany, rollbacks, errors, a lock held by another process, and many
writers at once."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import func, insert, text
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlmodel import col, select

from bot.store import Store, sqlite_driver
from bot.store.models import Conversation, User
from bot.store.rows import insert_returning_ids, insert_rows
from tests.paths import REPO_ROOT


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    return sqlite_store


async def test_the_engine_uses_the_driver(store: Store):
    async with store.engine.connect() as conn:
        raw = await conn.get_raw_connection()
        assert isinstance(raw.driver_connection, sqlite_driver.Connection)


async def test_rows_returning_and_executemany(store: Store):
    users = [User(display_name=f"u{i}") for i in range(300)]
    async with store.write() as session:
        ids = await insert_returning_ids(session, users[:3])
        await insert_rows(session, users[3:])
    assert ids == sorted(ids) and len(set(ids)) == 3
    async with store.read() as session:
        names = (await session.exec(select(User.display_name).order_by(col(User.id)))).all()
        one = (await session.exec(select(User).where(col(User.id) == ids[1]))).one()
    assert names == [f"u{i}" for i in range(300)]  # all rows, in order, past any chunk size
    assert one.display_name == "u1"


async def test_a_failed_transaction_leaves_nothing_and_the_connection_works(store: Store):
    async with store.write() as session:
        await session.exec(insert(Conversation).values(key="k", platform="p", channel_id="c"))
    with pytest.raises(IntegrityError):
        async with store.write() as session:
            await session.exec(insert(User).values(display_name="lost"))
            await session.exec(insert(Conversation).values(key="k", platform="p", channel_id="c"))
    with pytest.raises(OperationalError):
        async with store.read() as session:
            await session.exec(text("SELECT nonsense FROM nowhere"))  # type: ignore[call-overload]
    async with store.read() as session:
        users = (await session.exec(select(func.count()).select_from(User))).one()
        rooms = (await session.exec(select(func.count()).select_from(Conversation))).one()
    assert (users, rooms) == (0, 1)


async def test_a_lock_held_by_another_process_fails_the_write_cleanly(store: Store, tmp_path: Path):
    other = sqlite3.connect(tmp_path / "sqlite.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(OperationalError, match="locked"):
            async with store.write() as session:
                await session.exec(insert(User).values(display_name="blocked"))
    finally:
        other.execute("ROLLBACK")
        other.close()
    async with store.write() as session:  # the lock is gone: writes work again
        await session.exec(insert(User).values(display_name="after"))
    async with store.read() as session:
        names = (await session.exec(select(User.display_name))).all()
    assert names == ["after"]


async def test_many_writers_and_readers_at_once(store: Store):
    async def write(i: int) -> None:
        async with store.write() as session:
            await insert_rows(session, [User(display_name=f"w{i}")])

    async def read() -> int:
        async with store.read() as session:
            return int((await session.exec(select(func.count()).select_from(User))).one())

    results = await asyncio.gather(*(write(i) if i % 2 else read() for i in range(200)))
    assert all(r is None or 0 <= r <= 100 for r in results)
    assert await read() == 100


def _slow(rows: int, select: str = "SELECT i FROM r") -> str:
    """A statement that counts to `rows` (a few ms per 10,000) for `select`."""
    return (
        f"WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < {rows}) "
        + select
    )


CANCEL_MID_FETCH = textwrap.dedent(
    """
    import asyncio, faulthandler, random, sys
    from bot.store import sqlite_driver

    SLOW = sys.argv[2]

    async def main():
        faulthandler.enable()
        conn = await sqlite_driver.connect(sys.argv[1])
        for _ in range(400):  # it crashed within 1-150 tries (mean ~55)
            cursor = await conn.cursor()
            with sqlite_driver.off_the_loop():
                fetching = asyncio.create_task(cursor.execute(SLOW))
            await asyncio.sleep(random.random() * 0.008)  # in its long step, mostly
            fetching.cancel()
            await asyncio.gather(fetching, return_exceptions=True)
            await cursor.close()  # as SQLAlchemy may, on the cancellation
        cursor = await conn.cursor()
        await cursor.execute("SELECT 41 + 1")
        print((await cursor.fetchone())[0], flush=True)
        await conn.close()

    asyncio.run(main())
    """
)


@pytest.mark.slow
def test_a_cursor_closed_while_its_cancelled_statement_runs_does_not_crash(tmp_path: Path):
    """A statement whose wait is cancelled goes on on the worker thread; its
    cursor, closed meanwhile, is closed there, after it. Closed on the loop's
    thread while the statement was being stepped, it crashed the process with
    a segfault within a few dozen tries."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CANCEL_MID_FETCH,
            str(tmp_path / "c.db"),
            # its first row comes at once; the step after it scans long, finds none
            _slow(20_000, "SELECT 1 UNION ALL SELECT i FROM r WHERE i = -1"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["42"]


async def test_a_call_answered_with_work_queued_after_it_leaves_the_worker_busy(tmp_path: Path):
    """Another task's work queued on the worker thread after a call (a
    statement not waited for) keeps the connection off the loop's thread
    when that call answers: the next statement runs after that work, never
    beside it on the loop's thread."""
    conn = await sqlite_driver.connect(str(tmp_path / "q.db"))
    conn.patience_ms = 1000
    try:
        await conn.statement("CREATE TABLE t (i INTEGER)", ())
        with sqlite_driver.off_the_loop():
            reading = asyncio.create_task(
                conn.statement(f"SELECT count(*) FROM ({_slow(100_000)})", ())
            )
        await asyncio.sleep(0)  # queued on the worker
        conn.statement_later(f"INSERT INTO t {_slow(300_000)}", ())
        assert (await reading)[0] == [(100_000,)]
        assert not conn.settled()  # the insert is still there
        rows, _ = await conn.statement("SELECT count(*) FROM t", ())
        assert rows == [(300_000,)]
        assert conn.settled()
    finally:
        await conn.close()


async def test_a_closed_connection_fails_as_a_database_error(tmp_path: Path):
    """After it is closed (a store disposed of under a write), what the
    connection is asked fails as a database error, which callers handle as
    one, not aiosqlite's ValueError."""
    conn = await sqlite_driver.connect(str(tmp_path / "closed.db"))
    conn.patience_ms = 1000
    await conn.close()
    assert not conn.transaction_open()
    with pytest.raises(sqlite3.OperationalError, match="closed"):
        await conn.statement("SELECT 1", ())
    with pytest.raises(sqlite3.OperationalError, match="closed"):
        conn.statement_later("SELECT 1", ())
    with sqlite_driver.off_the_loop(), pytest.raises(sqlite3.OperationalError, match="closed"):
        await conn.statement("SELECT 1", ())
