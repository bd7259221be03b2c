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
used for it are SQLAlchemy's, not public API: they are in `bot.store.compat`
(`adapter_statement`), checked at start; `tests/store/test_direct.py` runs the
hot path's statements both ways on PostgreSQL.
"""

from __future__ import annotations

import re
from typing import Any

from bot.store.compat import adapter_statement

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
        rows, prepared = await adapter_statement(self._adapter, sql, parameters, many)
        if prepared is None:
            return None, -1
        status = _STATUS.match(prepared.get_statusmsg() or "")
        return rows, int(status.group(1)) if status else -1
