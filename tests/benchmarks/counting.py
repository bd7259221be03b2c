"""What the benchmarks count: SQL statements and committed transactions on the
app's engines, and round trips (socket writes) to a client-server database."""

from __future__ import annotations

import contextlib
import re
from asyncio import selector_events
from collections.abc import Iterator
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine


class SqlCounter:
    """Statements and committed transactions on the app's engines; of the
    commits, those of a transaction that wrote (ran anything but a SELECT or
    a WITH query that only reads).
    A statement is one that reads or writes rows: SQLite's BEGIN (sent as a
    statement there, by the driver on PostgreSQL) is counted with its commit,
    not as a statement, as the floors count theirs. A statement in autocommit
    (PostgreSQL's reads and single-statement writes) is a transaction of its
    own, counted as one commit; a Session's commit on such a connection sends
    nothing and is not counted."""

    def __init__(self, engines: set[AsyncEngine]) -> None:
        self.statements = 0
        self.commits = 0
        self.writes = 0
        self.round_trips = 0
        """socket writes (a client-server database's round trips)"""
        for engine in engines:
            event.listen(engine.sync_engine, "before_cursor_execute", self._statement)
            event.listen(engine.sync_engine, "commit", self._commit)
            event.listen(engine.sync_engine, "rollback", self._rollback)

    def _statement(self, connection: Connection, _cursor: object, sql: str, *_: object) -> None:
        verb = sql.lstrip()[:6].upper()
        if verb.startswith("BEGIN"):
            return
        self.statements += 1
        wrote = not only_reads(sql)
        if _autocommit(connection):
            self.commits += 1
            self.writes += wrote
        elif wrote:
            connection.info[_WROTE] = True

    def _commit(self, connection: Connection) -> None:
        if _autocommit(connection):
            return
        self.commits += 1
        if connection.info.pop(_WROTE, False):
            self.writes += 1

    def _rollback(self, connection: Connection) -> None:
        connection.info.pop(_WROTE, None)


def _autocommit(connection: Connection) -> bool:
    return connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT"


_WROTE = "benchmark.wrote"
_WRITES_IN = re.compile(r"\b(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


def only_reads(sql: str) -> bool:
    """Whether a statement only reads: a SELECT, or a WITH query none of whose
    parts inserts, updates or deletes (PostgreSQL's data-modifying CTEs do)."""
    verb = sql.lstrip()[:6].upper()
    return verb == "SELECT" or (verb.startswith("WITH") and not _WRITES_IN.search(sql))


@contextlib.contextmanager
def socket_writes() -> Iterator[list[int]]:
    """Writes to the event loop's socket transports inside the block: for a
    database client, one per round trip (a statement, a BEGIN, a COMMIT, a
    ping). Counted by wrapping the transport's `write` (untimed passes only)."""
    count = [0]
    real = selector_events._SelectorSocketTransport.write

    def write(transport: Any, data: Any) -> None:
        count[0] += 1
        real(transport, data)

    selector_events._SelectorSocketTransport.write = write  # type: ignore[method-assign]
    try:
        yield count
    finally:
        selector_events._SelectorSocketTransport.write = real  # type: ignore[method-assign]
