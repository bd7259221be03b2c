"""Prepared statements run straight on the driver: SQLite's, or asyncpg's.

Through SQLAlchemy's async engine a statement costs two greenlet switches, an
execution context, a cursor wrapper and a result object around one call to
the driver; on this machine that is most of a statement's cost, and the hot
path runs about sixteen statements per message. Here a statement that the hot
path prepares once (a module-level Core construct with bind parameters) is
compiled once per form with SQLAlchemy's own compiler, for the session's
dialect, into a plan: the SQL text, where each positional parameter comes from
(a caller's key or a constant of the statement) with the type's bind
processor, and the result columns with their result processors. Running it is
one call to the driver (`bot.store.sqlite_driver.Connection.statement`, or
`bot.store.asyncpg_driver.Driver.statement`), in the transaction the session
holds, with SQLAlchemy's `before_cursor_execute` listeners called as it would
(statement counters keep counting) and driver errors raised as SQLAlchemy's
own (`DBAPIError.instance`), so callers see no difference. Statements whose
SQL depends on the values (expanding IN lists) are compiled per list length.
"""

from __future__ import annotations

import logging
import sqlite3
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from typing import Any, cast

from sqlalchemy import exc
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import ClauseElement, Executable

from bot.store import asyncpg_driver, mechanisms
from bot.store.sqlite_driver import Connection as DriverConnection

Driver = DriverConnection | asyncpg_driver.Driver

Processor = Callable[[Any], Any] | None

_ECHO = logging.getLogger("sqlalchemy.engine.Engine")
"""`database.echo` sets SQLAlchemy's engine loggers to INFO: what runs here is
logged there too, as SQLAlchemy logs what it runs itself."""


def echo(sql: str, arguments: Any = ()) -> None:
    if _ECHO.isEnabledFor(logging.INFO):
        _ECHO.info("%s", sql)
        if arguments:
            _ECHO.info("[direct] %r", arguments)


@dataclass(frozen=True, slots=True)
class Plan:
    """One statement compiled for one dialect and one set of parameter keys."""

    statement: Executable
    """kept so that a reused id() never finds another statement's plan"""
    sql: str
    binds: tuple[tuple[str | None, int, Any, Processor], ...]
    """per positional parameter: the caller's key (None: the constant, already
    processed), the index into the caller's list for an expanded IN (-1: the
    value itself) and the bind processor"""
    columns: tuple[Processor, ...] | None
    """result processors per column; None: the statement returns no rows"""
    row: Any
    """the row type: a named tuple of the result columns' keys"""
    expanding: tuple[str, ...] = ()
    """the caller's keys given as IN-lists (the SQL has one parameter per item)"""
    processed: tuple[tuple[int, Callable[[Any], Any]], ...] = ()
    """the result columns that have a processor: (index, processor)"""
    arguments: Callable[[Mapping[str, Any]], Sequence[Any]] = tuple
    """the positional parameters from the caller's: `binds` made into one
    function (`_arguments`), for the statement that runs a dozen times a
    message"""

    def rows(self, raw: list[Any]) -> list[Any]:
        make = self.row._make
        processed = self.processed
        if not processed:
            return [make(row) for row in raw]
        out = []
        for row in raw:
            values = list(row)
            for index, process in processed:
                values[index] = process(values[index])
            out.append(make(values))
        return out


