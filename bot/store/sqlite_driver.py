"""aiosqlite whose statements run on the event loop's thread, or at most one
worker-thread hop per statement instead of four.

aiosqlite runs every call of a connection on its own thread. Through
SQLAlchemy a statement costs four of those hand-offs (make a cursor, execute,
fetch the rows, close the cursor), each a queue put, a thread wake-up and a
future resolved back on the event loop; on a busy machine the wake-ups, not
SQLite, are most of a statement's cost. Here a cursor is made and closed on the
calling thread (no I/O: check_same_thread is off, as SQLAlchemy sets it for a
file database), and execute fetches the rows in the same call, so a statement
is one call, a commit another; a commit or rollback with no transaction open
(a read in autocommit, the pool's reset) is none. A write transaction's BEGIN
goes out with its first statement (`begin_with_next`), and a statement whose
outcome the caller does not need before the commit is not waited for
(`statement_later`): its failure is raised by the next call, and nothing after
it runs.

Where a call runs (`Connection.patience_ms`): the Store's connections run
their statements on the calling thread, the event loop's. In WAL mode with
synchronous=NORMAL a statement or a commit is tens of microseconds of SQLite
and no fsync, less than one hand-off costs. What could make the loop wait is
kept off it: SQLite's busy_timeout is 0 there, and a statement that finds the
database locked (another process writing; this process's writers queue on a
lock before they begin) runs again on the worker thread, which waits for the
lock as long as the busy timeout says; the automatic WAL checkpoint (which
syncs the files) is off, and a PASSIVE one runs every so many commits on a
connection and thread of its own, or, when those never find the WAL quiet
enough to restart it, on this connection's worker thread, after its
statements (`bot.store.checkpoints`); reads that may scan much ask for the worker
(`off_the_loop`). A connection with work queued on its worker thread (after a
cancelled wait, say) sends its next calls there, in order, until one answers.
Everything else is aiosqlite's; its private parts used here are named in
`bot.store.compat` (`AiosqliteConnection`), checked at start.

`connect` is the `async_creator` of the Store's SQLite engine; the URL's
parameters are not applied by SQLAlchemy then, so it opens the file itself the
way the pysqlite dialect would, with the URL's parameters as that dialect
reads them (`connect_args`), check_same_thread off and `uri=True` for
``file:`` names.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any, ClassVar

from sqlalchemy.dialects.sqlite.aiosqlite import SQLiteDialect_aiosqlite
from sqlalchemy.engine import URL
from sqlalchemy.exc import SAWarning

from bot.store.checkpoints import Checkpoints
from bot.store.compat import AiosqliteConnection, AiosqliteCursor, awaitable

log = logging.getLogger("switchboard.store")


def _execute_and_fetch(cursor: sqlite3.Cursor, sql: str, parameters: Any) -> list[Any] | None:
    cursor.execute(sql, parameters)
    return cursor.fetchall() if cursor.description else None


def _run_statement(
    conn: sqlite3.Connection, sql: str, parameters: Any, many: bool
) -> tuple[list[Any] | None, int]:
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


def _data_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def _busy(error: sqlite3.Error) -> bool:
    """SQLite could not take a lock without waiting (SQLITE_BUSY and its
    extended codes): the statement did nothing, and may be run again."""
    return getattr(error, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY


class Cursor(AiosqliteCursor):
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
            _execute_and_fetch, self.raw, sql, parameters, begin=owner.take_begin()
        )
        self._rows = deque(rows or ())
        return self

    async def executemany(self, sql: str, parameters: Iterable[Iterable[Any]]) -> Cursor:
        self._rows.clear()
        owner = self._owner
        if not isinstance(parameters, list | tuple):
            parameters = list(parameters)  # may be run twice (`Connection.hop`)
        await owner.hop(self.raw.executemany, sql, parameters, begin=owner.take_begin())
        return self

    async def fetchone(self) -> Any:
        return self._rows.popleft() if self._rows else None

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        count = self.raw.arraysize if size is None else size
        return [self._rows.popleft() for _ in range(min(count, len(self._rows)))]

    async def fetchall(self) -> list[Any]:
        rows, self._rows = list(self._rows), deque()
        return rows

    async def close(self) -> None:
        self._rows.clear()
        if self._owner.settled():
            self.raw.close()
        else:
            # Its statement may still run on the worker thread (its wait was
            # cancelled): closed here, under the statement being stepped, the
            # process crashes (sqlite3 frees what the worker is about to read).
            self._owner.queue(self.raw.close)


_off_the_loop: ContextVar[bool] = ContextVar("sqlite_off_the_loop", default=False)


@contextmanager
def off_the_loop() -> Iterator[None]:
    """Statements in this block run on the connections' worker threads, not the
    calling thread: for reads that may scan much (reports), which would stall
    the event loop."""
    token = _off_the_loop.set(True)
    try:
        yield
    finally:
        _off_the_loop.reset(token)


YIELD_EVERY = 64
"""Calls on the loop's thread between two that give the loop a turn first."""


