"""PostgreSQL: the sessions of single statements (`Store.read`,
`Store.write_one`) run the driver path's statements on connections kept out of
the pool (`bot.store.kept`), one session at a time on each; what runs through
the Session uses its own pooled connection. A kept connection is handed out as
the pool would: one the server closed, or one that fails its ping after
sitting idle, is replaced; one whose session failed is not kept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import Integer, bindparam, event, func, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlmodel import col

from bot.store import Store, direct, kept
from bot.store.models import InboxItem
from bot.store.rows import execute, insert_rows, new_row
from tests.conftest import Database

pytestmark = pytest.mark.fast_path  # its mechanism (bot/store/compat.py)

BY_EVENT = select(col(InboxItem.payload)).where(col(InboxItem.event_id) == bindparam("k_event"))
PID = select(func.pg_backend_pid() + bindparam("k_x", type_=Integer))
"""the backend serving the driver path (a parameter: it takes that path)"""
SLEEP = select(func.pg_sleep(bindparam("k_seconds")))
COUNT = select(func.count()).select_from(InboxItem)
"""no parameters: not the driver path (SQLAlchemy's own, on the Session's connection)"""


def item(event_id: str, n: int = 0) -> dict[str, Any]:
    return new_row(
        InboxItem, platform="test", event_id=event_id, conversation_key="c", payload={"n": n}
    )


@pytest.fixture
async def pg_store(pg: Database) -> AsyncIterator[Store]:
    store = pg.store(pool_size=6)
    await store.upgrade()
    yield store
    await store.dispose()


def checkouts(store: Store) -> list[int]:
    """A counter of the main pool's checkouts, from now on."""
    counted = [0]

    @event.listens_for(store.engine.sync_engine, "checkout")
    def _count(*_: Any) -> None:
        counted[0] += 1

    return counted


async def pid(store: Store) -> int:
    async with store.read() as session:
        return int((await execute(session, PID, {"k_x": 0})).scalar())


async def test_one_kept_connection_serves_session_after_session(pg_store: Store) -> None:
    store = pg_store
    async with store.write_one() as session:
        await insert_rows(session, [item("a", 1)])
    first = await pid(store)
    counted = checkouts(store)
    for n in range(20):
        async with store.write_one() as session:
            await insert_rows(session, [item(f"b{n}", n)])
        async with store.read() as session:
            assert session.sync_session.info.get(direct.KEPT) is not None
            found = (await execute(session, BY_EVENT, {"k_event": f"b{n}"})).scalar()
            assert found == {"n": n}  # autocommit: the write is there at once
    assert counted == [0]  # no pool checkout: the kept connection each time
    assert await pid(store) == first


async def test_sessions_at_once_each_have_a_connection_and_the_rest_go_back(
    pg_store: Store,
) -> None:
    store = pg_store
    keep = store._kept.keep  # type: ignore[union-attr]

    async def slow() -> int:
        async with store.read() as session:
            await execute(session, SLEEP, {"k_seconds": 0.2})
            return int((await execute(session, PID, {"k_x": 0})).scalar())

    pids = await asyncio.gather(*(slow() for _ in range(keep + 2)))
    assert len(set(pids)) == keep + 2  # one operation per connection at a time
    assert store._kept.idle == keep  # type: ignore[union-attr]
    assert store.engine.pool.checkedout() == keep  # type: ignore[attr-defined]


async def test_the_orm_and_other_statements_use_the_sessions_own_connection(
    pg_store: Store,
) -> None:
    store = pg_store
    async with store.write_one() as session:
        session.add(InboxItem(platform="test", event_id="orm", conversation_key="c"))
        await insert_rows(session, [item("core")])
    async with store.read() as session:
        assert (await session.exec(COUNT)).one()[0] == 2  # type: ignore[call-overload]
        slot = session.sync_session.info[direct.KEPT]
        assert slot.held is None  # nothing ran on the driver path
    async with store.write_one() as session:  # kept back (wait=False): out before the exit
        await insert_rows(session, [item("later")], wait=False)
    assert await row(store, "later") == {"n": 0}
    assert store._kept.idle == 1  # type: ignore[union-attr]
    held = store._kept._idle[0][0]  # type: ignore[union-attr]
    assert not held.in_transaction()  # nothing begun on it through SQLAlchemy


async def row(store: Store, event_id: str) -> Any:
    async with store.read() as session:
        return (await execute(session, BY_EVENT, {"k_event": event_id})).scalar()


