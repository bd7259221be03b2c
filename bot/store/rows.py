"""Writing model rows with SQLAlchemy Core instead of the ORM unit of work.

The hot path builds its new rows with `new_row` (the column values a model's
constructor would set, without the object: SQLModel's constructor and
SQLAlchemy's instrumentation cost several times more than the INSERT itself)
or as `SQLModel` objects, and writes them with one Core INSERT per table: an
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

from collections.abc import Callable, Sequence
from typing import Any

from pydantic_core import PydanticUndefined
from sqlalchemy import BindParameter, Executable, Table, bindparam, insert
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import visitors
from sqlalchemy.sql.dml import Insert
from sqlmodel import SQLModel
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store import asyncpg_driver, direct
from bot.store.kept import Slot


async def execute(
    session: AsyncSession, statement: Executable, params: Any = None, *, wait: bool = True
) -> Any:
    """Run `statement` (with `params`: a dict, or a list of dicts for an
    executemany) in `session`'s transaction, as Core; a statement
    prepared once (given with its parameters) runs straight on the driver
    (`bot.store.direct`). The result offers `all`, `first`, `one`, `scalar`,
    iteration and `rowcount`.

    `wait=False`, for a write whose outcome the caller does not read: None
    is returned at once, without a round trip. On SQLite it is queued; on
    PostgreSQL it is kept back and sent as a part (a data-modifying CTE,
    `combined`) of the transaction's next statement run here, or alone before
    the commit; so that next statement must not read or write its rows (it
    sees the database as it was before both). Statements run on the session
    directly (the ORM) in between do not send it, nor see it. If it fails, the
    transaction's next statement or its commit raises the error, so the
    transaction never commits without it. Several rows for an `insert_rows`
    INSERT (up to `MAX_KEPT_ROWS`) are kept back too, as one multi-row
    INSERT, which numbers them in their order."""
    info = session.sync_session.info
    if params and (not isinstance(params, list) or not direct.returns_rows(statement)):
        # SQLite's write transaction on the driver, or its reads on the loop:
        # straight to the driver (`driver_of` would find the same one)
        write: direct.Write | None = info.get(direct.WRITE)
        if write is not None:
            write.begin()
            return await direct.run(write.connection, write.driver, statement, params, wait=wait)
        reader = info.get(direct.READ)
        if reader is not None:
            return await direct.run(reader, info[direct.READ_DRIVER], statement, params, wait=wait)
    connection = await _connection(session)
    driver = direct.driver_of(connection, statement, params)
    if driver is None:
        if _kept_for_driver(info, connection):  # it takes the driver path's only
            connection = await _own_connection(session)
        await flush_deferred(session)
        return await connection.execute(statement, params)
    if isinstance(driver, asyncpg_driver.Driver):
        pending = info.get(_DEFERRED)
        if isinstance(params, list) and not wait and (rows := _multi_row(statement, params)):
            info.setdefault(_DEFERRED, []).append(rows)
            return None
        if isinstance(params, list):  # an executemany: sent on its own, after them
            if pending:
                await flush_deferred(session)
        elif not wait:
            info.setdefault(_DEFERRED, []).append((statement, params))
            return None
        elif pending:
            del info[_DEFERRED]
            statement, params = combined((statement, params), pending)
    return await direct.run(connection, driver, statement, params, wait=wait)


async def flush_deferred(session: AsyncSession) -> None:
    """PostgreSQL: send the writes `execute` kept back (`wait=False`), as one
    statement; the commit calls this first (`bot.store.db`)."""
    pending = session.sync_session.info.pop(_DEFERRED, None)
    if pending:
        statement, params = combined(pending[-1], pending[:-1])
        connection = await _connection(session)
        driver = direct.driver_of(connection, statement, params)
        assert driver is not None
        await direct.run(connection, driver, statement, params)


_DEFERRED = "switchboard.rows.deferred"

MAX_KEPT_ROWS = 16
"""Rows of one INSERT kept back at most (more go out as an executemany)."""
_MULTI: dict[tuple[str, tuple[str, ...], int], Any] = {}


def _multi_row(statement: Any, rows: list[dict[str, Any]]) -> Write | None:
    """`rows` for `statement`, an INSERT from `_insert` (its values as
    parameters), as one multi-row INSERT and its parameters (`key_rN`), built
    once per table, columns and row count; None for another statement, more
    than `MAX_KEPT_ROWS` rows, or rows not all of the same columns."""
    if not _bare(statement) or not _one_form(rows):
        return None
    keys = tuple(rows[0])
    form = (statement.table.name, keys, len(rows))
    built = _MULTI.get(form)
    if built is None:
        columns = statement.table.c
        built = _MULTI[form] = insert(statement.table).values(
            [
                {key: bindparam(f"{key}_r{n}", type_=columns[key].type) for key in keys}
                for n in range(len(rows))
            ]
        )
    params = {f"{key}_r{n}": value for n, row in enumerate(rows) for key, value in row.items()}
    return built, params


def keepable(rows: Rows) -> bool:
    """Whether `insert_rows(rows, wait=False)` keeps `rows` back on
    PostgreSQL (none, or up to `MAX_KEPT_ROWS` new rows of the same columns)
    rather than sending them on their own."""
    return not rows or (isinstance(rows[0], NewRow) and _one_form(rows))  # type: ignore[arg-type]


def _one_form(rows: Sequence[dict[str, Any]]) -> bool:
    """At least one row, at most `MAX_KEPT_ROWS`, all of the same columns."""
    if not rows or len(rows) > MAX_KEPT_ROWS:
        return False
    keys = tuple(rows[0])
    return all(tuple(row) == keys for row in rows)


def multi_row(rows: Sequence[NewRow]) -> Write:
    """`rows` (`keepable`, at least one) as one multi-row INSERT of their table
    and its parameters (`key_rN`), the statement built once per form."""
    built = _multi_row(_insert(rows[0].table), list(rows))
    if built is None:
        raise ValueError("rows not keepable as one INSERT")
    return built


async def _connection(session: AsyncSession) -> AsyncConnection:
    """The session's connection in its current transaction, asked of the
    session once per transaction (each ask costs a greenlet round)."""
    info = session.sync_session.info
    write = info.get(direct.WRITE)
    if write is not None:  # SQLite's write transaction, on the driver
        write.begin()
        return write.connection  # type: ignore[no-any-return]
    reader = info.get(direct.READ)
    if reader is not None:  # SQLite's reads on the loop
        return reader  # type: ignore[no-any-return]
    slot: Slot | None = info.get(direct.KEPT)
    if slot is not None:  # PostgreSQL's sessions of single statements
        return await slot.connection()
    return await _own_connection(session)


def _kept_for_driver(info: dict[str, Any], connection: AsyncConnection) -> bool:
    """Whether `connection` is one kept for the driver path's statements
    (`in_direct_read`, `on_kept`): others run on the session's own."""
    if connection is info.get(direct.READ):
        return True
    slot: Slot | None = info.get(direct.KEPT)
    return slot is not None and connection is slot.held


