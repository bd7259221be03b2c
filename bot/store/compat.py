"""Every use of a dependency's private names, in one place, checked at start.

The fast path (`[database] fast_path`, on by default) leans on parts of
aiosqlite, SQLAlchemy and its asyncpg adapter that are not their public API:

- aiosqlite: `bot.store.sqlite_driver` subclasses its `Connection` and
  `Cursor` (`AiosqliteConnection`, `AiosqliteCursor` here: the worker-thread
  call `_execute`, the queue `_tx`, the `sqlite3` connection `_connection`,
  `_running`, `_thread`, a cursor's `_cursor`, `aiosqlite.context.Result`);
- SQLAlchemy's asyncpg adapter (`adapter_statement`: `_execute_mutex`,
  `_transaction`, `_start_transaction`, `_prepare`, `_connection`,
  `_handle_exception`), run by `bot.store.direct`;
- the queue pool's `_do_get`, `_do_return_conn` and `_dec_overflow`
  (`KeepingPool`) and `sqlalchemy.util.concurrency`'s `await_` (`await_`);
- the ORM Session's `_new`, `_deleted` and `identity_map._modified`
  (`orm_used`);
- the compiler's expanded state and a connection's event dispatch, which
  `bot.store.direct` reads to compile and run statements itself.

`problems()` checks, once per process, that these names are there and behave
as relied on (a statement through the aiosqlite subclass on a database in
memory, a pool checkout and return, an object added to a Session, a statement
compiled with an IN list). When something is off (a dependency released a
change), `fast_path_usable` logs one WARNING and the Store runs the plain
path: stock aiosqlite through SQLAlchemy's dialect, SQLAlchemy Core on
asyncpg, SQLAlchemy's own pool with its pre-ping; none of the classes here.
`[database] fast_path = false` asks for the plain path on purpose.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, ClassVar, TypeVar

import aiosqlite
from sqlalchemy.orm import Session
from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry
from sqlalchemy.util import concurrency

log = logging.getLogger("switchboard.store")

T = TypeVar("T")


# -- aiosqlite ---------------------------------------------------------------


class AiosqliteConnection(aiosqlite.Connection):
    """aiosqlite's connection with the private parts `bot.store.sqlite_driver`
    uses given names. aiosqlite's own methods (connect, cursor, commit, close)
    send their calls through `_execute`, which comes to `worker_call`."""

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self.worker_call(partial(fn, *args, **kwargs) if args or kwargs else fn)

    async def worker_call(self, fn: Callable[[], Any]) -> Any:
        """`fn()` on the connection's worker thread, after what is queued there."""
        return await aiosqlite.Connection._execute(self, fn)  # type: ignore[no-untyped-call]

    def worker_queue(self, work: Callable[[], Any]) -> None:
        """Queue `work` on the worker thread without waiting for it."""
        self._tx.put_nowait((None, work))

    @property
    def raw(self) -> sqlite3.Connection | None:
        """The `sqlite3` connection (None: not open, or closed)."""
        return self._connection

    @property
    def running(self) -> bool:
        return bool(self._running)

    @property
    def _conn(self) -> sqlite3.Connection:
        # A closed connection fails as a database does (aiosqlite: ValueError).
        if self._connection is None:
            raise sqlite3.OperationalError("the database connection is closed")
        return self._connection

    def daemon_thread(self) -> None:
        """As SQLAlchemy's dialect does: the worker thread never blocks exit."""
        self._thread.daemon = True


class AiosqliteCursor(aiosqlite.Cursor):
    """aiosqlite's cursor with its `sqlite3` cursor named (`raw`)."""

    @property
    def raw(self) -> sqlite3.Cursor:
        return self._cursor


def awaitable(coroutine: Coroutine[Any, Any, T]) -> Any:
    """`coroutine` as aiosqlite returns a cursor: awaitable and an async
    context manager (`aiosqlite.context.Result`)."""
    from aiosqlite.context import Result

    return Result(coroutine)


# -- SQLAlchemy's asyncpg adapter ----------------------------------------------


async def adapter_statement(
    adapter: Any, sql: str, parameters: Any, many: bool
) -> tuple[list[Any] | None, Any]:
    """Run one statement on asyncpg under SQLAlchemy's adapter, exactly as the
    adapter would: under its lock, its transaction started if this is the
    first statement (it begins lazily), through its cache of prepared
    statements, asyncpg's errors translated by it (a duplicate key is still an
    `IntegrityError`). Returns (the rows, or None when the statement returns
    none; the prepared statement, for its status, or None for `many`)."""
    async with adapter._execute_mutex:
        if adapter._transaction is None:
            await adapter._start_transaction()
        try:
            if many:
                await adapter._connection.executemany(sql, parameters)
                return None, None
            prepared, attributes = await adapter._prepare(sql, 0)
            rows = await prepared.fetch(*parameters)
            return (rows if attributes else None), prepared
        except Exception as error:
            adapter._handle_exception(error)
            raise  # not reached: the adapter raises its own error


