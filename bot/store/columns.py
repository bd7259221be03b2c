"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, String, func, literal_column
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes in, aware UTC datetimes out.

    SQLite has no time zones: values are stored as naive UTC and made aware again
    when read. PostgreSQL stores `timestamptz`."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given; use an aware UTC datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def bind_processor(self, dialect: Dialect) -> Any:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        # One call instead of ours and then the SQLite dialect's (which formats
        # through a dict): the same text, "YYYY-MM-DD HH:MM:SS.ffffff".
        def process(value: datetime | None) -> str | None:
            if value is None:
                return None
            zone = value.tzinfo
            if zone is None:
                raise ValueError("naive datetime given; use an aware UTC datetime")
            if zone is not UTC:  # (`utcnow`'s are UTC already: no conversion)
                value = value.astimezone(UTC)
            # without the "+00:00" that ends an aware UTC time's text
            return value.isoformat(" ", "microseconds")[:26]

        return process

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class utc_day(FunctionElement[str]):
    """A UTC timestamp column as its day, "YYYY-MM-DD" text, in SQL: each
    database's own function (`strftime` on SQLite, `to_char` on PostgreSQL),
    its constants inline, so that the same day in a SELECT and its GROUP BY
    renders as the same expression."""

    type = String()
    inherit_cache = True


@compiles(utc_day, "sqlite")
def _utc_day_sqlite(element: utc_day, compiler: Any, **kw: Any) -> str:
    day = func.strftime(literal_column("'%Y-%m-%d'"), *element.clauses)
    return compiler.process(day, **kw)  # type: ignore[no-any-return]


@compiles(utc_day)
def _utc_day(element: utc_day, compiler: Any, **kw: Any) -> str:
    utc = func.timezone(literal_column("'UTC'"), *element.clauses)
    day = func.to_char(utc, literal_column("'YYYY-MM-DD'"))
    return compiler.process(day, **kw)  # type: ignore[no-any-return]