async def test_a_failed_session_does_not_keep_its_connection(pg_store: Store) -> None:
    store = pg_store
    async with store.write_one() as session:
        await insert_rows(session, [item("dup")])
    await pid(store)  # a kept connection, taken by the next session
    with pytest.raises(IntegrityError):
        async with store.write_one() as session:
            await insert_rows(session, [item("dup")])
    assert store._kept.idle == 0  # type: ignore[union-attr]
    assert await row(store, "dup") == {"n": 0}  # the next session works
    # a cancelled statement: the connection, an operation under way on it, is
    # closed for good instead of kept
    task = asyncio.create_task(sleep_read(store, 5.0))
    await asyncio.sleep(0.3)
    assert store._kept.idle == 0  # type: ignore[union-attr]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert store._kept.idle == 0  # type: ignore[union-attr]
    assert await asyncio.wait_for(row(store, "dup"), 3) == {"n": 0}
    assert store._kept.idle == 1  # type: ignore[union-attr]


async def sleep_read(store: Store, seconds: float) -> None:
    async with store.read() as session:
        await execute(session, SLEEP, {"k_seconds": seconds})


async def terminate(store: Store, backend: int) -> None:
    async with store.urgent_engine.connect() as conn:
        await conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": backend})


async def test_a_kept_connection_the_server_closed_is_replaced(pg_store: Store) -> None:
    store = pg_store
    before = await pid(store)
    await terminate(store, before)
    for _ in range(50):  # asyncpg sees the server's goodbye
        idle: AsyncConnection = store._kept._idle[0][0]  # type: ignore[union-attr]
        if idle.sync_connection.connection.driver_connection.is_closed():  # type: ignore[union-attr]
            break
        await asyncio.sleep(0.02)
    after = await pid(store)  # no error: a fresh connection
    assert after != before


async def test_an_idle_kept_connection_is_pinged_and_replaced_when_gone(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection dropped on the way without a word looks open; after
    `PING_IDLE_S` idle it is pinged first, as the pool would."""
    store = pg_store
    before = await pid(store)
    idle: AsyncConnection = store._kept._idle[0][0]  # type: ignore[union-attr]
    raw = idle.sync_connection.connection.driver_connection  # type: ignore[union-attr]
    monkeypatch.setattr(type(raw), "is_closed", lambda _: False)  # the goodbye never came
    await terminate(store, before)
    monkeypatch.setattr(kept, "PING_IDLE_S", 0.0)
    after = await pid(store)  # fails without the ping: the statement meets a dead socket
    assert after != before
    monkeypatch.setattr(kept, "PING_IDLE_S", 3600.0)
    assert await pid(store) == after  # recently used: not pinged, kept


async def test_dispose_gives_the_kept_connections_back(pg_store: Store) -> None:
    store = pg_store
    await pid(store)
    async with store.write_one(urgent=True) as session:
        await insert_rows(session, [item("u")])
    assert store._kept.idle == 1 and store._kept_urgent.idle == 1  # type: ignore[union-attr]
    await store.dispose()
    assert store._kept.idle == 0 and store._kept_urgent.idle == 0  # type: ignore[union-attr]


async def test_no_database_fails_at_the_first_statement_as_before(pg: Database) -> None:
    """A database that cannot be reached: the session's first statement
    raises SQLAlchemy's error, as the pooled connection's did."""
    url = pg.url.replace("127.0.0.1:5432", "127.0.0.1:9")
    store = Store(url, schema=pg.schema, pool_timeout=2)
    try:
        async with store.read() as session:
            with pytest.raises((DBAPIError, OSError)):
                await execute(session, BY_EVENT, {"k_event": "x"})
    finally:
        await store.dispose()


async def test_a_pool_too_small_to_spare_a_connection_keeps_none(pg: Database) -> None:
    """With one connection in all, none is kept out of the pool: a write
    after a read finds it there, and a session running statements on both
    paths does not wait for itself."""
    store = pg.store(pool_size=1, max_overflow=0, pool_timeout=2)
    await store.upgrade()
    try:
        assert store._kept is None and store._kept_urgent is not None
        await pid(store)
        async with store.write() as session:  # the pool's one connection is there
            await insert_rows(session, [item("w")])
        async with store.write_one() as session:  # the driver path, then the ORM
            await insert_rows(session, [item("x")])
            session.add(InboxItem(platform="test", event_id="y", conversation_key="c"))
        async with store.read() as session:
            assert (await session.exec(COUNT)).one()[0] == 3  # type: ignore[call-overload]
    finally:
        await store.dispose()