class Result:
    """What the hot path reads of a SQLAlchemy result: its rows and rowcount."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def all(self) -> list[Any]:
        return self._rows

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def one(self) -> Any:
        if not self._rows:
            raise exc.NoResultFound("No row was found when one was required")
        if len(self._rows) > 1:
            raise exc.MultipleResultsFound("Multiple rows were found when one was required")
        return self._rows[0]

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


def returns_rows(statement: Executable) -> bool:
    return bool(list(getattr(statement, "exported_columns", ())))


_NO_PLANS = mechanisms.off("plans")

MAX_PLANS = 512
_Family = tuple[Executable, tuple[str, ...], dict[tuple[int, ...], Plan]]
_PLANS: dict[tuple[int, str, tuple[str, ...]], _Family] = {}
"""Per statement, dialect and parameter keys (in the caller's order): the
statement, its expanding (IN-list) keys and a plan per list lengths."""


def driver_of(connection: AsyncConnection, statement: Executable, params: Any) -> Driver | None:
    """The session connection's driver (SQLite's, or asyncpg's adapter), or
    None when this path does not apply: another driver, no parameters (a
    statement built for one call), or an executemany with RETURNING (which
    SQLAlchemy turns into multi-row INSERTs)."""
    if not params or (isinstance(params, list) and returns_rows(statement)) or _NO_PLANS:
        return None
    sync = connection.sync_connection
    if sync is None:
        return None
    name = sync.dialect.driver
    if name == "aiosqlite":
        driver = sync.connection.driver_connection
        return driver if isinstance(driver, DriverConnection) else None
    if name == "asyncpg" and sync.get_execution_options().get(ON_DRIVER):
        return asyncpg_driver.Driver(sync.connection.dbapi_connection)
    return None


async def run(
    connection: AsyncConnection,
    driver: Driver,
    statement: Executable,
    params: Mapping[str, Any] | list[Mapping[str, Any]],
    *,
    wait: bool = True,
) -> Result | None:
    """Run `statement` with `params` (a dict, or a list of dicts of the same
    keys for an executemany) on `driver`, in the session's transaction. With
    `wait` False, return None without waiting on SQLite (a failure is raised
    by the transaction's next statement or its commit); asyncpg's statements
    are waited for."""
    many = isinstance(params, list)
    first: Mapping[str, Any] = params[0] if isinstance(params, list) else params
    sync = connection.sync_connection
    assert sync is not None
    dialect = sync.dialect
    plan = _plan(statement, dialect, first)
    arguments: Any = (
        [plan.arguments(one) for one in params]
        if isinstance(params, list)
        else plan.arguments(first)
    )
    if _ECHO.isEnabledFor(logging.INFO):
        echo(plan.sql, arguments)
    listeners = sync.dispatch.before_cursor_execute
    if listeners:  # (none in the service; iterating even none costs a few µs)
        for listener in listeners:
            listener(sync, None, plan.sql, arguments, None, many)
    if not wait and isinstance(driver, DriverConnection):
        driver.statement_later(plan.sql, arguments, many=many)
        return None
    error_type = sqlite3.Error if isinstance(driver, DriverConnection) else driver.error
    try:
        raw, rowcount = await driver.statement(plan.sql, arguments, many=many)
    except error_type as error:
        # A statement queued earlier in the transaction may be the one that failed.
        sql = getattr(error, "sql", plan.sql)
        raise exc.DBAPIError.instance(
            sql, None if sql is not plan.sql else arguments, error, error_type, dialect=dialect
        ) from error
    if not wait:
        return None
    rows = plan.rows(raw) if plan.columns is not None and raw is not None else []
    return Result(rows, rowcount)


def _plan(statement: Executable, dialect: Dialect, params: Mapping[str, Any]) -> Plan:
    form = (id(statement), dialect.name, tuple(params))
    family = _PLANS.get(form)
    if family is not None and family[0] is statement:
        expanding, plans = family[1], family[2]
        plan = plans.get(tuple(len(params[key]) for key in expanding) if expanding else ())
        if plan is not None:
            return plan
    plan = _compile(statement, dialect, params)
    if family is None or family[0] is not statement:
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()  # statements are module constants; this only guards misuse
        family = _PLANS[form] = (statement, plan.expanding, {})
    plans = family[2]
    if len(plans) >= MAX_PLANS:
        plans.clear()
    plans[tuple(len(params[key]) for key in plan.expanding)] = plan
    return plan


def _compile(statement: Executable, dialect: Dialect, params: Mapping[str, Any]) -> Plan:
    compiled: Any = cast(ClauseElement, statement).compile(
        dialect=dialect, column_keys=list(params)
    )
    state = compiled.construct_expanded_state(dict(params), escape_names=False)
    expanded = {
        name: (key, index)
        for key, names in state.parameter_expansion.items()
        for index, name in enumerate(names)
    }
    binds: list[tuple[str | None, int, Any, Processor]] = []

    def processor(key: str) -> Processor:
        bind = compiled.binds[key]
        return bind.type.dialect_impl(dialect).bind_processor(dialect)  # type: ignore[no-any-return]

    for name in state.positiontup or ():
        key, index = expanded.get(name, (name, -1))
        if key in params:
            binds.append((key, index, None, processor(key)))
        else:
            value = state.parameters[name]
            process = processor(key)
            constant = value if process is None or value is None else process(value)
            binds.append((None, -1, constant, None))
    returned = list(getattr(statement, "exported_columns", ()))
    processors = (
        tuple(
            column.type.dialect_impl(dialect).result_processor(dialect, None) for column in returned
        )
        if returned
        else None
    )
    names = [str(getattr(column, "key", None) or f"c{i}") for i, column in enumerate(returned)]
    return Plan(
        statement=statement,
        sql=state.statement,
        binds=tuple(binds),
        arguments=_arguments(binds),
        columns=processors,
        row=namedtuple("Row", names, rename=True),
        expanding=tuple(key for key in state.parameter_expansion if key in params),
        processed=tuple(
            (index, process) for index, process in enumerate(processors or ()) if process
        ),
    )


def _arguments(
    binds: list[tuple[str | None, int, Any, Processor]],
) -> Callable[[Mapping[str, Any]], Sequence[Any]]:
    """`binds` as one function of the caller's parameters returning the
    positional ones: each the caller's value (an IN-list's item), through the
    type's bind processor unless None, or a constant. The common form (each a
    caller's value) takes them with one `itemgetter` and runs only the
    processors there are: a loop over the binds with a branch per kind costs,
    per statement, more than SQLite's execution of a short one."""
    if not binds:
        return _no_arguments
    if any(key is None or index >= 0 for key, index, _, _ in binds):
        return partial(_each_argument, tuple(binds))
    keys = [key for key, _, _, _ in binds]
    take = itemgetter(*keys)
    processed = tuple(
        (position, process) for position, (_, _, _, process) in enumerate(binds) if process
    )
    if len(keys) == 1:
        process = binds[0][3]
        if process is None:
            return lambda p: (take(p),)
        return lambda p: (None if (value := take(p)) is None else process(value),)
    if not processed:
        return take
    return partial(_processed, take, processed)


def _no_arguments(_: Mapping[str, Any]) -> Sequence[Any]:
    return ()


def _processed(
    take: Callable[[Mapping[str, Any]], tuple[Any, ...]],
    processed: tuple[tuple[int, Callable[[Any], Any]], ...],
    p: Mapping[str, Any],
) -> Sequence[Any]:
    values = list(take(p))
    for position, process in processed:
        value = values[position]
        if value is not None:
            values[position] = process(value)
    return tuple(values)


def _each_argument(
    binds: tuple[tuple[str | None, int, Any, Processor], ...], p: Mapping[str, Any]
) -> Sequence[Any]:
    values = []
    for key, index, constant, process in binds:
        if key is None:
            values.append(constant)
            continue
        value = p[key] if index < 0 else p[key][index]
        values.append(value if process is None or value is None else process(value))
    return tuple(values)


ON_DRIVER = "switchboard_on_driver"
"""The execution option of the fast path's PostgreSQL engines (`bot.store.db`):
statements run straight on asyncpg here."""
WRITE = "switchboard.direct.write"
"""The key of a session's `Write` in its `info` (`bot.store.db`)."""
READ = "switchboard.direct.read"
"""The key of a read session's connection for the driver path in its `info`
(`bot.store.sessions.in_direct_read`)."""
READ_DRIVER = "switchboard.direct.read_driver"
"""... and of that connection's driver."""
KEPT = "switchboard.direct.kept"
"""The key of a session's `bot.store.kept.Slot` in its `info`: PostgreSQL's
connection for the driver path (`bot.store.sessions.on_kept`)."""


class Write:
    """A SQLite write transaction begun and committed on the driver itself.

    Through the Session a transaction costs three greenlet rounds and the ORM's
    transaction objects (begin, connection, commit): on this machine about four
    times what its statement costs. `bot.store.db` gives SQLite's write
    sessions one of these: `bot.store.rows` runs its statements straight on
    `driver`, on `connection` (the writer's held connection) after `begin`,
    and the session's exit calls `commit`. A statement run through the
    Session (the ORM) or through `connection` begins its transaction there
    as ever, which joins this one (`bot.store.db._tune_sqlite`), and is
    committed there first."""

    __slots__ = ("connection", "driver")

    def __init__(self, connection: AsyncConnection, driver: DriverConnection) -> None:
        self.connection = connection
        self.driver = driver

    def begin(self) -> None:
        """Before each statement: unless a transaction is begun (by an earlier
        statement, or the Session), BEGIN IMMEDIATE goes out with this one (and
        the listeners see it). After a commit in the middle (the Session's),
        the next statement begins the next transaction, as the Session would."""
        if self.driver.in_write():
            return
        self.driver.begin_with_next("BEGIN IMMEDIATE")
        echo("BEGIN IMMEDIATE")
        sync = self.connection.sync_connection
        assert sync is not None
        for listener in sync.dispatch.before_cursor_execute:
            listener(sync, None, "BEGIN IMMEDIATE", (), None, False)

    async def commit(self) -> None:
        """Commit what went out (nothing: nothing to do), as SQLAlchemy's own
        commit would: a failure (a queued statement's, or the commit's) is
        raised as SQLAlchemy's exception, and the `commit` listeners are told."""
        sync = self.connection.sync_connection
        assert sync is not None
        if sync.in_transaction():  # a statement ran through the connection
            await self.connection.commit()
        driver = self.driver
        try:
            if not driver.transaction_open():
                await driver.commit()  # forgets a BEGIN that never went out
                return
            echo("COMMIT")
            await driver.commit()
        except sqlite3.Error as error:
            sql = getattr(error, "sql", "COMMIT")
            raise exc.DBAPIError.instance(
                sql, None, error, sqlite3.Error, dialect=sync.dialect
            ) from error
        sync.dispatch.commit(sync)

    async def rollback(self) -> None:
        """Roll back what went out (through the connection, or straight on the
        driver); a failure is raised as SQLAlchemy's exception."""
        sync = self.connection.sync_connection
        assert sync is not None
        if sync.in_transaction():
            await self.connection.rollback()
        was_open = self.driver.transaction_open()
        if was_open:
            echo("ROLLBACK")
        try:
            await self.driver.rollback()
        except sqlite3.Error as error:
            raise exc.DBAPIError.instance(
                "ROLLBACK", None, error, sqlite3.Error, dialect=sync.dialect
            ) from error
        if was_open:
            sync.dispatch.rollback(sync)