# -- the pool ------------------------------------------------------------------

await_: Callable[[Awaitable[T]], T] = getattr(concurrency, "await_", None) or getattr(
    concurrency, "await_only", None
)  # type: ignore[assignment]
"""SQLAlchemy's bridge from its sync event hooks to the loop: `await_`
(2.1), `await_only` before."""


class KeepingPool(AsyncAdaptedQueuePool):
    """A queue pool of `keep + extra` connections at most, the `extra` closed
    only once unneeded for `idle_s` (`bot.store.pool`). Made by `sized` (the
    sizes are class attributes, so that SQLAlchemy's `recreate` makes the
    same pool)."""

    keep: ClassVar[int] = 5
    """connections kept open however idle (`pool_size`)"""
    idle_s: ClassVar[float] = 60.0

    @classmethod
    def sized(cls, pool_size: int, max_overflow: int, idle_s: float) -> dict[str, Any]:
        """`create_async_engine`'s pool arguments for this pool."""
        pool = type("KeepingPool", (cls,), {"keep": pool_size, "idle_s": idle_s})
        return {"poolclass": pool, "pool_size": pool_size + max_overflow, "max_overflow": 0}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._needed_at = -float("inf")
        """when more than `keep` connections were last checked out at once"""

    def _do_get(self) -> ConnectionPoolEntry:
        record = super()._do_get()
        if self.checkedout() > self.keep:
            self._needed_at = time.monotonic()
        return record

    def _do_return_conn(self, record: ConnectionPoolEntry) -> None:
        unneeded = time.monotonic() - self._needed_at > self.idle_s
        if unneeded and self.checkedin() >= self.keep:
            try:
                record.close()
            finally:
                self._dec_overflow()
            return
        super()._do_return_conn(record)


# -- the ORM session -------------------------------------------------------------


def orm_used(sync: Session) -> bool:
    """Whether the ORM was used in `sync` since it began: a transaction of the
    Session's own, or objects added, deleted or changed. (Session's `new`,
    `deleted` and `dirty` answer it too, but build a set each: on the hot path
    every write asks; without those private names, it asks them.)"""
    try:
        return bool(
            sync.in_transaction() or sync._new or sync._deleted or sync.identity_map._modified
        )
    except AttributeError:
        return orm_used_plain(sync)


def orm_used_plain(sync: Session) -> bool:
    return bool(sync.in_transaction() or sync.new or sync.deleted or sync.dirty)


# -- the self-check ----------------------------------------------------------------

_checked: list[str] | None = None
_forced: str | None = None
_lock = threading.Lock()


def force_plain(reason: str | None) -> None:
    """Make `fast_path_usable` answer False for this process (`reason`), or
    back to the self-check's answer (None): for tests."""
    global _forced
    _forced = reason


def fast_path_usable() -> bool:
    """Whether the fast path may run: the self-check (once per process) found
    nothing amiss. When it did, one WARNING says what, the first time."""
    global _checked
    if _forced is not None:
        return False
    with _lock:
        if _checked is None:
            _checked = problems()
            if _checked:
                log.warning(
                    "store.fast_path_off the installed dependencies differ from what it "
                    "relies on (%s); running the plain path",
                    "; ".join(_checked),
                )
    return not _checked


def problems() -> list[str]:
    """What the fast path relies on that the installed versions lack (empty:
    nothing)."""
    found: list[str] = []
    for name, check in CHECKS:
        try:
            trouble = check()
        except Exception as exc:  # a check that cannot run is a mismatch
            trouble = f"{type(exc).__name__}: {exc}"
        if trouble:
            found.append(f"{name}: {trouble}")
    return found


def _missing(owner: Any, *names: str) -> str | None:
    absent = [name for name in names if not hasattr(owner, name)]
    return f"no {', '.join(absent)}" if absent else None


