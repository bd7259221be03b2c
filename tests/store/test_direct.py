"""Prepared statements run straight on the driver (`bot.store.direct`)
and give what SQLAlchemy's Core path gives: typed values (JSON, booleans,
aware datetimes), RETURNING rows, rowcounts, expanding IN lists, SQLAlchemy's
exceptions, statements seen by event listeners. A write transaction's BEGIN
goes out with its first statement and still holds the write lock until the
commit. On PostgreSQL the same calls run straight on asyncpg, in the session's
transaction."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import bindparam, event, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store import Store, asyncpg_driver, direct, sqlite_driver
from bot.store.models import InboxItem
from bot.store.rows import execute, insert_rows

pytestmark = pytest.mark.fast_path  # its mechanism (bot/store/compat.py)

CLAIM = (
    update(InboxItem)
    .where(
        col(InboxItem.conversation_key) == bindparam("t_key"),
        col(InboxItem.state).in_(["pending", "running"]),
    )
    .values(
        state="running",
        attempts=col(InboxItem.attempts) + 1,
        lease_expires_at=bindparam("t_until"),
    )
    .returning(
        col(InboxItem.event_id),
        col(InboxItem.payload),
        col(InboxItem.deliver),
        col(InboxItem.attempts),
        col(InboxItem.lease_expires_at),
        col(InboxItem.created_at),
    )
)
BY_EVENTS = (
    select(  # type: ignore[call-overload]
        col(InboxItem.event_id),
        col(InboxItem.payload),
        col(InboxItem.deliver),
        col(InboxItem.lease_expires_at),
    )
    .where(col(InboxItem.event_id).in_(bindparam("t_events", expanding=True)))
    .order_by(col(InboxItem.id))
)
CREATED = datetime(2026, 11, 25, 12, 30, 15, 123456, tzinfo=UTC)


def items(*events: str, key: str = "c1") -> list[InboxItem]:
    return [
        InboxItem(
            platform="test",
            event_id=event,
            conversation_key=key,
            payload={"text": f"hello {event}", "nested": {"n": i, "ok": True}},
            deliver=i % 2 == 0,
            created_at=CREATED + timedelta(seconds=i),
        )
        for i, event in enumerate(events)
    ]


async def core(store: Store, statement: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What SQLAlchemy's own Core path returns for the same statement."""
    async with store.read() as session:
        connection = await session.connection()
        return [tuple(row) for row in (await connection.execute(statement, params)).all()]


async def test_returning_rows_are_typed_as_sqlalchemy_types_them(store: Store):
    async with store.write() as session:
        await insert_rows(session, items("e1", "e2", "e3"))
        await insert_rows(session, items("other", key="c2"))
    until = datetime(2026, 11, 25, 13, 0, tzinfo=UTC)
    async with store.write() as session:
        result = await execute(session, CLAIM, {"t_key": "c1", "t_until": until})
        claimed = sorted(tuple(row) for row in result.all())
    assert result.rowcount == 3
    assert [row[0] for row in claimed] == ["e1", "e2", "e3"]
    _event, payload, deliver, attempts, expires, created = claimed[1]
    assert payload == {"text": "hello e2", "nested": {"n": 1, "ok": True}}
    assert deliver is False and attempts == 1
    assert expires == until and expires.tzinfo is not None
    assert created == CREATED + timedelta(seconds=1)
    # Read back by SQLAlchemy's own path: the values written were the same.
    stored = await core(store, BY_EVENTS, {"t_events": ["e1", "e2", "e3"]})
    assert [(r[0], r[1], r[2], r[3]) for r in stored] == [(c[0], c[1], c[2], c[4]) for c in claimed]


@pytest.mark.parametrize("events", [["e2"], ["e1", "e3"], ["e3", "e2", "e1", "missing"]])
async def test_an_expanding_in_list_of_any_length_matches_the_core_path(
    store: Store, events: list[str]
):
    async with store.write() as session:
        await insert_rows(session, items("e1", "e2", "e3"))
    async with store.read() as session:
        rows = [tuple(row) for row in await execute(session, BY_EVENTS, {"t_events": events})]
        first = (await execute(session, BY_EVENTS, {"t_events": events})).first()
        assert (await execute(session, BY_EVENTS, {"t_events": ["none"]})).first() is None
    assert rows == await core(store, BY_EVENTS, {"t_events": events})
    assert sorted(row[0] for row in rows) == sorted(e for e in events if e != "missing")
    assert first is not None and first.event_id == rows[0][0]  # rows have names too


