"""PostgreSQL: a few connections kept checked out of the pool, in autocommit,
for the sessions that run their statements one by one (`Store.read`,
`Store.write_one`).

Such a session used to take its connection from SQLAlchemy's pool and give it
back through the Session (begin, connection, commit, close: greenlet rounds,
the pool's checkout and checkin events and its reset): on the client about
three times what its one statement costs (a read: ~370 µs of CPU, against
~120 µs on a connection already at hand), and a message on PostgreSQL runs
about four of them. Here the statements a session runs on the driver path
(`bot.store.direct`) go to a connection taken from `Kept` at the first of them
and put back on exit, each connection used by one session at a time (asyncpg
runs one operation per connection). What runs through the Session itself (the
ORM, or a statement the driver path does not take) uses the Session's own
pooled connection, as before.

A kept connection is handed out as the pool would hand it: one the server
closed is replaced; one idle longer than `PING_IDLE_S` is pinged first, as the
pool's checkout pings (`bot.store.pool.ping_on_checkout`), and replaced when
the ping fails; one whose session failed (an error: closed, back to the pool,
which resets it; a cancellation: invalidated, its state unknown) is not kept.
The connections count against the pool's size; at most `keep` stay out while
idle, the others go back to the pool."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

log = logging.getLogger("switchboard.store")

PING_IDLE_S = 2.0
"""A PostgreSQL connection idle longer than this is pinged when taken, from
the pool (`bot.store.pool.ping_on_checkout`) or from `Kept`; one used more
recently is only checked for having been closed."""


class Kept:
    """Connections of `engine` kept out of its pool, in autocommit."""

    def __init__(self, engine: AsyncEngine, keep: int) -> None:
        self._engine = engine
        self.keep = keep
        self._idle: list[tuple[AsyncConnection, float]] = []
        """(connection, when it was put back), the last put back at the end"""

    @classmethod
    def within(cls, engine: AsyncEngine, pool_size: int, max_overflow: int) -> Kept | None:
        """Kept connections for a pool of this size: at most half its steady
        connections and a quarter of all it may open stay out, so that the
        other work always finds connections in the pool; None for a pool too
        small to spare one (a session whose ORM statements need the pool's
        connection beside its kept one could wait for itself)."""
        keep = min(pool_size // 2, (pool_size + max_overflow) // 4)
        return cls(engine, keep) if keep > 0 else None

    @property
    def idle(self) -> int:
        return len(self._idle)

    async def take(self) -> AsyncConnection:
        """A connection for one session: the one put back last, checked; or a
        new one from the pool."""
        while self._idle:
            connection, since = self._idle.pop()
            if await self._usable(connection, since):
                return connection
        connection = await self._engine.connect()
        try:
            return await connection.execution_options(isolation_level="AUTOCOMMIT")
        except BaseException:
            await _quietly(connection.invalidate())
            raise

    async def _usable(self, connection: AsyncConnection, since: float) -> bool:
        driver = _driver(connection)
        if driver is None or driver.is_closed() or not _clean(connection):
            await _quietly(connection.invalidate())  # closed by the server meanwhile
            return False
        if time.monotonic() - since < PING_IDLE_S:
            return True
        try:
            await driver.execute("SELECT 1")
        except Exception as exc:  # gone on the way without a word: take another
            log.info("store.kept_connection_replaced %s", type(exc).__name__)
            await _quietly(connection.invalidate())
            return False
        return True

    async def give(self, connection: AsyncConnection) -> None:
        """Put back a connection whose session ended well: kept while fewer
        than `keep` are, else back to the pool."""
        if len(self._idle) < self.keep and _clean(connection):
            self._idle.append((connection, time.monotonic()))
            return
        await _quietly(connection.close())

    async def discard(self, connection: AsyncConnection, *, cancelled: bool) -> None:
        """A connection whose session failed: back to the pool (which resets
        it), or, after a cancellation (an operation may be under way on it),
        closed for good."""
        await _quietly(connection.invalidate() if cancelled else connection.close())

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for connection, _ in idle:
            await _quietly(connection.close())


class Slot:
    """One session's kept connection, taken at its first statement."""

    __slots__ = ("_kept", "held")

    def __init__(self, kept: Kept) -> None:
        self._kept = kept
        self.held: AsyncConnection | None = None

    async def connection(self) -> AsyncConnection:
        if self.held is None:
            self.held = await self._kept.take()
        return self.held

    async def end(self, error: BaseException | None) -> None:
        held, self.held = self.held, None
        if held is None:
            return
        if error is None:
            await self._kept.give(held)
        else:
            await self._kept.discard(held, cancelled=not isinstance(error, Exception))


def _driver(connection: AsyncConnection) -> Any:
    """The asyncpg connection under `connection` (None once closed)."""
    sync = connection.sync_connection
    if sync is None or connection.closed or connection.invalidated:
        return None
    return sync.connection.driver_connection


def _clean(connection: AsyncConnection) -> bool:
    """Open, valid, and nothing begun on it through SQLAlchemy."""
    return not (connection.closed or connection.invalidated or connection.in_transaction())


async def _quietly(closing: Any) -> None:
    """Close or invalidate, shielded from cancellation; a failure to close a
    connection being thrown away is not the caller's."""
    with contextlib.suppress(Exception):
        await asyncio.shield(closing)
