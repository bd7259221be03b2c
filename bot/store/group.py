"""SQLite: writes queued behind one another share one transaction and its
commit (group commit).

This process's SQLite writes take turns on one lock (`bot.store.db`). Under a
burst many wait there, and each paid for a commit of its own: about a third of
what SQLite spends on a message is its three commits, each writing the pages
it touched to the WAL again (the same few index and table pages, message after
message). Here a write that finishes while others wait for the lock does not
commit: it leaves the transaction open for the next, and waits. The writes
queued behind it join that transaction, each in a savepoint, and the group is
committed once, by the first write that finds nobody waiting (or the group
full, or old), or else by a flusher queued on the lock behind the writes that
were waiting when the group began. A write's `async with store.write()`
returns only once its group committed, so nothing is acknowledged, sent or
taken as done before it is durable; with nobody waiting a write commits at
once, as before.

Failures stay a write's own: one whose statements fail (a redelivery's
duplicate key) is rolled back to its savepoint, and the group goes on; it
raises once the group committed (its failure may have come of a row the
group wrote before it: were the group lost, that duplicate would never have
been stored, so it raises the group's failure instead, and a redelivery is not
taken for a duplicate of a message that was not kept). When the transaction
itself is lost (the commit fails, SQLite ends the
transaction on an error such as a full disk, or a write that went through the
ORM fails), every write of the group raises that error, as a failed commit
raises today, and none of them is stored. A write that used the ORM (the
Session's own transaction) commits the group at once.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy import exc
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store import direct
from bot.store.compat import orm_used
from bot.store.sessions import Sessions, abandon, put_back, rollback_failed

log = logging.getLogger("switchboard.store")

SAVEPOINT = "grouped_write"
MAX_WRITES = 64
"""Writes in one group at most: the one that would be next commits it."""
MAX_AGE_S = 0.05
"""A group older than this (its first write finished that long ago) is
committed by the next write to finish, waiting or not: what the first waits
for stays short even while every turn of the event loop is long."""


@dataclass(slots=True)
class WriteStats:
    """This process's SQLite writes so far, for an operator (`GET /metrics`):
    how long writes waited for their turn on the lock (the sign that SQLite's
    one writer is the bottleneck: time to move to PostgreSQL), and how many
    shared a commit."""

    writes: int = 0
    """turns taken on the write lock"""
    commits: int = 0
    """transactions committed (a group's writes share one)"""
    waited_s: float = 0.0
    """time spent waiting for the lock, all writes together"""


@dataclass(slots=True)
class Ticket:
    """One write's place in a group: its future is set when the group ends."""

    future: asyncio.Future[None] | None = None
    led: bool = False
    """this write committed a group that others waited for: it lets them go
    on first (they were there before it)"""


class Group:
    """The open group of one SQLite Store's writer connection."""

    def __init__(
        self, lock: asyncio.Lock, lost: Callable[[], Awaitable[None]], enabled: bool
    ) -> None:
        self.enabled = enabled
        """off: every write commits at once (`[database] group_commit`)"""
        self._lock = lock
        self._lost = lost
        """discards the writer connection (a commit that failed)"""
        self.waiting = 0
        """writes waiting for the lock"""
        self._pending: list[asyncio.Future[None]] = []
        self._since = 0.0
        self._write: direct.Write | None = None
        self._flusher: asyncio.Task[None] | None = None
        self.stats = WriteStats()

    @property
    def open(self) -> bool:
        """Writes wait for the open transaction's commit."""
        return bool(self._pending)

    async def acquire(self) -> None:
        started = time.monotonic()
        self.waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self.waiting -= 1
            self.stats.waited_s += time.monotonic() - started
        self.stats.writes += 1

    def _may_defer(self, write: direct.Write) -> bool:
        return (
            self.enabled
            and self.waiting > 0
            and write.driver.transaction_open()
            and write.driver.settled()
            and len(self._pending) < MAX_WRITES - 1
            and (not self._pending or time.monotonic() - self._since < MAX_AGE_S)
        )

    def _defer(self, write: direct.Write) -> asyncio.Future[None]:
        if not self._pending:
            self._since = time.monotonic()
        self._write = write
        future = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name="sqlite-group-commit")
        return future

    def _ended(self, error: BaseException | None) -> None:
        """(Under the lock) The open transaction ended: committed, or lost with
        `error`; every write waiting for it is told."""
        pending, self._pending, self._write = self._pending, [], None
        for future in pending:
            if future.done():  # its writer was cancelled while it waited
                continue
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(_lost(error))

    async def _flush(self) -> None:
        """Behind the writes that waited when the group began: commit what is
        still open (none of them did)."""
        try:
            async with self._lock:
                await self.commit_open()
        except Exception as error:
            log.warning("store.group_commit_failed %s: %s", type(error).__name__, error)
        finally:
            self._flusher = None

    async def commit_open(self) -> None:
        """(Under the lock) Commit the open group, if any; a failed commit
        fails its writes and discards the connection."""
        if self._pending and self._write is not None:
            try:
                await self._write.commit()
            except BaseException as error:
                self._ended(error)
                await self._lost()
                raise
            self.stats.commits += 1
            self._ended(None)

    async def close(self) -> None:
        """Commit what is open (shutdown): wait for the flusher."""
        flusher = self._flusher
        if flusher is not None:
            await asyncio.shield(flusher)

    @asynccontextmanager
    async def write(
        self, sessions: Sessions, write: direct.Write, ticket: Ticket
    ) -> AsyncIterator[AsyncSession]:
        """(Under the lock) A session for SQLite's writes: the statements run
        through `bot.store.rows` go straight to the driver in a transaction
        begun there (`direct.Write`), in the open group's (a savepoint) when
        there is one; what ran through the Session (the ORM) joined that
        transaction and is committed by the Session (its flush included). On
        exit committed, now or with the group (`ticket`: await it once the
        lock is free). After an error what it wrote is rolled back (a rollback
        that fails too is logged) and, unless only its savepoint was, the
        caller discards the connection."""
        joining = self.open
        driver = write.driver
        if joining:
            driver.begin_with_next(f"SAVEPOINT {SAVEPOINT}")  # with the first statement
        session = sessions.take()
        sync = session.sync_session
        sync.info[direct.WRITE] = write
        orm = False
        try:
            yield session
            orm = orm_used(sync)
            if orm:  # the Session's commit is the transaction's: the group's
                await session.commit()
            elif joining:
                if not await _release_savepoint(write):  # wrote nothing: no wait
                    await put_back(sessions, session)
                    return
            else:
                _raise_own_failure(write)  # before another write's statements would
            if not orm and self._may_defer(write):
                ticket.future = self._defer(write)
            else:
                wrote = orm or driver.transaction_open()  # (the Session's commit was it)
                await write.commit()
                self.stats.commits += wrote
                ticket.led = self.open
                self._ended(None)
        except BaseException as error:
            await self._undo(session, write, joining and not orm, error)
            if self.open and isinstance(error, Exception):
                # Its failure may have come of what the group wrote before it
                # (a duplicate of a row not committed yet): told once the
                # group's outcome is known (`ticket`), the group's own failure
                # if it is lost.
                ticket.future = self._defer(write)
            raise
        await put_back(sessions, session)

    async def _undo(
        self, session: AsyncSession, write: direct.Write, savepoint: bool, error: BaseException
    ) -> None:
        """This write failed: back to its savepoint, the group going on; or,
        without one, or when the transaction is gone, roll it all back and
        tell the group's writes."""
        sync = session.sync_session
        if savepoint and not sync.in_transaction():
            sync.close()
            try:
                if await asyncio.shield(write.driver.roll_back_to(SAVEPOINT)):
                    return
            except Exception as exc:
                rollback_failed(exc)
            self._ended(error)
            return
        if sync.in_transaction():
            await abandon(session)
        else:
            sync.close()
            try:
                await asyncio.shield(write.rollback())
            except Exception as exc:
                rollback_failed(exc)
        self._ended(error)


