"""PostgreSQL's connection pool: overflow connections kept while the load that
opened them lasts.

SQLAlchemy's queue pool keeps `pool_size` connections and closes one beyond
that the moment it is returned. A message's statements each take a connection
for one round trip and give it back, so under a burst (a thousand messages at
once) the pool sat at its size with every return beyond it closed and the next
checkout opening a new one: a TCP connection, PostgreSQL's TLS negotiation,
startup and authentication, and every statement prepared again on it. 1,000
messages at once opened 160–210 connections: about a fifth of the process's CPU.

`KeepingPool` (`bot.store.compat`: it overrides the queue pool's private
methods) holds up to `pool_size + max_overflow` connections, opened as
load needs them (as before), and keeps those beyond `pool_size` open while the
pool keeps needing them; once it has not had more than `pool_size` checked out
for `IDLE_S`, connections returned beyond `pool_size` idle are closed, and the
pool is back to its size.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import InvalidatePoolError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import ConnectionPoolEntry

from bot.store import compat
from bot.store.kept import PING_IDLE_S

IDLE_S = 60.0
"""How long the pool keeps its overflow connections after it last needed them."""


class KeepingPool(compat.KeepingPool):
    """`compat.KeepingPool`, its overflow kept `IDLE_S` by default."""

    idle_s = IDLE_S

    @classmethod
    def sized(cls, pool_size: int, max_overflow: int, idle_s: float = IDLE_S) -> dict[str, Any]:
        return super().sized(pool_size, max_overflow, idle_s)


_FRESH = "switchboard_fresh"
_RETURNED = "switchboard_returned"


def ping_on_checkout(engine: AsyncEngine) -> None:
    """PostgreSQL: a connection taken from the pool is checked first, as
    `pool_pre_ping` does, with one `SELECT 1` (the simple protocol: no
    prepared statement) when it sat in the pool longer than `PING_IDLE_S`.
    SQLAlchemy's own ping for asyncpg wraps it in BEGIN and ROLLBACK, for
    PgBouncer's transaction mode: three round trips per checkout, and a message
    takes several (each a send on the socket: about a fifth of the service's
    CPU on PostgreSQL went to those sends).

    A connection the server closed (a restart, a terminated backend: the
    server says so and closes the socket, which asyncpg sees as it happens) is
    known closed without a round trip, whatever its idle time; so only one
    idle for a while is pinged, for what a closed socket does not tell (a
    connection dropped on the way without a word). Either way it is replaced,
    and the pool's other connections from before then with it, as pre-ping
    does; a new one is not checked. What is left: a backend that ended in the
    last `PING_IDLE_S` whose goodbye has not reached us yet fails the transaction
    that takes it (as any database failure does), and the pool replaces it."""

    @event.listens_for(engine.sync_engine, "connect")
    def _fresh(_dbapi_conn: Any, record: ConnectionPoolEntry) -> None:
        record.info[_FRESH] = True

    @event.listens_for(engine.sync_engine, "checkin")
    def _returned(_dbapi_conn: Any, record: ConnectionPoolEntry) -> None:
        record.info[_RETURNED] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _ping(dbapi_conn: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        info = record.info
        if info.pop(_FRESH, False):
            return
        driver = dbapi_conn.driver_connection
        if driver.is_closed():
            raise InvalidatePoolError("closed by the server while in the pool")
        if time.monotonic() - info.get(_RETURNED, 0.0) < PING_IDLE_S:
            return
        try:
            compat.await_(driver.execute("SELECT 1"))
        except Exception as exc:  # the connection is gone: take another
            raise InvalidatePoolError(f"{type(exc).__name__} on checkout") from exc
