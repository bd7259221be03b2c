"""The SQLite engine's driver (`bot.store.sqlite_driver`: one thread hand-off
per statement) behaves as aiosqlite does through SQLAlchemy: rows, RETURNING,
executemany, rollbacks, errors, a lock held by another process, and many
writers at once."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import func, insert, text
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlmodel import col, select

from bot.store import Store, sqlite_driver
from bot.store.models import Conversation, User
from bot.store.rows import insert_returning_ids, insert_rows


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
