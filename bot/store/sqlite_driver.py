"""aiosqlite with one worker-thread hop per statement instead of four.

aiosqlite runs every call of a connection on its own thread. Through
SQLAlchemy a statement costs four of those hand-offs (make a cursor, execute,
fetch the rows, close the cursor), each a queue put, a thread wake-up and a
future resolved back on the event loop; on a busy machine the wake-ups, not
SQLite, are most of a statement's cost. Here a cursor is made and closed on the
calling thread (no I/O: check_same_thread is off, as SQLAlchemy sets it for a
file database), and execute fetches the rows in the same hop, so a statement
is one hand-off, a commit another; a commit or rollback with no transaction
open (a read in autocommit, the pool's reset) is none. Everything else is
aiosqlite's.

`connect` is the `async_creator` of the Store's SQLite engine; the URL's
parameters are not applied by SQLAlchemy then, so it opens the file itself the
way the pysqlite dialect would (check_same_thread off, `uri=True` for
``file:`` names).
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Iterable
from typing import Any

import aiosqlite
from aiosqlite.context import Result


def _execute_and_fetch(
    cursor: sqlite3.Cursor, begin: str | None, sql: str, parameters: Any
) -> list[Any] | None:
    if begin:
        cursor.connection.execute(begin)
    cursor.execute(sql, parameters)
    return cursor.fetchall() if cursor.description else None


def _execute_many(cursor: sqlite3.Cursor, begin: str | None, sql: str, parameters: Any) -> None:
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

    def __init__(self, conn: aiosqlite.Connection, cursor: sqlite3.Cursor) -> None:
        super().__init__(conn, cursor)
        self._rows: deque[Any] = deque()

    async def __aenter__(self) -> Cursor:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def execute(self, sql: str, parameters: Iterable[Any] | None = None) -> Cursor:
        parameters = [] if parameters is None else parameters
        begin = self._conn.take_begin()  # type: ignore[attr-defined]
        rows = await self._execute(  # type: ignore[no-untyped-call]
            _execute_and_fetch, self._cursor, begin, sql, parameters
        )
        self._rows = deque(rows or ())
        return self

    async def executemany(self, sql: str, parameters: Iterable[Iterable[Any]]) -> Cursor:
        self._rows.clear()
        begin = self._conn.take_begin()  # type: ignore[attr-defined]
        await self._execute(_execute_many, self._cursor, begin, sql, parameters)  # type: ignore[no-untyped-call]
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
    _begin: str | None = None
    """a BEGIN to send with the next statement (`begin_with_next`)"""

    def cursor(self) -> Result[Cursor]:  # type: ignore[override]
        return Result(self._new_cursor())

    async def _new_cursor(self) -> Cursor:
        return Cursor(self, self._conn.cursor())

    async def statement(
        self, sql: str, parameters: Any, *, many: bool = False
    ) -> tuple[list[Any] | None, int]:
        """Run one statement (an executemany when `many`) and fetch its rows,
        in one hop: (the rows, or None for a statement returning none; the
        rowcount)."""
        return await self._execute(  # type: ignore[no-any-return,no-untyped-call]
            _run_statement, self._conn, self.take_begin(), sql, parameters, many
        )

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
        if self._conn.in_transaction:  # else nothing to do: no hop (reads, pool resets)
            await super().commit()

    async def rollback(self) -> None:
        self._begin = None
        if self._conn.in_transaction:
            await super().rollback()


def connect(database: str) -> Connection:
    """A connection to `database` (not opened until awaited)."""

    def connector() -> sqlite3.Connection:
        return sqlite3.connect(database, check_same_thread=False, uri=database.startswith("file:"))

    connection = Connection(connector, iter_chunk_size=64)
    connection._thread.daemon = True  # as SQLAlchemy's dialect does: never block exit
    return connection