def _check_aiosqlite() -> str | None:
    """The names, then a statement, a queued call and a close on a database in
    memory, on a loop of its own (a thread: the caller's loop may be running)."""
    absent = _missing(aiosqlite.Connection, "_execute", "cursor", "commit", "close")
    if absent or not inspect.iscoroutinefunction(aiosqlite.Connection._execute):
        return absent or "_execute is not a coroutine function"
    from aiosqlite.context import Result  # noqa: F401  (the name is there)

    outcome: list[str | None] = []

    async def exercise() -> str | None:
        connection = AiosqliteConnection(partial(sqlite3.connect, ":memory:"), 64)
        connection.daemon_thread()
        await connection
        try:
            raw = connection.raw
            if not isinstance(raw, sqlite3.Connection) or not connection.running:
                return "the sqlite3 connection is not where it was"
            done = threading.Event()
            connection.worker_queue(done.set)
            answer = await connection.worker_call(lambda: raw.execute("SELECT 41 + 1").fetchone())
            if answer != (42,) or not done.is_set():
                return "a call on the worker thread did not run as expected"
            cursor = await connection.cursor()
            if not isinstance(getattr(cursor, "_cursor", None), sqlite3.Cursor):
                return "a cursor's sqlite3 cursor is not where it was"
            await cursor.close()
        finally:
            await connection.close()
        return None

    def run() -> None:
        outcome.append(asyncio.run(exercise()))

    thread = threading.Thread(target=run, name="store-compat-check", daemon=True)
    thread.start()
    thread.join(10)
    return outcome[0] if outcome else "the check did not finish"


def _check_asyncpg_adapter() -> str | None:
    from sqlalchemy.dialects.postgresql import asyncpg as dialect

    adapter_class = dialect.AsyncAdapt_asyncpg_connection
    absent = _missing(adapter_class, "_start_transaction", "_prepare", "_handle_exception")
    if absent:
        return absent
    adapter = adapter_class(None, object())  # type: ignore[no-untyped-call]
    absent = _missing(adapter, "_execute_mutex", "_transaction", "_connection")
    if absent:
        return absent
    if adapter._transaction is not None:
        return "a new adapter has a transaction"
    parameters = list(inspect.signature(adapter_class._prepare).parameters)
    if parameters[1:] != ["operation", "invalidate_timestamp"]:
        return f"_prepare takes {parameters[1:]}"
    return None


def _check_pool() -> str | None:
    if await_ is None:
        return "no sqlalchemy.util.concurrency.await_ or await_only"
    absent = _missing(AsyncAdaptedQueuePool, "_do_get", "_do_return_conn", "_dec_overflow")
    if absent:
        return absent

    class Fake:
        closed = 0

        def rollback(self) -> None:
            pass

        def close(self) -> None:
            Fake.closed += 1

    made = KeepingPool.sized(1, 1, idle_s=-1.0)
    pool = made["poolclass"](Fake, pool_size=made["pool_size"], max_overflow=0)
    first, second = pool.connect(), pool.connect()
    if pool.checkedout() != 2:
        return "two checkouts are not two connections"
    first.close()
    second.close()
    if (pool.checkedin(), Fake.closed) != (1, 1):
        return "a connection returned beyond the pool's size was not closed"
    pool.dispose()
    return None


def _check_session() -> str | None:
    from sqlalchemy import Column, Integer
    from sqlalchemy.orm import declarative_base

    base: Any = declarative_base()

    class Probe(base):  # type: ignore[misc]
        __tablename__ = "probe"
        id = Column(Integer, primary_key=True)

    session = Session()
    if orm_used(session):
        return "a new session looks used"
    session.add(Probe())
    if not orm_used(session) or not session._new:
        return "an added object is not in _new"
    if not hasattr(session, "_deleted") or not hasattr(session.identity_map, "_modified"):
        return "no _deleted or identity_map._modified"
    session.expunge_all()
    return None


def _check_compiler() -> str | None:
    from sqlalchemy import Column, Integer, MetaData, Table, bindparam, select
    from sqlalchemy.dialects import sqlite
    from sqlalchemy.engine import Connection

    absent = _missing(Connection, "dispatch")
    if absent:
        return absent
    table = Table("probe", MetaData(), Column("id", Integer), Column("n", Integer))
    statement = select(table.c.id).where(
        table.c.id.in_(bindparam("ids", expanding=True)), table.c.n == bindparam("n")
    )
    compiled: Any = statement.compile(dialect=sqlite.dialect(), column_keys=["ids", "n"])
    state = compiled.construct_expanded_state({"ids": [1, 2], "n": 3}, escape_names=False)
    names = state.parameter_expansion.get("ids")
    if names is None or len(names) != 2 or len(state.positiontup or ()) != 3:
        return "an IN list does not expand as relied on"
    if "n" not in compiled.binds or state.parameters.get("n") != 3:
        return "the compiled binds are not where they were"
    return None


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("aiosqlite", _check_aiosqlite),
    ("SQLAlchemy's asyncpg adapter", _check_asyncpg_adapter),
    ("SQLAlchemy's pool", _check_pool),
    ("SQLAlchemy's Session", _check_session),
    ("SQLAlchemy's compiler", _check_compiler),
]
"""The self-check's parts, by dependency (tests replace one to see a mismatch)."""
