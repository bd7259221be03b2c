"""The async engine and sessions.

SQLite (aiosqlite) is tuned for a service: WAL, busy_timeout, synchronous=NORMAL,
foreign keys on, and write transactions that begin IMMEDIATE so two writers
never deadlock upgrading a read lock. Reads begin DEFERRED and run alongside.
PostgreSQL (asyncpg) is the same code with another URL.

A SQLite database file this service creates is readable by its owner only
(`bot.store.files`).

`echo` logs each SQL statement once, through our handler (so redaction
applies): the `sqlalchemy.engine` logger goes to INFO. (SQLAlchemy's own
`echo=True` adds a second handler, and every statement printed twice.)

Over 500 lines: the Store is one concept, the kinds of session it hands out,
each beside the engine, lock and connections it keeps for them, on both paths
(`bot.store.compat`); cut in two, one kind's rules would sit away from the
connections they share.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    create_async_engine,
)
from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.errors import StartupError
from bot.store import compat, direct, mechanisms, outside, sqlite_driver
from bot.store.checkpoints import Checkpoints
from bot.store.diagnose import explain, missing_tables
from bot.store.files import ensure_directory, private_file
from bot.store.group import Group, Ticket, WriteStats
from bot.store.kept import Kept
from bot.store.pool import KeepingPool, ping_on_checkout
from bot.store.sessions import Sessions, in_direct_read, in_transaction, on_kept

log = logging.getLogger("switchboard.store")

_READONLY = "switchboard_readonly"
URGENT_POOL_SIZE = 5


class Store:
    """Owns the engine. `write()` and `read()` hand out sessions in a transaction."""

    def __init__(
        self,
        url: str,
        *,
        echo: bool = False,
        busy_timeout_ms: int = 5000,
        schema: str | None = None,
        pool_size: int = 10,
        max_overflow: int = 20,
        pool_timeout: float = 30.0,
        sqlite_on_loop: bool = True,
        group_commit: bool = True,
        fast_path: bool = True,
    ) -> None:
        self.url = make_url(url)
        self.fast_path = fast_path and compat.fast_path_usable()
        """The speed mechanisms on (`bot.store.compat`); off: the plain path,
        stock aiosqlite and SQLAlchemy Core (`[database] fast_path`, or the
        installed dependencies not what the fast path relies on)."""
        self.dialect = self.url.get_backend_name()
        connect_args: dict[str, Any] = {}
        pool: dict[str, Any] = {}
        if echo:
            logging.getLogger("sqlalchemy.engine").setLevel(logging.INFO)
        if self.dialect == "sqlite":
            ensure_directory(self.url.database)
            private_file(self.url.database)
            # Each aiosqlite connection is a thread. Last in, first out: work
            # done one message at a time keeps reusing the one warm connection
            # (thread) instead of rotating through the pool, so a message is
            # not handed between threads; concurrent work still opens more.
            if self.url.database not in (None, "", ":memory:"):
                # (SQLAlchemy's own choice for a file since 2.1; 2.0 chose NullPool)
                pool = {"poolclass": AsyncAdaptedQueuePool, "pool_use_lifo": True}
            if self.fast_path and pool and not mechanisms.off("sqlite_driver"):
                database, options = _sqlite_connect_args(self.url)
                # one thread hand-off per statement (`bot.store.sqlite_driver`)
                pool["async_creator"] = lambda: sqlite_driver.connect(database, **options)
        elif self.fast_path:
            pool = {**_pool(pool_size, max_overflow), "pool_timeout": pool_timeout}
            # statements run straight on asyncpg (`bot.store.direct.driver_of`)
            pool["execution_options"] = {direct.ON_DRIVER: not mechanisms.off("plans")}
        else:
            pool = {
                "pool_size": pool_size,
                "max_overflow": max_overflow,
                "pool_timeout": pool_timeout,
                "pool_pre_ping": True,
            }
        if self.dialect != "sqlite":
            # pg_stat_activity names the service's connections (and the schema's)
            settings = {"application_name": f"switchboard:{schema}" if schema else "switchboard"}
            if schema:
                settings["search_path"] = schema
            connect_args["server_settings"] = settings
        self.schema = schema
        self.engine: AsyncEngine = create_async_engine(url, connect_args=connect_args, **pool)
        # PostgreSQL: a few connections of their own for what must never queue
        # behind runs (accepting messages within the platform's deadline, leases,
        # health checks), so a saturated pool delays work, not intake.
        self.urgent_engine: AsyncEngine = self.engine
        if self.dialect != "sqlite":
            urgent: dict[str, Any] = {
                "pool_size": URGENT_POOL_SIZE,
                "max_overflow": URGENT_POOL_SIZE * 2,
                "pool_pre_ping": True,
            }
            if self.fast_path:
                urgent = {
                    **_pool(URGENT_POOL_SIZE, URGENT_POOL_SIZE * 2),
                    "execution_options": {direct.ON_DRIVER: not mechanisms.off("plans")},
                }
            self.urgent_engine = create_async_engine(
                url, connect_args=connect_args, pool_timeout=pool_timeout, **urgent
            )
        self._reads_on_loop = False
        """SQLite with statements on the loop: reads use `_held_reader`"""
        self._checkpoints: Checkpoints | None = None
        """SQLite with statements on the loop: the WAL's checkpoints"""
        if self.dialect == "sqlite":
            on_loop = self._reads_on_loop = sqlite_on_loop and "async_creator" in pool
            if on_loop:
                self._checkpoints = Checkpoints(database)
            _tune_sqlite(self.engine, busy_timeout_ms, self._checkpoints)
        elif self.fast_path:
            for engine in {self.engine, self.urgent_engine}:
                ping_on_checkout(engine)
        # SQLite has one writer at a time. Queue this process's writers on a lock
        # (fair, FIFO; busy_timeout still covers other processes sharing the
        # file), where those queued together share a commit (`bot.store.group`).
        self._write_lock = asyncio.Lock() if self.dialect == "sqlite" else None
        self._group = Group(self._write_lock or asyncio.Lock(), self._release_writer, group_commit)
        self.outside = outside.OutsideWrites()
        """SQLite: what another process wrote, seen where a message starts (its
        intake, a wakeup's claim: `write(fresh=True)`, `bot.store.outside`)"""
        self._writer = Sessions(self.engine)
        self._held: AsyncConnection | None = None
        self._held_writer = self._writer
        self._held_write: direct.Write | None = None
        """the held connection's write transactions on its driver, when it is
        this service's (`direct.Write`)"""
        self._held_reader: AsyncConnection | None = None
        """SQLite: the connection kept for reads on the loop (`in_direct_read`)"""
        self._reader_lock = asyncio.Lock()
        self._urgent = Sessions(self.urgent_engine)
        self._kept: Kept | None = None
        """PostgreSQL: connections kept for `read` and `write_one` (`bot.store.kept`)"""
        self._kept_urgent: Kept | None = None
        self._held_version: outside.ConnectionVersion | None = None
        """SQLite's plain path: the held connection's data version (`fresh`)"""
        if self.dialect != "sqlite" and self.fast_path and not mechanisms.off("kept"):
            self._kept = Kept.within(self.engine, pool_size, max_overflow)
            self._kept_urgent = Kept.within(
                self.urgent_engine, URGENT_POOL_SIZE, URGENT_POOL_SIZE * 2
            )
        # Reads run outside a transaction on both (SQLite: no BEGIN, see
        # `_tune_sqlite`; PostgreSQL: autocommit, no BEGIN and COMMIT round
        # trips); at READ COMMITTED each statement saw its own snapshot anyway.
        reading: dict[str, Any] = {_READONLY: True}
        if self.dialect != "sqlite":
            reading["isolation_level"] = "AUTOCOMMIT"
        self._reader = Sessions(self.engine.execution_options(**reading))
        self._alone = Sessions(self.engine.execution_options(isolation_level="AUTOCOMMIT"))
        self._urgent_alone = Sessions(
            self.urgent_engine.execution_options(isolation_level="AUTOCOMMIT")
        )

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @property
    def sqlite_writes(self) -> WriteStats | None:
        """SQLite: this process's writes so far (waits, shared commits)."""
        return self._group.stats if self._write_lock is not None else None

    @asynccontextmanager
    async def write(self, *, fresh: bool = False) -> AsyncIterator[AsyncSession]:
        """A session in a write transaction, committed on exit, rolled back on
        error. `fresh` (where a message starts: its intake, a wakeup's claim,
        a recovered message's; before anything of it is read from the caches):
        on SQLite, first see whether another process wrote since
        (`bot.store.outside`; PostgreSQL's instances hear it instead)."""
        if self._write_lock is None:
            async with in_transaction(self._writer) as session:
                yield session
            return
        await self._group.acquire()
        ticket, failed = Ticket(), None
        try:
            sessions = await self._sqlite_writer()
            write = self._held_write
            if write is None:
                if fresh and self._held_version is not None:
                    await self.outside.look(self._held_version)
                transaction = in_transaction(sessions)
            else:
                if fresh:
                    await self.outside.look(write.driver)
                transaction = self._group.write(sessions, write, ticket)
            async with transaction as session:
                yield session
        except BaseException as error:
            # Back to the pool, whose reset rolls back what the failure left open
            # (SQLAlchemy's rollback after a failed COMMIT misses the driver).
            if not self._group.open:
                await self._release_writer()
            if ticket.future is None:
                raise
            failed = error  # rolled back to its savepoint: raised with the group's outcome
        finally:
            self._write_lock.release()
        if ticket.future is not None:  # committed with the writes queued behind it
            await ticket.future
        elif ticket.led:  # it committed for others: they go on first, in order
            await asyncio.sleep(0)
        if failed is not None:
            raise failed

    async def look_elsewhere(self) -> None:
        """SQLite: see now whether another process wrote since the last look, as
        an intake does (`write(fresh=True)`, nothing sent); PostgreSQL hears it."""
        if self._write_lock is not None:
            async with self.write(fresh=True):
                pass

    @asynccontextmanager
    async def write_one(self, *, urgent: bool = False) -> AsyncIterator[AsyncSession]:
        """A session for one write statement, atomic by itself (several parts
        combined: `bot.store.rows.combined`): on PostgreSQL in autocommit, no
        BEGIN and COMMIT round trips (`urgent`: on the connections kept for
        intake and leases, as `write_urgent`); on SQLite, `write()`. On the
        plain path its parts are statements of their own: a transaction."""
        if self._write_lock is not None or not self.fast_path:
            async with self.write_urgent() if urgent else self.write() as session:
                yield session
            return
        sessions, kept = (
            (self._urgent_alone, self._kept_urgent) if urgent else (self._alone, self._kept)
        )
        async with in_transaction(sessions) if kept is None else on_kept(sessions, kept) as session:
            yield session

    @asynccontextmanager
    async def write_urgent(self, *, fresh: bool = False) -> AsyncIterator[AsyncSession]:
        """`write()` on the connections kept for intake and leases (PostgreSQL)."""
        if self._write_lock is None:
            async with in_transaction(self._urgent) as session:
                yield session
            return
        async with self.write(fresh=fresh) as session:
            yield session

    async def _sqlite_writer(self) -> Sessions:
        """(Under the write lock) Sessions on the one connection SQLite's writes
        use: they take turns on the lock anyway, so the connection stays
        checked out between them instead of going back to the pool and out
        again for each. One found invalidated (a rollback that failed) or
        closed is replaced."""
        held = self._held
        if held is None or held.closed or held.invalidated:
            await self._release_writer()
            held = self._held = await self.engine.connect()
            self._held_writer = Sessions(held)
            driver = _driver_of(held)
            self._held_write = None if driver is None else direct.Write(held, driver)
            self._held_version = outside.ConnectionVersion(held) if driver is None else None
        return self._held_writer

    async def _direct_reader(
        self,
    ) -> tuple[AsyncConnection, sqlite_driver.Connection] | None:
        """SQLite on the loop: the connection kept for reads (and its driver),
        connected (again) when there is none usable; None when its driver is
        not this service's (the read goes the usual way)."""
        held = self._held_reader
        if held is None or held.closed or held.invalidated:
            async with self._reader_lock:  # one connects; the others wait for it
                held = self._held_reader
                if held is None or held.closed or held.invalidated:
                    await self._release_reader()
                    held = await self.engine.connect()
                    await held.execution_options(**{_READONLY: True})
                    self._held_reader = held
        driver = _driver_of(held)
        return None if driver is None else (held, driver)

    async def _release_reader(self) -> None:
        held, self._held_reader = self._held_reader, None
        if held is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(held.close())

    async def _release_writer(self) -> None:
        held, self._held = self._held, None
        self._held_write = self._held_version = None
        if held is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(held.close())

    @asynccontextmanager
    async def _writes_finished(self) -> AsyncIterator[None]:
        """SQLite: the block runs once the writes holding or queued on the lock
        (tasks not stopped yet) have finished, and their open group committed,
        the lock held (`DISPOSE_WAIT_S` at most: then it runs anyway, logged)."""
        lock = self._write_lock
        if lock is None:
            yield
            return
        try:
            async with asyncio.timeout(DISPOSE_WAIT_S):  # (wait_for may lose a lock it got)
                await lock.acquire()
        except TimeoutError:
            log.warning("store.dispose_before_writes_finished after %.0fs", DISPOSE_WAIT_S)
            yield
            return
        try:
            with contextlib.suppress(Exception):  # failed: its writes were told
                await self._group.commit_open()
            yield
        finally:
            lock.release()

    async def ping(self) -> None:
        """One round trip to the database (on the urgent connections)."""
        async with self.urgent_engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    async def ping_tables(self) -> None:
        """One round trip that also needs our tables (readiness: the database
        answers and its schema is there)."""
        async with self.urgent_engine.connect() as conn:
            await conn.execute(text("SELECT 1 FROM inbox LIMIT 1"))

    @asynccontextmanager
    async def read(self, *, heavy: bool = False) -> AsyncIterator[AsyncSession]:
        """A session for reads: autocommit statements (on SQLite never blocking
        writers); several statements are not one snapshot. `heavy`: reads that
        may scan much (reports), kept off the event loop's thread on SQLite."""
        if not heavy and self._kept is not None:  # PostgreSQL
            async with on_kept(self._reader, self._kept) as session:
                yield session
            return
        if not heavy:
            reader = await self._direct_reader() if self._reads_on_loop else None
            if reader is None:
                async with in_transaction(self._reader) as session:
                    yield session
                return
            try:
                async with in_direct_read(self._reader, *reader) as session:
                    yield session
            except DBAPIError:
                await self._release_reader()  # a fresh one for the next read
                raise
            return
        with sqlite_driver.off_the_loop():
            async with in_transaction(self._reader) as session:
                yield session

    @asynccontextmanager
    async def read_warm(self) -> AsyncIterator[AsyncSession]:
        """`read()` for the reads that follow this process's own writes (a
        run's history, after its intake): on SQLite, when no write is under
        way or queued and none is left open for a group, on the writer's
        connection, its write lock held meanwhile (a write that comes waits
        for the read). Every commit of another connection drops a SQLite
        connection's page cache, so the reader's is cold after each of ours,
        while the writer's keeps what its own writes touched: a
        conversation's history read so costs about a third less. Reads only:
        a write in the block would wait for the lock it holds."""
        lock = self._write_lock
        if lock is not None and not lock.locked() and self._writer_idle():
            async with lock:
                write = self._held_write
                if write is not None and self._writer_idle():  # acquiring may have waited
                    reading = in_direct_read(self._reader, write.connection, write.driver)
                    async with reading as session:
                        yield session
                    return
        async with self.read() as session:
            yield session

    def _writer_idle(self) -> bool:
        """SQLite: the writer's connection is there, usable on the loop, and
        no transaction is open on it (none begun, none left open for a group,
        nothing queued on its worker thread)."""
        write = self._held_write
        if write is None or not self._reads_on_loop or self._group.open:
            return False
        held = write.connection
        return not (held.closed or held.invalidated or write.driver.in_write())

    async def upgrade(self) -> None:
        """Apply every Alembic migration (idempotent), then check that every table
        is there. A failure is a `StartupError` saying what is wrong and what to do
        (`bot.store.diagnose`)."""
        from bot.store.migrate import MigrationError, absent_tables, at_head, current, upgrade

        try:
            if not await at_head(self.engine):  # else Alembic would find nothing to do
                await upgrade(self.engine)
            absent = await absent_tables(self.engine)
            if absent:
                raise missing_tables(self.url, absent, await current(self.engine))
        except (SQLAlchemyError, MigrationError, OSError) as exc:
            raise explain(exc, self.url, self.schema) from exc

    async def dispose(self) -> None:
        await self._group.close()
        async with self._writes_finished():
            await self._release_writer()
        await self._release_reader()
        for kept in (self._kept, self._kept_urgent):
            if kept is not None:
                await kept.close()
        await self.engine.dispose()
        if self.urgent_engine is not self.engine:
            await self.urgent_engine.dispose()
        if self._checkpoints is not None:
            await self._checkpoints.close()


