"""aiosqlite with one worker-thread hop per statement instead of four.

aiosqlite runs every call of a connection on its own thread. Through
SQLAlchemy a statement costs four of those hand-offs (make a cursor, execute,
fetch the rows, close the cursor), each a queue put, a thread wake-up and a
future resolved back on the event loop; on a busy machine the wake-ups, not
SQLite, are most of a statement's cost. Here a cursor is made and closed on the
calling thread (no I/O: check_same_thread is off, as SQLAlchemy sets it for a
file database), and execute fetches the rows in the same hop, so a statement
is one hand-off, a commit another; a commit or rollback with no transaction
open (a read in autocommit, the pool's reset) is none. A write transaction's
BEGIN goes out with its first statement (`begin_with_next`), and a statement
whose outcome the caller does not need before the commit can be queued
without any hand-off back (`statement_later`): the worker thread runs a
connection's calls in order, so its failure is raised by the next call that
waits, and nothing queued after it runs. Everything else is aiosqlite's.

`connect` is the `async_creator` of the Store's SQLite engine; the URL's
parameters are not applied by SQLAlchemy then, so it opens the file itself the
way the pysqlite dialect would (check_same_thread off, `uri=True` for
``file:`` names).
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import aiosqlite
from aiosqlite.context import Result


def _execute_and_fetch(
    owner: Connection, cursor: sqlite3.Cursor, begin: str | None, sql: str, parameters: Any
) -> list[Any] | None:
    owner.raise_deferred_failure()
    if begin:
        cursor.connection.execute(begin)
    cursor.execute(sql, parameters)
    return cursor.fetchall() if cursor.description else None


def _execute_many(
    owner: Connection, cursor: sqlite3.Cursor, begin: str | None, sql: str, parameters: Any
) -> None:
    owner.raise_deferred_failure()
    if begin:
        cursor.connection.execute(begin)
    cursor.executemany(sql, parameters)


def _run_statement(
    conn: sqlite3.Connection, begin: str | None, sql: str, parameters: Any, many: bool
) -> tuple[list[Any] | None, int]:
    if begin:
        conn.execute(begin)
    cursor = conn.cursor()
    try:
        if many:
            cursor.executemany(sql, parameters)
            return None, cursor.rowcount
        cursor.execute(sql, parameters)
        rows = cursor.fetchall() if cursor.description else None
        return rows, cursor.rowcount
    finally:
        cursor.close()


class Cursor(aiosqlite.Cursor):
    """Rows are fetched with the statement; fetch calls read them from memory."""

    def __init__(self, conn: Connection, cursor: sqlite3.Cursor) -> None:
        super().__init__(conn, cursor)
        self._owner = conn
        self._rows: deque[Any] = deque()

    async def __aenter__(self) -> Cursor:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def execute(self, sql: str, parameters: Iterable[Any] | None = None) -> Cursor:
        parameters = [] if parameters is None else parameters
        owner = self._owner
        rows = await owner.hop(
            _execute_and_fetch, owner, self._cursor, owner.take_begin(), sql, parameters
        )
        self._rows = deque(rows or ())
        return self

    async def executemany(self, sql: str, parameters: Iterable[Iterable[Any]]) -> Cursor:
        self._rows.clear()
        owner = self._owner
        await owner.hop(_execute_many, owner, self._cursor, owner.take_begin(), sql, parameters)
        return self

    async def fetchone(self) -> Any:
        return self._rows.popleft() if self._rows else None

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        count = self._cursor.arraysize if size is None else size
        return [self._rows.popleft() for _ in range(min(count, len(self._rows)))]

    async def fetchall(self) -> list[Any]:
        rows, self._rows = list(self._rows), deque()
        return rows

    async def close(self) -> None:
        self._rows.clear()
        self._cursor.close()


class Connection(aiosqlite.Connection):
    """One hop per statement; BEGIN sent with a transaction's first statement;
    statements whose outcome the caller does not wait for (`statement_later`)
    queued without a hop back, their failure raised by the next call."""

    _begin: str | None = None
    """a BEGIN to send with the next statement (`begin_with_next`)"""
    _queued = False
    """work was queued on the worker thread (`statement_later`, or a call whose
    wait ended early or failed) since a call last had its answer: the
    transaction's state is not known on this side"""
    _failed: tuple[sqlite3.Error, str] | None = None
    """a queued statement's failure and its SQL (read and written on the
    worker thread only)"""

    def cursor(self) -> Result[Cursor]:  # type: ignore[override]
        return Result(self._new_cursor())

    async def _new_cursor(self) -> Cursor:
        return Cursor(self, self._conn.cursor())

    async def hop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` on the worker thread, after whatever is queued. Until it
        has answered, the transaction's state is not known here: when the wait
        ends early (the task is cancelled while `fn` still runs there) or
        fails, the next commit or rollback goes to the thread and finds out."""
        self._queued = True
        result = await self._execute(fn, *args)  # type: ignore[no-untyped-call]
        self._queued = False
        return result

    async def statement(
        self, sql: str, parameters: Any, *, many: bool = False
    ) -> tuple[list[Any] | None, int]:
        """Run one statement (an executemany when `many`) and fetch its rows,
        in one hop: (the rows, or None for a statement returning none; the
        rowcount). Raises a queued statement's failure instead, running nothing."""
        return await self.hop(  # type: ignore[no-any-return]
            self._statement, self.take_begin(), sql, parameters, many
        )

    def statement_later(self, sql: str, parameters: Any, *, many: bool = False) -> None:
        """Queue one statement without waiting for it: no hop back to the event
        loop. A failure is raised by this connection's next statement or
        commit (and the statements queued after it do not run); a rollback
        forgets it."""
        if not self._running or not self._connection:
            raise ValueError("Connection closed")
        begin = self.take_begin()
        self._queued = True
        self._tx.put_nowait((None, partial(self._statement_later, begin, sql, parameters, many)))

    def _statement(
        self, begin: str | None, sql: str, parameters: Any, many: bool
    ) -> tuple[list[Any] | None, int]:
        self.raise_deferred_failure()
        return _run_statement(self._conn, begin, sql, parameters, many)

    def _statement_later(self, begin: str | None, sql: str, parameters: Any, many: bool) -> None:
        if self._failed is not None:
            return  # the transaction failed: nothing more runs in it
        try:
            _run_statement(self._conn, begin, sql, parameters, many)
        except sqlite3.Error as error:
            self._failed = (error, sql)

    def raise_deferred_failure(self) -> None:
        """(Worker thread) Raise a queued statement's failure, once. The error
        carries that statement's SQL as `sql`."""
        if self._failed is not None:
            (error, sql), self._failed = self._failed, None
            error.sql = sql  # type: ignore[attr-defined]
            raise error

    def begin_with_next(self, begin: str) -> None:
        """Send `begin` (a BEGIN statement) with the next statement, in its hop:
        a write transaction starts without a round trip of its own. A commit
        or rollback before any statement sends nothing."""
        self._begin = begin

    def take_begin(self) -> str | None:
        begin, self._begin = self._begin, None
        return begin

    async def commit(self) -> None:
        self._begin = None
        # Nothing to do without a transaction (reads, pool resets): no hop.
        if self._queued or self._conn.in_transaction:
            await self.hop(self._commit)

    def _commit(self) -> None:
        self.raise_deferred_failure()
        if self._conn.in_transaction:
            self._conn.commit()

    async def rollback(self) -> None:
        self._begin = None
        if self._queued or self._conn.in_transaction:
            await self.hop(self._rollback)

    def _rollback(self) -> None:
        self._failed = None
        if self._conn.in_transaction:
            self._conn.rollback()


def connect(database: str) -> Connection:
    """A connection to `database` (not opened until awaited)."""

    def connector() -> sqlite3.Connection:
        return sqlite3.connect(database, check_same_thread=False, uri=database.startswith("file:"))

    connection = Connection(connector, iter_chunk_size=64)
    connection._thread.daemon = True  # as SQLAlchemy's dialect does: never block exit
    return connection