async def _own_connection(session: AsyncSession) -> AsyncConnection:
    """The connection the session itself holds in its current transaction."""
    info = session.sync_session.info
    transaction = session.sync_session.get_transaction()
    known = info.get(_CONNECTION)
    active = transaction is not None and transaction.is_active
    if active and known is not None and known[0] is transaction:
        return known[1]  # type: ignore[no-any-return]
    connection = await session.connection()
    info[_CONNECTION] = (session.sync_session.get_transaction(), connection)
    return connection


_CONNECTION = "switchboard.rows.connection"


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


class NewRow(dict[str, Any]):
    """A new row's column values (see `new_row`), with its table."""

    __slots__ = ("table",)

    def __init__(self, table: Table, values: dict[str, Any]) -> None:
        super().__init__(values)
        self.table = table


_Default = tuple[str, bool, Any, "Callable[[], Any] | None"]
"""A column: its key, whether it is the primary key, its default value, its
default factory."""
_TEMPLATES: dict[type[SQLModel], tuple[Table, list[_Default]]] = {}


def new_row(kind: type[SQLModel], /, **values: Any) -> NewRow:
    """The row `kind(**values)` would insert, as column values: every column
    given or set to its field's default (a default factory is called), the
    primary key left out while it is None. Like the table model's constructor,
    nothing is validated; a required field left out raises TypeError."""
    template = _TEMPLATES.get(kind)
    if template is None:
        template = _TEMPLATES[kind] = _template(kind)
    table, columns = template
    row: dict[str, Any] = {}
    given = 0
    for key, primary, default, factory in columns:
        if key in values:
            value = values[key]
            given += 1
        elif factory is not None:
            value = factory()
        elif default is PydanticUndefined:
            raise TypeError(f"{kind.__name__}: missing value for {key!r}")
        else:
            value = default
        if value is None and primary:
            continue
        row[key] = value
    if given != len(values):
        unknown = sorted(set(values) - {c[0] for c in columns})
        raise TypeError(f"{kind.__name__}: no column {', '.join(unknown)}")
    return NewRow(table, row)


def _template(model: type[SQLModel]) -> tuple[Table, list[_Default]]:
    table: Table = model.__table__  # type: ignore[attr-defined]
    fields = model.model_fields
    columns: list[_Default] = []
    for column in table.columns:
        info = fields[column.key]
        columns.append((column.key, column.primary_key, info.default, info.default_factory))  # type: ignore[arg-type]
    return table, columns