DISPOSE_WAIT_S = 10.0
"""How long disposing waits for SQLite's writes in progress to finish."""


def _pool(size: int, overflow: int) -> dict[str, Any]:
    """PostgreSQL's pool on the fast path (`bot.store.pool`)."""
    if mechanisms.off("keeping_pool"):
        return {"pool_size": size, "max_overflow": overflow}
    return KeepingPool.sized(size, overflow)


def _driver_of(held: AsyncConnection | None) -> sqlite_driver.Connection | None:
    """The driver under a held connection when it is this service's SQLite
    driver (statements on the loop), else None."""
    if mechanisms.off("plans"):
        return None
    sync = held.sync_connection if held is not None else None
    driver = sync.connection.driver_connection if sync is not None else None
    return driver if isinstance(driver, sqlite_driver.Connection) else None


def _sqlite_connect_args(url: URL) -> tuple[str, dict[str, Any]]:
    """`sqlite_driver.connect_args`, its complaint about a parameter (a
    ``timeout`` that is not a number) told as a bad setting."""
    try:
        return sqlite_driver.connect_args(url)
    except (ValueError, TypeError) as exc:
        raise StartupError(
            f"the SQLite database URL has a parameter that is not valid ({exc})",
            "Fix the parameters after '?' in [database] url (SWITCHBOARD__DATABASE__URL).",
        ) from exc