async def test_a_failing_statement_raises_sqlalchemys_error_and_keeps_nothing(store: Store):
    async with store.write() as session:
        await insert_rows(session, items("e1"))
    with pytest.raises(IntegrityError):
        async with store.write() as session:
            await insert_rows(session, items("e2", "e3"))
            await insert_rows(session, items("e1"))  # (platform, event_id) is unique
    async with store.write() as session:  # the connection is usable again
        await insert_rows(session, items("e4"))
    stored = await core(store, BY_EVENTS, {"t_events": ["e1", "e2", "e3", "e4"]})
    assert [row[0] for row in stored] == ["e1", "e4"]


async def test_on_sqlite_statements_go_to_the_driver_and_listeners_still_see_them(
    sqlite_store: Store,
):
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))

    event.listen(sqlite_store.engine.sync_engine, "before_cursor_execute", record)
    async with sqlite_store.write() as session:
        assert direct.driver_of(await session.connection(), CLAIM, {"t_key": "x"}) is not None
        await insert_rows(session, items("e1", "e2"))
        result = await execute(session, CLAIM, {"t_key": "c1", "t_until": CREATED})
    assert result.rowcount == 2
    assert [s.split()[0] for s, _ in seen] == ["BEGIN", "INSERT", "UPDATE"]
    assert seen[2][1][-3:] == ("c1", "pending", "running")  # the caller's key, the IN constants


async def test_a_write_transaction_holds_the_lock_from_its_first_statement_to_commit(
    sqlite_store: Store, tmp_path: Path
):
    other = sqlite3.connect(tmp_path / "sqlite.db", timeout=0, isolation_level=None)

    def other_writes() -> bool:
        try:
            other.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            assert "locked" in str(exc)
            return False
        other.execute("ROLLBACK")
        return True

    async with sqlite_store.write() as session:
        await session.connection()
        assert other_writes()  # BEGIN waits for the first statement: nothing held yet
        await insert_rows(session, items("e1"))
        assert not other_writes()
        await execute(session, CLAIM, {"t_key": "c1", "t_until": CREATED})
        assert not other_writes()
    assert other_writes()
    async with sqlite_store.write():
        pass  # no statement: no BEGIN, no COMMIT, nothing held
    assert other_writes()
    other.close()