def as_new_row(row: SQLModel) -> NewRow:
    return NewRow(row.__table__, values_of(row))  # type: ignore[attr-defined]


Rows = Sequence[SQLModel] | Sequence[NewRow]


def _values(rows: Rows) -> tuple[Table, list[dict[str, Any]]]:
    first = rows[0]
    if isinstance(first, NewRow):
        return first.table, list(rows)  # type: ignore[arg-type]
    table: Table = first.__table__  # type: ignore[attr-defined]
    return table, [values_of(row) for row in rows]  # type: ignore[arg-type]


async def insert_rows(session: AsyncSession, rows: Rows, *, wait: bool = True) -> None:
    """Insert rows of one model (objects, or `new_row`s) in the caller's
    transaction, in order, with one statement (an executemany when there are
    several); `wait` as for `execute`."""
    if not rows:
        return
    table, values = _values(rows)
    await execute(session, _insert(table), values[0] if len(values) == 1 else values, wait=wait)


async def insert_returning_ids(session: AsyncSession, rows: Rows) -> list[int]:
    """Insert rows of one model (primary keys unset) and return their new ids,
    in the rows' order, with one statement."""
    if not rows:
        return []
    table, values = _values(rows)
    if len(values) == 1:
        one = await execute(session, _insert(table, returning=True), values[0])
        return [int(one.one()[0])]
    many = await execute(session, _insert(table, returning=True, many=True), values)
    return [int(row[0]) for row in many.all()]


_STATEMENTS: dict[tuple[str, bool, bool], Any] = {}
_BARE: dict[int, Insert] = {}
"""The INSERTs `_insert` built without RETURNING, by id: their values come as
parameters."""


def _insert(table: Table, *, returning: bool = False, many: bool = False) -> Any:
    """INSERT for `table`, built once per form: the values come as parameters."""
    key = (table.name, returning, many)
    stmt = _STATEMENTS.get(key)
    if stmt is None:
        stmt = insert(table)
        if returning:
            stmt = stmt.returning(table.c.id, sort_by_parameter_order=many)
        else:
            _BARE[id(stmt)] = stmt
        _STATEMENTS[key] = stmt
    return stmt


def bare_insert(table: Table) -> Insert:
    """The INSERT of a row of `table` whose values come as parameters (one per
    column given), built once: `execute` keeps several rows of it back as one
    multi-row INSERT, and `combined` takes it as a part."""
    return _insert(table)  # type: ignore[no-any-return]


def _bare(statement: Any) -> bool:
    """Whether `statement` is a `bare_insert`."""
    return _BARE.get(id(statement)) is statement


Write = tuple[Any, dict[str, Any]]
"""A prepared statement and its parameters."""

_COMBINED: dict[tuple[Any, ...], tuple[tuple[Any, ...], Any]] = {}
MAX_COMBINED = 256
"""Combinations kept built (the hot path uses a handful)."""


def combined(main: Write, others: Sequence[Write]) -> Write:
    """PostgreSQL: `main` with `others` as data-modifying CTEs — one statement,
    one round trip, atomic by itself. Only for writes that touch different
    rows and read nothing the others write: the parts of one statement all see
    the database as it was before it. Each part's parameters are renamed
    apart (several parts may be the same statement); the statement is built
    once per combination of parts and parameter names."""
    parts = (main[0], *(statement for statement, _ in others))
    key = (
        tuple(id(part) for part in parts),
        tuple(tuple(params) for _, params in others),
    )
    known = _COMBINED.get(key)
    if known is None or any(a is not b for a, b in zip(known[0], parts, strict=True)):
        ctes = [
            _renamed(statement, params, f"_{i}").cte(f"w{i}")
            for i, (statement, params) in enumerate(others)
        ]
        if len(_COMBINED) >= MAX_COMBINED:
            _COMBINED.clear()
        known = _COMBINED[key] = (parts, main[0].add_cte(*ctes))
    params = dict(main[1])
    for i, (_, values) in enumerate(others):
        params.update({f"{name}_{i}": value for name, value in values.items()})
    return known[1], params


def _renamed(statement: Any, params: dict[str, Any], suffix: str) -> Any:
    """`statement` with its named parameters (those in `params`) renamed
    `name + suffix`; an INSERT given its values as parameters (`_insert`) gets
    them as explicit values so named."""
    if _bare(statement):
        columns = statement.table.c
        return statement.values(
            {key: bindparam(key + suffix, type_=columns[key].type) for key in params}
        )

    def rename(element: Any, **_: Any) -> Any:
        if isinstance(element, BindParameter) and element.key in params:
            return bindparam(element.key + suffix, type_=element.type)
        return None

    return visitors.replacement_traverse(statement, {}, rename)
