"""SQLite's reads on the event loop run on one connection kept for them.

The statements `bot.store.rows` runs straight on the driver go to that
connection (`bot.store.sessions.in_direct_read`); what runs through the
Session, or a statement the driver path does not take, uses the Session's own
pooled connection. Reads stay in autocommit: each sees what was committed
before it; any number of sessions at once share the connection; a database
error gives the next read a fresh one."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import bindparam, func, select, text
from sqlalchemy.exc import DBAPIError
from sqlmodel import col

from bot.store import Store, direct
from bot.store.models import InboxItem
from bot.store.rows import execute, insert_rows, new_row

pytestmark = pytest.mark.fast_path  # its mechanism (bot/store/compat.py)

BY_EVENT = select(col(InboxItem.payload)).where(col(InboxItem.event_id) == bindparam("r_event"))
COUNT = select(func.count()).select_from(InboxItem)
"""no parameters: not the driver path (SQLAlchemy's own)"""


def item(event_id: str, n: int = 0) -> dict[str, Any]:
    return new_row(
        InboxItem, platform="test", event_id=event_id, conversation_key="c", payload={"n": n}
    )


async def write(store: Store, *rows: dict[str, Any]) -> None:
    async with store.write() as session:
        await insert_rows(session, list(rows))


async def test_reads_share_the_kept_connection_and_see_every_commit(sqlite_store: Store) -> None:
    store = sqlite_store
    await write(store, item("a", 1))

    async def read(event_id: str) -> Any:
        async with store.read() as session:
            assert session.sync_session.info.get(direct.READ) is not None
            return (await execute(session, BY_EVENT, {"r_event": event_id})).scalar()

    assert await read("a") == {"n": 1}
    checked_out = store.engine.pool.checkedout()  # type: ignore[attr-defined]
    assert await asyncio.gather(*(read("a") for _ in range(50))) == [{"n": 1}] * 50
    assert store.engine.pool.checkedout() == checked_out  # type: ignore[attr-defined]
    for n in range(2, 5):  # no snapshot held between reads: each sees the last commit
        async with store.write() as session:
            await session.exec(  # type: ignore[call-overload]
                text("UPDATE inbox SET payload = :p WHERE event_id = 'a'"),
                params={"p": f'{{"n": {n}}}'},
            )
        assert await read("a") == {"n": n}


async def test_the_orm_and_statements_off_the_driver_path_read_too(store: Store) -> None:
    await write(store, item("a", 1), item("b", 2))
    async with store.read() as session:
        await execute(session, BY_EVENT, {"r_event": "a"})
    checked_out = store.engine.pool.checkedout()  # type: ignore[attr-defined]
    async with store.read() as session:
        assert (await execute(session, BY_EVENT, {"r_event": "b"})).scalar() == {"n": 2}
        assert (await execute(session, COUNT)).scalar() == 2  # through SQLAlchemy
        found = await session.exec(select(InboxItem.event_id).order_by(col(InboxItem.id)))
        assert list(found.scalars()) == ["a", "b"]
        assert (await execute(session, BY_EVENT, {"r_event": "a"})).scalar() == {"n": 1}
        kept = session.sync_session.info.get(direct.READ)
    assert store.engine.pool.checkedout() == checked_out  # the Session's own went back
    # what the kept connection does not take never begins anything on it
    assert kept is None or not kept.sync_connection.in_transaction()


async def test_a_failing_read_raises_sqlalchemys_error_and_reads_go_on(store: Store) -> None:
    await write(store, item("a", 1))
    missing = (
        select(text("x"))
        .select_from(text("no_such_table"))
        .where(text("x = :r_x").bindparams(bindparam("r_x")))
    )
    with pytest.raises(DBAPIError):  # OperationalError on SQLite, ProgrammingError on PostgreSQL
        async with store.read() as session:
            await execute(session, missing, {"r_x": 1})
    async with store.read() as session:
        assert (await execute(session, BY_EVENT, {"r_event": "a"})).scalar() == {"n": 1}


async def test_a_kept_connection_found_closed_is_replaced(sqlite_store: Store) -> None:
    store = sqlite_store
    await write(store, item("a", 1))
    async with store.read() as session:
        kept = session.sync_session.info[direct.READ]
        assert (await execute(session, BY_EVENT, {"r_event": "a"})).scalar() == {"n": 1}
    await kept.invalidate()  # as when its database connection broke
    async with store.read() as session:
        assert session.sync_session.info[direct.READ] is not kept
        assert (await execute(session, BY_EVENT, {"r_event": "a"})).scalar() == {"n": 1}


async def test_heavy_reads_go_the_usual_way(sqlite_store: Store) -> None:
    await write(sqlite_store, item("a", 1))
    async with sqlite_store.read(heavy=True) as session:
        assert direct.READ not in session.sync_session.info
        assert (await execute(session, BY_EVENT, {"r_event": "a"})).scalar() == {"n": 1}


# --- reads that follow this process's writes (`Store.read(warm=True)`) ------------------


def warm_driver(session: Any) -> Any:
    return session.sync_session.info.get(direct.READ_DRIVER)


async def test_a_warm_read_runs_on_the_idle_writer_and_sees_every_commit(
    sqlite_store: Store, tmp_path: Path
) -> None:
    store = sqlite_store
    await write(store, item("a", 1))
    writer = store._held_write
    assert writer is not None
    async with store.read(warm=True) as session:
        assert warm_driver(session) is writer.driver
        assert (await execute(session, BY_EVENT, {"r_event": "a"})).scalar() == {"n": 1}
    # another process's commit (the CLI, say) is seen by the next warm read
    with sqlite3.connect(tmp_path / "sqlite.db") as other:
        other.execute("UPDATE inbox SET payload = '{\"n\": 7}' WHERE event_id = 'a'")
    async with store.read(warm=True) as session:
        assert (await execute(session, BY_EVENT, {"r_event": "a"})).scalar() == {"n": 7}
    # nothing was begun on the writer: the next write goes as ever
    assert not writer.driver.in_write()
    await write(store, item("b", 2))
    async with store.read(warm=True) as session:
        assert (await execute(session, BY_EVENT, {"r_event": "b"})).scalar() == {"n": 2}


async def test_a_warm_read_during_a_write_reads_on_the_reader_and_not_its_rows(
    sqlite_store: Store,
) -> None:
    store = sqlite_store
    await write(store, item("a", 1))
    seen: list[Any] = []
    async with store.write() as session:
        await insert_rows(session, [item("b", 2)])  # not committed yet

        async def warm_read() -> None:
            async with store.read(warm=True) as reading:
                assert warm_driver(reading) is not store._held_write.driver  # type: ignore[union-attr]
                seen.append((await execute(reading, BY_EVENT, {"r_event": "b"})).scalar())

        await asyncio.wait_for(warm_read(), 5)  # does not wait for the write
    assert seen == [None]
    async with store.read(warm=True) as session:
        assert (await execute(session, BY_EVENT, {"r_event": "b"})).scalar() == {"n": 2}


async def test_a_write_that_comes_during_a_warm_read_waits_for_it_then_goes_on(
    sqlite_store: Store,
) -> None:
    store = sqlite_store
    await write(store, item("a", 1))
    async with store.read(warm=True) as session:
        assert warm_driver(session) is store._held_write.driver  # type: ignore[union-attr]
        writing = asyncio.create_task(write(store, item("b", 2)))
        await asyncio.sleep(0.05)
        assert not writing.done()  # the writer's connection is the read's meanwhile
        assert (await execute(session, BY_EVENT, {"r_event": "a"})).scalar() == {"n": 1}
    await asyncio.wait_for(writing, 5)
    async with store.read() as session:
        assert (await execute(session, BY_EVENT, {"r_event": "b"})).scalar() == {"n": 2}


async def test_a_warm_read_reads_on_either_database(store: Store) -> None:
    await write(store, item("a", 1))
    async with store.read(warm=True) as session:
        assert (await execute(session, BY_EVENT, {"r_event": "a"})).scalar() == {"n": 1}


async def test_a_failing_warm_read_leaves_the_writer_usable(sqlite_store: Store) -> None:
    store = sqlite_store
    await write(store, item("a", 1))
    missing = (
        select(text("x"))
        .select_from(text("no_such_table"))
        .where(text("x = :r_x").bindparams(bindparam("r_x")))
    )
    with pytest.raises(DBAPIError):
        async with store.read(warm=True) as session:
            assert warm_driver(session) is store._held_write.driver  # type: ignore[union-attr]
            await execute(session, missing, {"r_x": 1})
    await asyncio.wait_for(write(store, item("b", 2)), 5)  # the lock was let go
    async with store.read(warm=True) as session:
        assert (await execute(session, BY_EVENT, {"r_event": "b"})).scalar() == {"n": 2}
    # a writer's connection found broken is not read on: the next write replaces it
    held = store._held
    assert held is not None
    await held.invalidate()
    async with store.read(warm=True) as session:
        assert warm_driver(session) is not store._held_write.driver  # type: ignore[union-attr]
        assert (await execute(session, BY_EVENT, {"r_event": "a"})).scalar() == {"n": 1}
    await write(store, item("c", 3))
    async with store.read(warm=True) as session:
        assert warm_driver(session) is store._held_write.driver  # type: ignore[union-attr]
        assert (await execute(session, BY_EVENT, {"r_event": "c"})).scalar() == {"n": 3}
