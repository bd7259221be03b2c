"""Prepared statements straight on asyncpg, in the transaction SQLAlchemy holds.

Through SQLAlchemy's Core a statement on asyncpg costs a greenlet round, an
execution context, a cursor adapter and a result object around one
`PreparedStatement.fetch`; `bot.store.direct` compiles the hot path's
statements once and runs them here instead, on the connection and in the
transaction of the session, exactly as SQLAlchemy's asyncpg adapter would:
under the adapter's own lock, starting its transaction if the statement is
the transaction's first (the adapter begins lazily), through the adapter's
cache of prepared statements, with asyncpg's errors translated by the adapter
(so a duplicate key is still an `IntegrityError`). The adapter's attributes
used here are SQLAlchemy's (2.x), not public API: `tests/store/test_direct.py`
runs the hot path's statements both ways on PostgreSQL.
"""

from __future__ import annotations

import re
from typing import Any

_STATUS = re.compile(r"(?:SELECT|UPDATE|DELETE|INSERT \d+) (\d+)")


class Driver:
    """The statement runner for one checked-out asyncpg connection (the
    adapter SQLAlchemy wraps it in)."""

    __slots__ = ("_adapter",)

    def __init__(self, adapter: Any) -> None:
        self._adapter = adapter

    @property
    def error(self) -> type[Exception]:
        """The DB-API error class the adapter raises (SQLAlchemy wraps it)."""
        return self._adapter.dbapi.Error  # type: ignore[no-any-return]

    async def statement(
        self, sql: str, parameters: Any, *, many: bool = False
    ) -> tuple[list[Any] | None, int]:
        """Run one statement (an executemany when `many`) in the session's
        transaction: (its rows, or None when it returns none; the rowcount)."""
        adapter = self._adapter
        async with adapter._execute_mutex:
            if adapter._transaction is None:
                await adapter._start_transaction()
            try:
                if many:
                    await adapter._connection.executemany(sql, parameters)
                    return None, -1
                prepared, attributes = await adapter._prepare(sql, 0)
                rows = await prepared.fetch(*parameters)
                status = _STATUS.match(prepared.get_statusmsg() or "")
                return (rows if attributes else None), int(status.group(1)) if status else -1
            except Exception as error:
                adapter._handle_exception(error)
                raise  # not reached: the adapter raises its own error
