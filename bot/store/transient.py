"""Database failures that pass: a connection the server ended (a restart, a
failover, `pg_terminate_backend`, "terminating connection due to
administrator command"), a connection lost on the way, a serialization
failure or deadlock, the server starting up or shutting down, SQLite busy
("database is locked"). Tried again, on another connection (the pool replaces
a closed one), such a failure usually does not happen twice; anything else
(a constraint, a bad statement, a missing table) would, and is not one.

`is_transient(error)` says which; `retrying(operation)` runs an operation
again on such a failure, a few times within a few seconds; `log_failure`
logs a failure of work that is tried again (a sweep, a loop's next round) at
ERROR, or at WARNING with its cause when it is one of these."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

log = logging.getLogger("switchboard.store")

T = TypeVar("T")

TRANSIENT_SQLSTATES = frozenset(
    {
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "57P01",  # admin_shutdown: terminating connection due to administrator command
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now: the database system is starting up
        "53300",  # too_many_connections
    }
)
"""PostgreSQL's error codes of failures that pass (and class 08: connection
exceptions)."""

_SQLITE_BUSY = ("database is locked", "database table is locked", "database is busy")
_LOST = (
    "connection is closed",
    "connection was closed",
    "terminating connection",
    "server closed the connection",
    "connection reset",
    "connection refused",
    "connection lost",
    "the database system is",
    "another operation is in progress",  # asyncpg, on a connection cut mid-statement
)
"""Words of a lost connection, for drivers that give no error code."""

RETRY_DELAYS_S = (0.05, 0.25, 1.0, 2.0)
"""The pauses before each new try of `retrying`: about 3 s in all."""


def is_transient(error: BaseException) -> bool:
    """Whether `error` (or what caused it) is a database failure that passes."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _transient_one(current):
            return True
        orig = getattr(current, "orig", None)
        current = (
            orig if isinstance(orig, BaseException) else (current.__cause__ or current.__context__)
        )
    return False


def _transient_one(error: BaseException) -> bool:
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    if isinstance(error, PoolTimeout | ConnectionError):
        return True
    code = getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)
    if isinstance(code, str) and (code in TRANSIENT_SQLSTATES or code.startswith("08")):
        return True
    text = str(error).lower()
    if isinstance(error, sqlite3.OperationalError):
        return any(words in text for words in _SQLITE_BUSY)
    module = type(error).__module__
    if module.startswith("asyncpg") or module.startswith("sqlalchemy"):
        return any(words in text for words in _LOST) or any(w in text for w in _SQLITE_BUSY)
    return False


async def retrying(
    operation: Callable[[], Awaitable[T]],
    what: str,
    delays: tuple[float, ...] = RETRY_DELAYS_S,
) -> T:
    """Run `operation`; on a failure that passes, again after each of `delays`
    (each try on a connection of its own), logging each. The last failure, or
    any other, is raised."""
    for delay in delays:
        try:
            return await operation()
        except Exception as error:
            if not is_transient(error):
                raise
            log.warning("store.retry %s in=%.2fs: %s", what, delay, _first_line(error))
        await asyncio.sleep(delay)
    return await operation()


def log_failure(logger: logging.Logger, error: BaseException, message: str, *args: object) -> None:
    """Log the failure of work that is tried again: a database failure that
    passes at WARNING, with its cause; anything else at ERROR, with its
    traceback (what an operator must look at)."""
    if is_transient(error):
        logger.warning(message + ": %s (tried again)", *args, _first_line(error))
    else:
        logger.error(message, *args, exc_info=error)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"
