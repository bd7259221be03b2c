"""Sessions as the Store hands them out: each in a transaction, committed on
exit, closed and kept for the next (`bot.store.db`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store import direct
from bot.store.compat import orm_used
from bot.store.kept import Kept, Slot
from bot.store.rows import flush_deferred
from bot.store.sqlite_driver import Connection as DriverConnection

log = logging.getLogger("switchboard.store")


class Sessions:
    """Sessions bound to one engine or connection, kept for reuse once closed
    after a commit. A closed Session is as good as a new one (no transaction,
    an empty identity map), and making one (the AsyncSession, its Session,
    their proxies and weak references) costs about as much as running a
    statement on SQLite. A session whose transaction failed is not kept."""

    __slots__ = ("_idle", "_make")

    KEEP = 64

    def __init__(self, bind: AsyncEngine | AsyncConnection) -> None:
        self._make = async_sessionmaker(bind, class_=AsyncSession, expire_on_commit=False)
        self._idle: list[AsyncSession] = []

    def take(self) -> AsyncSession:
        return self._idle.pop() if self._idle else self._make()

    def give(self, session: AsyncSession) -> None:
        """(A session closed after its commit.)"""
        if len(self._idle) < self.KEEP:
            session.sync_session.info.clear()
            self._idle.append(session)


@asynccontextmanager
async def in_transaction(sessions: Sessions) -> AsyncIterator[AsyncSession]:
    """A session in a transaction, committed on exit and closed (and kept for
    the next transaction).

    Beginning does no I/O (the connection is taken at the first statement), and
    neither does closing after a commit (the connection went back to the pool
    with it): both are called directly, not through the greenlet that
    AsyncSession's own methods spend on each, nor the task and shield of its
    close. After an error (in the body or the commit) the transaction is
    rolled back and the session closed by SQLAlchemy's own shielded close,
    which cancellation cannot interrupt (`abandon`)."""
    session = sessions.take()
    sync = session.sync_session
    sync.begin()
    try:
        yield session
        if sync.info:
            await flush_deferred(session)
        await session.commit()
    except BaseException:
        await abandon(session)
        raise
    await put_back(sessions, session)


async def put_back(sessions: Sessions, session: AsyncSession) -> None:
    """Close a session whose transaction ended well, and keep it for reuse."""
    sync = session.sync_session
    if sync.in_transaction():  # begun again after the commit (not ours)
        await session.close()
    elif orm_used(sync) or sync.identity_map:  # (a session the ORM never touched: as new)
        sync.close()
    sessions.give(session)


@asynccontextmanager
async def in_direct_read(
    sessions: Sessions, reader: AsyncConnection, driver: DriverConnection
) -> AsyncIterator[AsyncSession]:
    """`in_transaction` for SQLite's reads on the event loop: the statements
    run through `bot.store.rows` that the driver path takes go straight to the
    driver of `reader`, a connection kept for them (in autocommit: each is on
    its own, as every read here is; several sessions may share it, a
    statement on the loop being one call); what runs through the Session
    (the ORM, or a statement the driver path does not take) uses the
    Session's own connection from the pool, given back on exit."""
    session = sessions.take()
    sync = session.sync_session
    sync.info[direct.READ] = reader
    sync.info[direct.READ_DRIVER] = driver
    try:
        yield session
    except BaseException:
        if sync.in_transaction():
            await abandon(session)
        else:
            sync.close()
        raise
    await put_back(sessions, session)


@asynccontextmanager
async def on_kept(sessions: Sessions, kept: Kept) -> AsyncIterator[AsyncSession]:
    """PostgreSQL's sessions of single statements (reads, `write_one`), in
    autocommit: the statements run through `bot.store.rows` that the driver
    path takes go to a connection of `kept`, taken at the first of them and
    put back on exit (`bot.store.kept`); what runs through the Session (the
    ORM, or a statement the driver path does not take) uses the Session's own
    connection from the pool, given back on exit. Writes kept back
    (`execute`'s `wait=False`) go out before the exit, as `in_transaction`
    sends them before its commit."""
    session = sessions.take()
    sync = session.sync_session
    slot = Slot(kept)
    sync.info[direct.KEPT] = slot
    try:
        yield session
        await flush_deferred(session)
        if orm_used(sync):
            await session.commit()
    except BaseException as error:
        if sync.in_transaction():
            await abandon(session)
        else:
            sync.close()
        await slot.end(error)
        raise
    await put_back(sessions, session)
    await slot.end(None)


async def abandon(session: AsyncSession) -> None:
    """After an error in a transaction or its commit, what `session.begin()` and
    `async with session` would do: roll back (the driver's transaction may be
    open: closing alone does not end it after a failed commit), then close,
    shielded. A rollback that fails too is logged, not raised (the caller
    raises the error that caused it), and the connection, in a state nobody
    knows, is discarded rather than handed back to the pool."""
    try:
        await session.rollback()
    except Exception as exc:
        rollback_failed(exc)
        with contextlib.suppress(Exception):
            await session.invalidate()
    finally:
        await session.__aexit__(None, None, None)


def rollback_failed(exc: Exception) -> None:
    reason = str(exc).splitlines()[0][:200] if str(exc) else ""
    log.warning("store.rollback_failed %s: %s; connection discarded", type(exc).__name__, reason)