async def _release_savepoint(write: direct.Write) -> bool:
    """The savepoint's writes kept in the transaction (a queued statement's
    failure raised instead). False: no statement ran, nothing to keep."""
    driver = write.driver
    if driver.take_begin() is not None:  # never went out
        return False
    try:
        await driver.control(f"RELEASE {SAVEPOINT}")
    except sqlite3.Error as error:
        sql = getattr(error, "sql", f"RELEASE {SAVEPOINT}")
        raise exc.DBAPIError.instance(sql, None, error, sqlite3.Error) from error
    return True


def _raise_own_failure(write: direct.Write) -> None:
    """Raise a failure of this write's queued statements, as its commit would."""
    try:
        write.driver.raise_deferred_failure()
    except sqlite3.Error as error:
        sql = getattr(error, "sql", "COMMIT")
        raise exc.DBAPIError.instance(sql, None, error, sqlite3.Error) from error


def _lost(error: BaseException) -> BaseException:
    """What a grouped write raises when its group's transaction was lost: a
    database error, as a failed commit's (never another write's own kind, such
    as a duplicate key's IntegrityError)."""
    if isinstance(error, exc.OperationalError):
        return error
    orig = sqlite3.OperationalError(
        f"the transaction this write shared was lost: {type(error).__name__}: {error}"
    )
    return exc.OperationalError("COMMIT", None, orig)