def _tune_sqlite(
    engine: AsyncEngine, busy_timeout_ms: int, checkpoints: Checkpoints | None
) -> None:
    """SQLite's settings on each new connection; with `checkpoints`, its
    statements run on the event loop (`bot.store.sqlite_driver`)."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: ConnectionPoolEntry) -> None:
        # Take transaction control away from the driver: we emit BEGIN ourselves.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA foreign_keys = ON")
            # Savepoints' journals in memory: a group commit's writes each run
            # in a savepoint (`bot.store.group`), and on SQLite's default a
            # savepoint's journal goes to a temporary file once past 64 KiB (a
            # turn's rows change more pages than that): some 48 write() calls
            # a message in a burst. Temporary tables and sorts are kept in
            # memory too: the reports' are aggregates (rows per user, per day).
            cursor.execute("PRAGMA temp_store = MEMORY")
            if checkpoints is not None:
                # Statements run on the event loop's thread from here on: it
                # never waits for a lock or syncs a checkpoint (`sqlite_driver`).
                cursor.execute("PRAGMA busy_timeout = 0")
                cursor.execute("PRAGMA wal_autocheckpoint = 0")
        finally:
            cursor.close()
        if checkpoints is not None:
            driver = dbapi_conn.driver_connection
            driver.patience_ms = int(busy_timeout_ms)
            driver.checkpoints = checkpoints

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Reads run in autocommit (no BEGIN: one round trip less, never a lock
        # held); writes take the write lock up front.
        if conn.get_execution_options().get(_READONLY, False):
            return
        driver = conn.connection.driver_connection
        if isinstance(driver, sqlite_driver.Connection):
            if driver.in_write():
                return  # begun on the driver (`direct.Write`): this joins it
            # Sent with the transaction's first statement, in its thread hop;
            # listeners (statement counters) still see it.
            driver.begin_with_next("BEGIN IMMEDIATE")
            for listener in conn.dispatch.before_cursor_execute:
                listener(conn, None, "BEGIN IMMEDIATE", (), None, False)
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
