"""SQLite statements on the event loop's thread (`sqlite_driver.Connection.patience_ms`):
they run there, but nothing that waits does: a locked database is waited for on
the connection's worker thread, checkpoints on a thread of their own, heavy reads can ask for
it, and a cancelled wait sends the connection's next calls after it. Commits
made on the loop survive the process being killed."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, insert, text
from sqlalchemy.exc import OperationalError
from sqlmodel import select

from bot.store import Store, checkpoints, sqlite_driver
from bot.store.checkpoints import Checkpoints
from bot.store.models import User

pytestmark = pytest.mark.fast_path  # its mechanism (bot/store/compat.py)

ROOT = Path(__file__).resolve().parents[2]


def _store(path: Path, **options: Any) -> Store:
    """A store whose connections can say which thread runs their statements
    (`SELECT thread_ident()`)."""
    store = Store(f"sqlite+aiosqlite:///{path}", **options)

    @event.listens_for(store.engine.sync_engine, "connect")
    def _register(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.driver_connection._conn.create_function("thread_ident", 0, threading.get_ident)

    return store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = _store(tmp_path / "loop.db", busy_timeout_ms=5000)
    await store.upgrade()
    yield store
    await store.dispose()


async def _thread_of_a_read(store: Store, *, heavy: bool = False) -> int:
    async with store.read(heavy=heavy) as session:
        return int((await session.exec(text("SELECT thread_ident()"))).one()[0])  # type: ignore[call-overload]


async def _thread_of_a_write(store: Store, name: str) -> int:
    """The thread that ran the write's first statement (the one that takes the lock)."""
    row = func.printf("%s:%d", name, func.thread_ident())
    async with store.write() as session:
        stored = (
            await session.exec(insert(User).values(display_name=row).returning(User.display_name))  # type: ignore[call-overload]
        ).one()[0]
    return int(stored.rsplit(":", 1)[1])


async def _names(store: Store) -> list[str]:
    async with store.read() as session:
        names = (await session.exec(select(User.display_name).order_by(User.id))).all()  # type: ignore[arg-type]
    return [name.rsplit(":", 1)[0] for name in names]


async def test_statements_run_on_the_loop_and_heavy_reads_on_a_worker(store: Store):
    loop_thread = threading.get_ident()
    assert await _thread_of_a_read(store) == loop_thread
    assert await _thread_of_a_write(store, "a") == loop_thread
    worker = await _thread_of_a_read(store, heavy=True)
    assert worker != loop_thread
    assert worker in {thread.ident for thread in threading.enumerate()}
    assert await _thread_of_a_read(store) == loop_thread  # and back


async def test_a_store_can_keep_sqlite_off_the_loop(tmp_path: Path):
    store = _store(tmp_path / "off.db", sqlite_on_loop=False)
    await store.upgrade()
    try:
        assert await _thread_of_a_write(store, "a") != threading.get_ident()
        assert await _names(store) == ["a"]
    finally:
        await store.dispose()