class Connection(AiosqliteConnection):
    """One hop per statement, or none (`patience_ms`); BEGIN sent with a
    transaction's first statement; statements whose outcome the caller does not
    wait for (`statement_later`) not waited for, their failure raised by the
    next call."""

    patience_ms: int | None = None
    """None: every call runs on the connection's worker thread. A number:
    calls run on the calling thread (the event loop's: ~20-50 µs of SQLite
    instead of a hand-off each way) with SQLite's busy_timeout at 0, and one
    that finds the database locked (another process writing, say) runs again
    on the worker thread, waiting up to this long for the lock, so the loop
    never waits on a lock. Set once the connection is set up (`bot.store.db`)."""
    checkpoints: Checkpoints | None = None
    """with `patience_ms`: SQLite's automatic checkpoint is off, and these
    count this side's commits and say when it runs one (on the worker thread)"""
    _begin: str | None = None
    """a BEGIN to send with the next statement (`begin_with_next`)"""
    _queued = False
    """work was queued on the worker thread (`statement_later`, a checkpoint,
    a cursor's close, or a call whose wait ended early or failed) and may not
    have run yet: the next calls go there too, after it, until the last one
    queued has its answer. Nothing on this thread touches the connection or
    its cursors meanwhile."""
    _sent = 0
    """items queued on the worker thread so far: a call's answer shows the
    thread idle only when nothing was queued after it"""
    _failed: tuple[sqlite3.Error, str] | None = None
    """a statement's failure that nobody waited for, and its SQL"""
    _inline_calls: ClassVar[int] = 0
    """calls run on the loop's thread since one of them gave the loop a turn"""

    def cursor(self) -> Any:
        return awaitable(self._new_cursor())

    async def _new_cursor(self) -> Cursor:
        return Cursor(self, self._conn.cursor())

    async def worker_call(self, fn: Callable[[], Any]) -> Any:
        # Until a call has answered, what the worker thread is doing is not
        # known here: when the wait ends early (the task is cancelled while
        # `fn` still runs there) or fails, the next calls go to the thread too.
        # The answer shows the worker idle only when nothing was queued after
        # this call (by another task sharing the connection: a shielded
        # rollback, say).
        if not self.running or self.raw is None:
            raise sqlite3.OperationalError("the database connection is closed")
        self._queued = True
        self._sent += 1
        mine = self._sent
        result = await super().worker_call(fn)
        if self._sent == mine:
            self._queued = False
        return result

    def queue(self, work: Callable[[], Any]) -> None:
        """Run `work` on the worker thread, after what is queued there, without
        waiting for it (its failure is its own to record)."""
        self._queued = True
        self._sent += 1
        self.worker_queue(work)

    def _here(self) -> bool:
        """Whether the next call may run on the calling thread: the connection
        runs there, nothing is queued on its worker thread, and the caller
        did not ask for the worker (`off_the_loop`)."""
        return self.patience_ms is not None and not self._queued and not _off_the_loop.get()

    async def hop(self, fn: Callable[..., Any], *args: Any, begin: str | None = None) -> Any:
        """`fn(*args)`, after `begin` if given, once a queued statement's
        failure is raised (instead): on this thread (`patience_ms`) or on the
        worker thread, after whatever is queued there."""
        if self._here():
            Connection._inline_calls += 1
            if Connection._inline_calls >= YIELD_EVERY:
                # Statements here never give the loop a turn (their hand-offs
                # did): long runs of them (a sweep, a batch) let it run now and
                # then, so nothing waits on them for long.
                Connection._inline_calls = 0
                await asyncio.sleep(0)
            self.raise_deferred_failure()
            conn = self._conn
            try:
                if begin:
                    conn.execute(begin)
                    begin = None
                return fn(*args)
            except sqlite3.OperationalError as error:
                if not _busy(error):
                    raise
            # Locked: a statement that fails so did nothing; wait on the worker.
        return await self.worker_call(partial(self._patient, self._begin_then, begin, fn, args))

    def _begin_then(self, begin: str | None, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        self.raise_deferred_failure()
        if begin:
            self._conn.execute(begin)
        return fn(*args)

    def _patient(self, fn: Callable[..., Any], *args: Any) -> Any:
        """(Worker thread) `fn(*args)` with SQLite's busy_timeout at
        `patience_ms` (it is 0 while the connection runs on the loop)."""
        if self.patience_ms is None:
            return fn(*args)
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {int(self.patience_ms)}")
        try:
            return fn(*args)
        finally:
            conn.execute("PRAGMA busy_timeout = 0")

    async def statement(
        self, sql: str, parameters: Any, *, many: bool = False
    ) -> tuple[list[Any] | None, int]:
        """Run one statement (an executemany when `many`) and fetch its rows,
        in one call: (the rows, or None for a statement returning none; the
        rowcount). Raises a queued statement's failure instead, running nothing."""
        return await self.hop(  # type: ignore[no-any-return]
            _run_statement, self._conn, sql, parameters, many, begin=self.take_begin()
        )

    async def data_version(self) -> int:
        """SQLite's `PRAGMA data_version`: it changes when another connection
        has committed since this one last looked (`bot.store.outside`)."""
        return await self.hop(_data_version, self._conn)  # type: ignore[no-any-return]

    def statement_later(self, sql: str, parameters: Any, *, many: bool = False) -> None:
        """Run one statement without waiting for its outcome: at once on this
        thread (`patience_ms`), or queued on the worker thread without a hop
        back. A failure is raised by this connection's next statement or
        commit (and the statements after it do not run); a rollback forgets it."""
        if not self.running or self.raw is None:
            raise sqlite3.OperationalError("the database connection is closed")
        begin = self.take_begin()
        if self._here():
            if self._failed is not None:
                return  # the transaction failed: nothing more runs in it
            conn = self._conn
            try:
                if begin:
                    conn.execute(begin)
                    begin = None
                _run_statement(conn, sql, parameters, many)
                return
            except sqlite3.Error as error:
                if not _busy(error):
                    self._failed = (error, sql)
                    return
        self.queue(partial(self._patient, self._statement_later, begin, sql, parameters, many))

    def _statement_later(self, begin: str | None, sql: str, parameters: Any, many: bool) -> None:
        if self._failed is not None:
            return  # the transaction failed: nothing more runs in it
        try:
            if begin:
                self._conn.execute(begin)
            _run_statement(self._conn, sql, parameters, many)
        except sqlite3.Error as error:
            self._failed = (error, sql)

    def raise_deferred_failure(self) -> None:
        """Raise a queued statement's failure, once. The error carries that
        statement's SQL as `sql`."""
        if self._failed is not None:
            (error, sql), self._failed = self._failed, None
            error.sql = sql  # type: ignore[attr-defined]
            raise error

    def begin_with_next(self, begin: str) -> None:
        """Send `begin` (a BEGIN statement) with the next statement, in its hop:
        a write transaction starts without a round trip of its own. A commit
        or rollback before any statement sends nothing."""
        self._begin = begin

    def in_write(self) -> bool:
        """A transaction is begun: its BEGIN waits for the next statement, or
        went out (statements may be queued on the worker thread)."""
        return self._begin is not None or self.transaction_open()

    def transaction_open(self) -> bool:
        """A transaction's statements went out (or are queued): a commit has
        something to do (never on a closed connection)."""
        connection = self.raw
        return self._queued or (connection is not None and connection.in_transaction)

    def take_begin(self) -> str | None:
        begin, self._begin = self._begin, None
        return begin

    def settled(self) -> bool:
        """Every statement sent has run and a failure among them is known
        (nothing queued on the worker thread): the next call would raise it."""
        return not self._queued

    async def control(self, sql: str) -> None:
        """Run a transaction-control statement (RELEASE a savepoint), after a
        queued statement's failure is raised instead, as any statement."""
        await self.hop(_run_statement, self._conn, sql, (), False)

    async def roll_back_to(self, savepoint: str) -> bool:
        """Undo what ran since `savepoint` (a queued statement's failure among
        it forgotten) and release it; nothing to undo when the savepoint never
        went out (no statement since). False: the transaction itself is gone
        (SQLite ended it on the error), with everything before the savepoint."""
        if self._begin is not None:  # the savepoint waits for a statement: none ran
            self._begin = None
            return True
        self._failed = None
        if self._here():
            return self._roll_back_to(savepoint)
        # after what is queued there, whose failure it forgets too
        return bool(await self.worker_call(partial(self._patient, self._roll_back_to, savepoint)))

    def _roll_back_to(self, savepoint: str) -> bool:
        self._failed = None
        if not self._conn.in_transaction:
            return False
        self._conn.execute(f"ROLLBACK TO {savepoint}")
        self._conn.execute(f"RELEASE {savepoint}")
        return True

    async def commit(self) -> None:
        self._begin = None
        # A queued statement's failure that ended the transaction with it
        # (SQLite rolls back on some errors: a full disk, a trigger's
        # RAISE(ROLLBACK)) is raised here too: nothing of it was committed.
        self.raise_deferred_failure()
        # Nothing to do without a transaction (reads, pool resets): no hop.
        if self._queued or self._conn.in_transaction:
            await self.hop(self._commit)
            if self.checkpoints is not None and self.checkpoints.committed():
                self.queue(self._checkpoint)

    def _commit(self) -> None:
        if self._conn.in_transaction:
            self._conn.commit()

    def _checkpoint(self) -> None:
        """(Worker thread) Copy what readers no longer need from the WAL into
        the database, without waiting for anyone (PASSIVE), between this
        connection's writes: the next one restarts the WAL."""
        try:
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as error:
            log.warning("store.checkpoint_failed %s: %s", type(error).__name__, error)

    async def rollback(self) -> None:
        self._begin = None
        if self._queued or self._conn.in_transaction or self._failed is not None:
            if self._here():
                try:
                    self._rollback()
                    return
                except sqlite3.OperationalError as error:
                    if not _busy(error):
                        raise
            await self.worker_call(partial(self._patient, self._rollback))

    def _rollback(self) -> None:
        self._failed = None
        if self._conn.in_transaction:
            self._conn.rollback()


def connect_args(url: URL) -> tuple[str, dict[str, Any]]:
    """The file name and the `sqlite3.connect` options a SQLite URL asks for,
    read as SQLAlchemy's dialect reads them: ``timeout``, ``uri=true`` with the
    URI's own parameters (``mode``, ``cache``, …), and the rest it knows. (It
    warns about parameters it ignores when the engine is made: not twice.)"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        args, options = SQLiteDialect_aiosqlite().create_connect_args(url)
    return str(args[0]), dict(options)


def connect(database: str, **options: Any) -> Connection:
    """A connection to `database` (not opened until awaited) with `options`
    for `sqlite3.connect` (`connect_args`); never checking the thread: the
    connection runs on the loop's thread and on its worker's."""
    options = {"uri": database.startswith("file:"), **options, "check_same_thread": False}

    def connector() -> sqlite3.Connection:
        opened: sqlite3.Connection = sqlite3.connect(database, **options)
        return opened

    connection = Connection(connector, iter_chunk_size=64)
    connection.daemon_thread()
    return connection
