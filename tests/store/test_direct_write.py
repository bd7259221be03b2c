"""A write transaction is one transaction whichever way its statements go.

On SQLite a write session's statements run through `bot.store.rows` go
straight to the driver, in a transaction begun and committed there
(`bot.store.direct.Write`); what runs through the Session (the ORM) or the
connection (a statement the direct path does not take) joins it. Whatever the
mix: all or nothing, one BEGIN and one COMMIT seen by listeners, and the store
works after a failure. On PostgreSQL the same calls run in the Session's
transaction: the same outcomes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import bindparam, event, text
from sqlalchemy import select as core_select
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from bot.store import Store, direct
from bot.store.models import InboxItem
from bot.store.rows import execute, insert_returning_ids, insert_rows, new_row
from tests.conftest import Database

pytestmark = pytest.mark.fast_path  # its mechanism (bot/store/compat.py)

BY_EVENT = core_select(col(InboxItem.event_id)).where(
    col(InboxItem.event_id) == bindparam("r_event")
)


def item(event_id: str) -> dict[str, Any]:
    return new_row(InboxItem, platform="test", event_id=event_id, conversation_key="c", payload={})


async def stored(store: Store) -> list[str]:
    async with store.read() as session:
        rows = await session.exec(select(InboxItem.event_id).order_by(col(InboxItem.id)))
        return list(rows.all())


@contextmanager
def transactions(store: Store) -> Iterator[list[str]]:
    """BEGIN, COMMIT and ROLLBACK as the engine's listeners see them."""
    seen: list[str] = []
    engine = store.engine.sync_engine

    def statement(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        if sql.split()[0].upper() in ("BEGIN", "SAVEPOINT"):
            seen.append(sql.split()[0].upper())

    def commit(_conn: Any) -> None:
        seen.append("COMMIT")

    def rollback(_conn: Any) -> None:
        seen.append("ROLLBACK")

    hooks = [("before_cursor_execute", statement), ("commit", commit), ("rollback", rollback)]
    for name, hook in hooks:
        event.listen(engine, name, hook)
    try:
        yield seen
    finally:
        for name, hook in hooks:
            event.remove(engine, name, hook)


async def test_sqlite_writes_run_on_the_driver(sqlite_store: Store) -> None:
    async with sqlite_store.write() as session:
        assert isinstance(session.sync_session.info.get(direct.WRITE), direct.Write)
        await insert_rows(session, [item("a")])
    assert await stored(sqlite_store) == ["a"]


@pytest.mark.parametrize("orm_first", [True, False])
async def test_core_and_orm_writes_commit_together_once(store: Store, orm_first: bool) -> None:
    with transactions(store) as seen:
        async with store.write() as session:
            if orm_first:
                session.add(InboxItem(platform="test", event_id="orm", conversation_key="c"))
                await session.flush()
            await insert_rows(session, [item("core")], wait=False)
            if not orm_first:
                session.add(InboxItem(platform="test", event_id="orm", conversation_key="c"))
    assert sorted(await stored(store)) == ["core", "orm"]
    if store.is_sqlite:  # PostgreSQL's driver sends its own BEGIN, unseen
        assert seen == ["BEGIN", "COMMIT"]
    else:
        assert seen == ["COMMIT"]


@pytest.mark.parametrize("orm_fails", [True, False])
async def test_a_failure_on_either_path_keeps_nothing_of_both(
    store: Store, orm_fails: bool
) -> None:
    async with store.write() as session:
        await insert_rows(session, [item("taken")])
    with pytest.raises(IntegrityError):
        async with store.write() as session:
            await insert_rows(session, [item("core" if orm_fails else "taken")], wait=False)
            event_id = "taken" if orm_fails else "orm"
            session.add(InboxItem(platform="test", event_id=event_id, conversation_key="c"))
    assert await stored(store) == ["taken"]
    async with store.write() as session:  # and the store goes on
        await insert_rows(session, [item("after")])
    assert await stored(store) == ["taken", "after"]


async def test_a_statement_through_the_connection_joins_the_transaction(store: Store) -> None:
    """Several rows with RETURNING go through SQLAlchemy's connection (its
    multi-row INSERT), not the driver path: still in the one transaction."""
    with transactions(store) as seen:
        async with store.write() as session:
            await insert_rows(session, [item("first")], wait=False)
            ids = await insert_returning_ids(session, [item("x"), item("y")])
            await insert_rows(session, [item("last")])
    assert len(ids) == 2 and ids[0] < ids[1]
    assert await stored(store) == ["first", "x", "y", "last"]
    assert seen.count("COMMIT") == 1 and seen.count("BEGIN") == (1 if store.is_sqlite else 0)
    held = store._held  # SQLite's writer: its connection's books closed too
    assert held is None or not held.sync_connection.in_transaction()


async def test_an_error_in_the_body_after_writes_on_both_paths_undoes_them(store: Store) -> None:
    with pytest.raises(RuntimeError, match="changed my mind"):
        async with store.write() as session:
            await insert_rows(session, [item("a")])
            await insert_returning_ids(session, [item("b"), item("c")])
            session.add(InboxItem(platform="test", event_id="d", conversation_key="c"))
            await session.flush()
            raise RuntimeError("changed my mind")
    assert await stored(store) == []
    async with store.write() as session:
        await insert_rows(session, [item("e")])
    assert await stored(store) == ["e"]


async def test_a_write_that_runs_nothing_commits_nothing(store: Store) -> None:
    with transactions(store) as seen:
        async with store.write():
            pass
    assert seen == []
    async with store.write() as session:
        await insert_rows(session, [item("a")])
    assert await stored(store) == ["a"]


async def test_a_queued_write_whose_failure_ended_the_transaction_fails_the_commit(
    sqlite_store: Store,
) -> None:
    """SQLite rolls the whole transaction back on some errors (a full disk; a
    trigger's RAISE(ROLLBACK)): the commit after it has nothing open to
    commit, and must still raise rather than report the lost rows stored."""
    store = sqlite_store
    async with store.write() as session:
        await session.exec(  # type: ignore[call-overload]
            text(
                "CREATE TRIGGER refuse BEFORE INSERT ON inbox WHEN NEW.event_id = 'boom'"
                " BEGIN SELECT RAISE(ROLLBACK, 'refused'); END"
            )
        )
    with pytest.raises(IntegrityError, match="refused"):
        async with store.write() as session:
            await insert_rows(session, [item("a")], wait=False)
            await insert_rows(session, [item("boom")], wait=False)
    assert await stored(store) == []
    async with store.write() as session:  # and the store goes on
        await insert_rows(session, [item("b")])
    assert await stored(store) == ["b"]


async def test_echo_logs_what_runs_on_the_driver_once(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """`database.echo` is for seeing the SQL: the statements run straight on
    the driver (the hot path's) are logged too, each once, with the BEGIN and
    COMMIT of a SQLite write."""
    engine_log = logging.getLogger("sqlalchemy.engine")
    level = engine_log.level
    store = database.store(echo=True)
    try:
        await store.upgrade()
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="sqlalchemy.engine"):
            async with store.write() as session:
                await insert_rows(session, [item("a")])
            async with store.read() as session:
                found = await execute(session, BY_EVENT, {"r_event": "a"})
        assert found.scalar() == "a"
    finally:
        await store.dispose()
        engine_log.setLevel(level)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("sqlalchemy.engine")]
    assert sum(line.startswith("INSERT INTO inbox") for line in lines) == 1, lines
    assert sum(line.startswith("SELECT inbox.event_id") for line in lines) == 1, lines
    assert any("'a'" in line for line in lines)  # the parameters, as SQLAlchemy's echo has them
    if store.is_sqlite:
        assert lines.count("BEGIN IMMEDIATE") == 1 and lines.count("COMMIT") == 1, lines


async def test_after_a_commit_in_the_middle_the_next_statements_are_a_transaction_again(
    store: Store,
) -> None:
    """A session committed in the middle of a write goes on as a new
    transaction (as the Session autobegins one): what follows is all or
    nothing again."""
    with pytest.raises(RuntimeError, match="after the commit"):
        async with store.write() as session:
            session.add(InboxItem(platform="test", event_id="a", conversation_key="c"))
            await insert_rows(session, [item("b")])
            await session.commit()
            await insert_rows(session, [item("c")], wait=False)
            await insert_returning_ids(session, [item("d"), item("e")])
            raise RuntimeError("after the commit")
    assert sorted(await stored(store)) == ["a", "b"]