async def test_a_locked_database_is_waited_for_on_the_worker_not_the_loop(
    store: Store, tmp_path: Path
):
    """Another process holds the write lock: the write waits for it without
    stalling the loop (which releases the lock here: a loop stuck in SQLite's
    busy handler could not, and the write would fail as locked), then succeeds.
    The next write runs on the loop again."""
    other = sqlite3.connect(tmp_path / "loop.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    write = asyncio.create_task(_thread_of_a_write(store, "waited"))
    ticks = 0
    for _ in range(20):
        await asyncio.sleep(0.01)
        ticks += 1
    assert not write.done()  # still waiting for the lock, and the loop runs
    other.execute("ROLLBACK")
    other.close()
    thread = await write
    assert ticks == 20
    assert thread != threading.get_ident()  # it waited on the worker
    assert await _thread_of_a_write(store, "next") == threading.get_ident()
    assert await _names(store) == ["waited", "next"]


async def test_a_lock_held_past_the_busy_timeout_fails_the_write(tmp_path: Path):
    store = _store(tmp_path / "held.db", busy_timeout_ms=200)
    await store.upgrade()
    other = sqlite3.connect(tmp_path / "held.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(OperationalError, match="locked"):
            await _thread_of_a_write(store, "blocked")
    finally:
        other.execute("ROLLBACK")
        other.close()
    try:
        assert await _thread_of_a_write(store, "after") == threading.get_ident()
        assert await _names(store) == ["after"]
        async with store.engine.connect() as conn:  # the worker set it back
            assert (await conn.execute(text("PRAGMA busy_timeout"))).scalar() == 0
    finally:
        await store.dispose()


async def test_a_cancelled_wait_for_the_lock_writes_nothing_and_the_connection_recovers(
    store: Store, tmp_path: Path
):
    """The write is cancelled while its statement waits for the lock on the
    worker thread; the lock is released at once, so that statement may still
    run there. Its transaction is rolled back after it, on the same thread, and
    the connection's next calls go there until one has answered."""
    other = sqlite3.connect(tmp_path / "loop.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    write = asyncio.create_task(_thread_of_a_write(store, "cancelled"))
    await asyncio.sleep(0.1)
    write.cancel()
    other.execute("ROLLBACK")
    other.close()
    with pytest.raises(asyncio.CancelledError):
        await write
    assert await _names(store) == []
    await _thread_of_a_write(store, "after")
    assert await _thread_of_a_write(store, "again") == threading.get_ident()
    assert await _names(store) == ["after", "again"]


async def test_commits_on_the_loop_checkpoint_the_wal_and_it_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """SQLite's automatic checkpoint is off on the loop; ours runs every so
    many commits (on the side; on the writer's connection once the WAL is past
    `MOST_FRAMES`, here lowered), so the WAL is reused instead of growing with
    every commit."""
    monkeypatch.setattr(checkpoints, "MOST_FRAMES", 32)

    async def wal_size_after_commits(name: str, checkpoints: bool) -> int:
        store = _store(tmp_path / name)
        await store.upgrade()
        if not checkpoints:

            @event.listens_for(store.engine.sync_engine, "connect")
            def _none(dbapi_conn: Any, _record: Any) -> None:
                dbapi_conn.driver_connection.checkpoints = None

            await store.engine.dispose()  # connections opened from here on
        try:
            for i in range(400):
                async with store.write() as session:
                    await session.exec(insert(User).values(display_name=f"{i:04}" + "x" * 3000))
            assert len(await _names(store)) == 400
            return (tmp_path / f"{name}-wal").stat().st_size
        finally:
            await store.dispose()

    with_ours = await wal_size_after_commits("ours.db", True)
    without = await wal_size_after_commits("none.db", False)
    assert with_ours * 3 < without, (with_ours, without)


async def test_a_checkpoint_never_holds_up_the_statements_after_it(store: Store):
    """The checkpoint (it syncs the files: milliseconds) runs on a connection
    and a thread of its own: every write after one was asked for still runs on
    the loop at once, none queued behind it on the writer's worker thread. The
    thread goes with the store."""
    loop_thread = threading.get_ident()
    threads = {await _thread_of_a_write(store, f"w{i}") for i in range(200)}
    assert threads == {loop_thread}  # past three checkpoints (one per 64 commits)
    assert "sqlite-checkpoint" in {thread.name for thread in threading.enumerate()}
    await store.dispose()
    assert "sqlite-checkpoint" not in {thread.name for thread in threading.enumerate()}


async def test_a_checkpoint_that_fails_is_logged_and_the_next_one_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    checkpoints = Checkpoints(str(tmp_path / "gone" / "x.db"), every=2)
    caplog.set_level(logging.WARNING, "switchboard.store")

    async def failures(at_least: int) -> int:
        for _ in range(500):  # a deadline for a thread that hangs, not a timing
            count = sum("store.checkpoint_failed" in r.getMessage() for r in caplog.records)
            if count >= at_least:
                return count
            await asyncio.sleep(0.01)
        return count

    try:
        checkpoints.committed()
        assert await failures(1) == 0  # one commit: not yet
        checkpoints.committed()
        assert await failures(1) == 1  # cannot open the file: logged, not raised
        (tmp_path / "gone").mkdir()
        sqlite3.connect(tmp_path / "gone" / "x.db").execute("PRAGMA journal_mode = WAL")
        checkpoints.request()
        for _ in range(500):
            if checkpoints.done:
                break
            await asyncio.sleep(0.01)
        assert checkpoints.done == 1
    finally:
        await checkpoints.close()
    assert "sqlite-checkpoint" not in {thread.name for thread in threading.enumerate()}


async def test_checkpoints_asked_for_while_closing_leave_no_thread_behind(tmp_path: Path):
    """A commit may ask for a checkpoint while the store closes: a new side
    thread starts, and the one closing still ends (each has its own wake-up;
    shared, the new one could take the wake-up the closing one waits for)."""
    path = tmp_path / "closing.db"
    sqlite3.connect(path).execute("PRAGMA journal_mode = WAL")
    checkpoints = Checkpoints(str(path))
    for _ in range(30):
        checkpoints.request()
        closing = asyncio.create_task(checkpoints.close())
        await asyncio.sleep(0)  # close() has told its thread to stop
        checkpoints.request()  # a new thread, while the old one may be checkpointing
        checkpoints.request()
        await asyncio.wait_for(closing, 30)  # a deadline for a hang, not a timing
    await asyncio.wait_for(checkpoints.close(), 30)
    assert "sqlite-checkpoint" not in {thread.name for thread in threading.enumerate()}


@pytest.mark.slow  # a writer process started and killed
def test_commits_made_on_the_loop_survive_a_kill(tmp_path: Path):
    """A process writing one row per transaction is killed mid-stream: every
    row whose commit returned is there, none twice, and the database opens."""
    path = tmp_path / "killed.db"
    script = f"""
import asyncio, sys
from sqlalchemy import insert
from bot.store import Store
from bot.store.models import User

async def main():
    store = Store("sqlite+aiosqlite:///{path}")
    await store.upgrade()
    for i in range(100000):
        async with store.write() as session:
            await session.exec(insert(User).values(display_name=f"row{{i}}"))
        print(i, flush=True)

asyncio.run(main())
"""
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    committed = -1
    try:
        for line in process.stdout:
            committed = int(line)
            if committed >= 700:  # past several of our checkpoints
                break
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert committed >= 700
    for line in process.stdout:  # what it printed before the kill, not yet read
        committed = int(line)
    rows = sqlite3.connect(path).execute("SELECT display_name FROM users").fetchall()
    names = [name for (name,) in rows]
    assert len(names) == len(set(names))
    assert {f"row{i}" for i in range(committed + 1)} <= set(names)
    assert len(names) <= committed + 2  # at most the one whose print was cut off


async def test_statement_later_failure_on_the_loop_is_raised_by_the_next_call(store: Store):
    """A statement not waited for that fails on the loop's thread is raised by
    the transaction's next statement, and nothing after it runs."""
    async with store.engine.connect() as conn:
        raw = await conn.get_raw_connection()
        driver = raw.driver_connection
        assert isinstance(driver, sqlite_driver.Connection)
        driver.begin_with_next("BEGIN IMMEDIATE")
        driver.statement_later("INSERT INTO nowhere VALUES (1)", ())
        driver.statement_later("INSERT INTO users (display_name) VALUES ('skipped')", ())
        with pytest.raises(sqlite3.OperationalError, match="nowhere") as failure:
            await driver.statement("SELECT 1", ())
        assert "nowhere" in failure.value.sql  # type: ignore[attr-defined]
        await driver.rollback()
        rows, _ = await driver.statement("SELECT count(*) FROM users", ())
        assert rows == [(0,)]
    async with store.read() as session:
        assert (await session.exec(select(func.count()).select_from(User))).one() == 0


async def test_a_long_run_of_statements_gives_the_loop_turns(store: Store):
    """Statements on the loop's thread do not yield as hand-offs did: a task
    running hundreds of them back to back still lets other tasks run every
    `YIELD_EVERY` statements."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    start = ticks
    async with store.read() as session:
        for _ in range(10 * sqlite_driver.YIELD_EVERY):
            await session.exec(text("SELECT 1"))  # type: ignore[call-overload]
    task.cancel()
    assert ticks - start >= 9
