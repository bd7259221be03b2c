"""Writing model rows with SQLAlchemy Core instead of the ORM unit of work.

The hot path builds `SQLModel` rows (so the spool, tests and the rest of the
code keep one shape) and writes them with one Core INSERT per table: an
executemany for several rows, no identity map, no flush. The columns written
are exactly the ones the ORM would have written (every field's value as set,
a primary key left out while it is None).

`execute` runs a prepared statement on the session's connection, in its
transaction, skipping the ORM session's execution path: no autoflush, no
identity-map synchronisation for UPDATE/DELETE, no ORM result loading. That
is most of what a statement costs in Python, so the hot path's statements go
through it; they read and write columns, never ORM objects held by the
session."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Executable, Table, insert
from sqlmodel import SQLModel
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store import direct


async def execute(
    session: AsyncSession, statement: Executable, params: Any = None, *, wait: bool = True
) -> Any:
    """Run `statement` (with `params`: a dict, or a list of dicts for an
    executemany) in `session`'s transaction, as Core; on SQLite, a statement
    prepared once (given with its parameters) runs straight on the driver
    (`bot.store.direct`). The result offers `all`, `first`, `one`, `scalar`,
    iteration and `rowcount`.

    `wait=False`, for a write whose outcome the caller does not read: on
    SQLite it is queued and None returned at once (no round trip); if it
    fails, the transaction's next statement or its commit raises the error,
    so the transaction never commits without it."""
    connection = await session.connection()
    driver = direct.driver_of(connection, statement, params)
    if driver is not None:
        return await direct.run(connection, driver, statement, params, wait=wait)
    return await connection.execute(statement, params)


def values_of(row: SQLModel) -> dict[str, Any]:
    """The row as column values for an INSERT."""
    table: Table = row.__table__  # type: ignore[attr-defined]
    values: dict[str, Any] = {}
    for column in table.columns:
        value = getattr(row, column.key)
        if value is None and column.primary_key:
            continue
        values[column.key] = value
    return values


async def insert_rows(
    session: AsyncSession, rows: Sequence[SQLModel], *, wait: bool = True
) -> None:
    """Insert rows of one model in the caller's transaction, in order, with one
    statement (an executemany when there are several); `wait` as for
    `execute`."""
    if not rows:
        return
    table: Table = rows[0].__table__  # type: ignore[attr-defined]
    values = [values_of(row) for row in rows]
    await execute(session, _insert(table), values[0] if len(values) == 1 else values, wait=wait)


async def insert_returning_ids(session: AsyncSession, rows: Sequence[SQLModel]) -> list[int]:
    """Insert rows of one model (primary keys unset) and return their new ids,
    in the rows' order, with one statement."""
    if not rows:
        return []
    table: Table = rows[0].__table__  # type: ignore[attr-defined]
    values = [values_of(row) for row in rows]
    if len(values) == 1:
        one = await execute(session, _insert(table, returning=True), values[0])
        return [int(one.one()[0])]
    many = await execute(session, _insert(table, returning=True, many=True), values)
    return [int(row[0]) for row in many.all()]


_STATEMENTS: dict[tuple[str, bool, bool], Any] = {}


def _insert(table: Table, *, returning: bool = False, many: bool = False) -> Any:
    """INSERT for `table`, built once per form: the values come as parameters."""
    key = (table.name, returning, many)
    stmt = _STATEMENTS.get(key)
    if stmt is None:
        stmt = insert(table)
        if returning:
            stmt = stmt.returning(table.c.id, sort_by_parameter_order=many)
        _STATEMENTS[key] = stmt
    return stmt