async def test_a_database_locked_at_the_first_statement_fails_cleanly(
    sqlite_store: Store, tmp_path: Path
):
    other = sqlite3.connect(tmp_path / "sqlite.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    with pytest.raises(OperationalError, match="locked"):
        async with sqlite_store.write() as session:
            await insert_rows(session, items("e1"))
    other.execute("ROLLBACK")
    other.close()
    async with sqlite_store.write() as session:
        await insert_rows(session, items("e2"))
    stored = await core(sqlite_store, BY_EVENTS, {"t_events": ["e1", "e2"]})
    assert [row[0] for row in stored] == ["e2"]


async def test_each_database_has_its_driver_path(store: Store):
    async with store.read() as session:
        driver = direct.driver_of(await session.connection(), CLAIM, {"t_key": "x"})
    kind = asyncpg_driver.Driver if store.dialect == "postgresql" else sqlite_driver.Connection
    assert isinstance(driver, kind)


async def test_a_driver_statement_first_in_a_transaction_is_inside_it(store: Store):
    """asyncpg's adapter begins lazily, at the first statement: when that
    statement takes the driver path, the transaction still begins before it,
    so an error after it rolls it back (and listeners saw it)."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement.split()[0])

    event.listen(store.engine.sync_engine, "before_cursor_execute", record)
    with pytest.raises(RuntimeError):
        async with store.write() as session:
            await insert_rows(session, items("e1"))
            raise RuntimeError("after the first statement")
    async with store.write() as session:
        await insert_rows(session, items("e2"))
        await execute(session, CLAIM, {"t_key": "c1", "t_until": CREATED})
    stored = await core(store, BY_EVENTS, {"t_events": ["e1", "e2"]})
    assert [(row[0], row[3]) for row in stored] == [("e2", CREATED)]
    assert "INSERT" in seen and "UPDATE" in seen


async def test_a_queued_insert_that_fails_fails_its_transaction_at_the_commit(store: Store):
    async with store.write() as session:
        await insert_rows(session, items("e1"))
    with pytest.raises(IntegrityError):
        async with store.write() as session:
            await insert_rows(session, items("e2"), wait=False)
            await insert_rows(session, items("e1"), wait=False)  # a duplicate
            await insert_rows(session, items("e3"), wait=False)
    async with store.write() as session:
        await insert_rows(session, items("e4"), wait=False)
    stored = await core(store, BY_EVENTS, {"t_events": ["e1", "e2", "e3", "e4"]})
    assert [row[0] for row in stored] == ["e1", "e4"]


async def test_a_queued_failure_is_raised_by_the_next_statement_that_waits(store: Store):
    async with store.write() as session:
        await insert_rows(session, items("e1"))
    with pytest.raises(IntegrityError) as raised:
        async with store.write() as session:
            await insert_rows(session, items("e1"), wait=False)
            await execute(session, CLAIM, {"t_key": "c1", "t_until": CREATED})
            pytest.fail("the claim ran after a failed insert")
    assert "INSERT INTO inbox" in str(raised.value)  # names the statement that failed
    stored = await core(store, BY_EVENTS, {"t_events": ["e1"]})
    assert stored[0][3] is None  # the claim did not run


async def test_an_error_after_a_queued_failure_rolls_back_and_the_next_transaction_works(
    store: Store,
):
    async with store.write() as session:
        await insert_rows(session, items("e1"))
    with pytest.raises(RuntimeError):
        async with store.write() as session:
            await insert_rows(session, items("e1"), wait=False)
            raise RuntimeError("mine")
    async with store.write() as session:
        await insert_rows(session, items("e2"), wait=False)
        await execute(session, text("SELECT 1"))  # sends it, on its own
        claimed = (await execute(session, CLAIM, {"t_key": "c1", "t_until": CREATED})).all()
    assert sorted(row[0] for row in claimed) == ["e1", "e2"]


async def test_postgres_sends_a_kept_back_write_with_the_next_statement(store: Store):
    """PostgreSQL: a write not waited for goes out with the transaction's next
    statement, as a data-modifying CTE of it (one round trip for both), which
    sees the table as it was before both; SQLite runs them in order."""
    async with store.write() as session:
        await insert_rows(session, items("e1"))
    with _statements(store) as seen:
        async with store.write() as session:
            await insert_rows(session, items("e2"), wait=False)
            claimed = (await execute(session, CLAIM, {"t_key": "c1", "t_until": CREATED})).all()
            after = (await execute(session, CLAIM, {"t_key": "c1", "t_until": CREATED})).all()
    if store.is_sqlite:
        assert sorted(row[0] for row in claimed) == ["e1", "e2"]
        kinds = [s.split()[0] for s in seen if s != "BEGIN IMMEDIATE"]
        assert kinds == ["INSERT", "UPDATE", "UPDATE"]
    else:
        assert [row[0] for row in claimed] == ["e1"]  # e2 is not there yet for it
        assert seen[0].startswith("WITH w0 AS (INSERT INTO inbox") and "UPDATE inbox" in seen[0]
        assert len(seen) == 2
    assert sorted(row[0] for row in after) == ["e1", "e2"]  # the next statement sees it


def _statements(store: Store):  # type: ignore[no-untyped-def]
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(" ".join(statement.split()))

    @contextlib.contextmanager
    def watching():  # type: ignore[no-untyped-def]
        event.listen(store.engine.sync_engine, "before_cursor_execute", record)
        try:
            yield seen
        finally:
            event.remove(store.engine.sync_engine, "before_cursor_execute", record)

    return watching()


async def test_queued_statements_never_run_outside_their_transaction(
    sqlite_store: Store, tmp_path: Path
):
    """The BEGIN queued with them fails (another process holds the lock): the
    statements queued after it do not run in autocommit."""
    other = sqlite3.connect(tmp_path / "sqlite.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(OperationalError, match="locked"):
        async with sqlite_store.write() as session:
            await insert_rows(session, items("e1"), wait=False)
            await insert_rows(session, items("e2"), wait=False)
    other.execute("ROLLBACK")
    other.close()
    assert await core(sqlite_store, BY_EVENTS, {"t_events": ["e1", "e2"]}) == []
    async with sqlite_store.write() as session:
        await insert_rows(session, items("e3"), wait=False)
    assert len(await core(sqlite_store, BY_EVENTS, {"t_events": ["e3"]})) == 1


async def test_a_write_cancelled_while_its_statement_runs_leaves_no_transaction_behind(
    sqlite_store: Store, tmp_path: Path
):
    """/stop or shutdown cancels a task whose statement is on the driver's
    thread (here: waiting for the write lock, which then comes free): the
    statement still runs there, and the rollback that follows must reach it,
    or the pooled connection would keep an open transaction and the lock."""
    other = sqlite3.connect(tmp_path / "sqlite.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")

    async def write() -> None:
        async with sqlite_store.write() as session:
            await insert_rows(session, items("cancelled"))

    task = asyncio.create_task(write())
    await asyncio.sleep(0.05)  # the BEGIN is waiting on the worker thread
    task.cancel()
    other.execute("ROLLBACK")  # the lock comes free: the BEGIN and the INSERT run
    other.close()
    with pytest.raises(asyncio.CancelledError):
        await task
    for event_id in ("a", "b", "c"):  # whichever pooled connection comes next
        async with sqlite_store.write() as session:
            await insert_rows(session, items(event_id))
    stored = await core(sqlite_store, BY_EVENTS, {"t_events": ["cancelled", "a", "b", "c"]})
    assert [row[0] for row in stored] == ["a", "b", "c"]


async def test_when_the_rollback_after_a_failure_fails_too_the_first_error_is_raised(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """A duplicate failing the commit, then a rollback that fails as well (the
    database went away at that moment): the caller still gets the duplicate
    (what intake acts on), the failed rollback is logged, and the store works."""
    async with store.write() as session:
        await insert_rows(session, items("e1"))
    # SQLite's writes roll back on the driver (`direct.Write`), others through the Session
    owner: Any = sqlite_driver.Connection if store.is_sqlite else AsyncSession
    real = owner.rollback
    failures = []

    async def rollback_fails_once(self: Any) -> None:
        if not failures:
            failures.append(True)
            if store.is_sqlite:
                raise sqlite3.OperationalError("disk I/O error")
            raise OperationalError("ROLLBACK", None, sqlite3.OperationalError("disk I/O error"))
        await real(self)

    monkeypatch.setattr(owner, "rollback", rollback_fails_once)
    with pytest.raises(IntegrityError):
        async with store.write() as session:
            await insert_rows(session, items("e2"), wait=False)
            await insert_rows(session, items("e1"), wait=False)  # a duplicate
    assert failures == [True]
    assert "store.rollback_failed OperationalError" in caplog.text
    async with store.write() as session:
        await insert_rows(session, items("e3"))
    stored = await core(store, BY_EVENTS, {"t_events": ["e1", "e2", "e3"]})
    assert [row[0] for row in stored] == ["e1", "e3"]


async def test_a_connection_cut_mid_transaction_loses_the_transaction_not_the_store(
    store: Store,
):
    """The database ends the session's connection (PostgreSQL: its backend is
    terminated; SQLite has no server to cut) after the transaction's first
    driver statement: the next one fails with SQLAlchemy's error, nothing of
    the transaction is kept, and the next transaction works on a new
    connection."""
    if store.dialect != "postgresql":
        pytest.skip("a server connection to cut")
    with pytest.raises(DBAPIError):
        async with store.write() as session:
            await insert_rows(session, items("e1"))
            pid = (await session.exec(text("SELECT pg_backend_pid()"))).one()[0]  # type: ignore[call-overload]
            async with store.write() as other:
                await other.exec(text(f"SELECT pg_terminate_backend({int(pid)})"))  # type: ignore[call-overload]
            await execute(session, CLAIM, {"t_key": "c1", "t_until": CREATED})
    async with store.write() as session:
        await insert_rows(session, items("e2"))
    stored = await core(store, BY_EVENTS, {"t_events": ["e1", "e2"]})
    assert [row[0] for row in stored] == ["e2"]
