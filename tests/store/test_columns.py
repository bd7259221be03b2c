"""`UTCDateTime` on SQLite binds the same text SQLAlchemy's own path would."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy.dialects import sqlite
from sqlalchemy.types import TypeDecorator

from bot.store.columns import UTCDateTime

VALUES = [
    datetime(2026, 11, 26, 14, 15, 32, 123456, tzinfo=UTC),
    datetime(2026, 11, 26, 14, 15, 32, tzinfo=UTC),  # no microseconds: still six digits
    datetime(2026, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    datetime(999, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
]


def test_sqlite_binds_the_dialects_own_text():
    dialect = sqlite.dialect()
    column = UTCDateTime().dialect_impl(dialect)  # as compiled statements use it
    ours = column.bind_processor(dialect)
    theirs = TypeDecorator.bind_processor(column, dialect)  # ours, then the dialect's
    assert ours is not None and theirs is not None
    for value in VALUES:
        assert isinstance(theirs(value), str)
        assert ours(value) == theirs(value)
    assert ours(VALUES[2]) == "2025-12-31 19:00:00.000000"
    assert ours(None) is None


def test_a_naive_datetime_is_refused():
    process = UTCDateTime().bind_processor(sqlite.dialect())
    with pytest.raises(ValueError, match="naive"):
        process(datetime(2026, 1, 1))
