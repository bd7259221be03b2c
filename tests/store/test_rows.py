"""`new_row` builds the same column values as a table model's constructor
(what `values_of` reads off the object), for every table, and they insert."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic_core import PydanticUndefined
from sqlmodel import SQLModel, select

from bot.store import Store
from bot.store.models import Conversation, Message, Run, TraceSpan, User
from bot.store.rows import as_new_row, insert_returning_ids, insert_rows, new_row, values_of

MODELS = sorted(
    (m for m in SQLModel.__subclasses__() if hasattr(m, "__table__")), key=lambda m: m.__name__
)
WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def sample(column_type: Any) -> Any:
    try:
        python = column_type.python_type
    except NotImplementedError:
        python = None
    return {
        int: 7,
        str: "x",
        bool: True,
        datetime: WHEN,
        bytes: b"b",
        dict: {"k": 1},
        list: ["a"],
    }.get(python, "x")  # type: ignore[arg-type]


def required(model: type[SQLModel]) -> dict[str, Any]:
    fields = model.model_fields
    return {
        c.key: sample(c.type)
        for c in model.__table__.columns  # type: ignore[attr-defined]
        if fields[c.key].default is PydanticUndefined and fields[c.key].default_factory is None
    }


def with_factories(model: type[SQLModel]) -> dict[str, Any]:
    fields = model.model_fields
    return required(model) | {k: WHEN for k, f in fields.items() if f.default_factory is not None}


def test_every_table_is_covered() -> None:
    assert {m.__name__ for m in MODELS} >= {"Message", "Run", "OutboxItem", "TraceSpan", "User"}


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_new_row_is_what_the_constructor_sets(model: type[SQLModel]) -> None:
    given = with_factories(model)
    row = new_row(model, **given)
    assert dict(row) == values_of(model(**given))
    assert row.table is model.__table__  # type: ignore[attr-defined]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_defaults_and_factories_are_applied(model: type[SQLModel]) -> None:
    before = datetime.now(UTC)
    row = new_row(model, **required(model))
    built = values_of(model(**required(model)))
    assert set(row) == set(built)
    for key, value in built.items():
        if model.model_fields[key].default_factory is None:
            assert row[key] == value, key
        else:  # a fresh value from the factory (timestamps: now)
            assert type(row[key]) is type(value), key
            if isinstance(value, datetime):
                assert before - timedelta(seconds=1) <= row[key] <= datetime.now(UTC)


def test_primary_key_is_left_out_only_while_unset() -> None:
    assert "id" not in new_row(Message, conversation_id=1, role="user")
    assert new_row(Message, id=5, conversation_id=1, role="user")["id"] == 5


def test_bad_columns_are_refused() -> None:
    with pytest.raises(TypeError, match="no column colour"):
        new_row(Message, conversation_id=1, role="user", colour="red")
    with pytest.raises(TypeError, match="missing value for 'conversation_id'"):
        new_row(Message, role="user")


async def test_new_rows_insert_like_objects(sqlite_store: Store) -> None:
    async with sqlite_store.write() as session:
        (user,) = await insert_returning_ids(session, [new_row(User, display_name="u")])
        (chat,) = await insert_returning_ids(
            session, [new_row(Conversation, key="p:c", platform="p", channel_id="c")]
        )
    run = new_row(Run, id="r1", conversation_id=chat, user_id=user, model="m", started_at=WHEN)
    spans = [
        new_row(TraceSpan, run_id="r1", kind="llm", name=f"s{i}", started_at=WHEN, duration_ms=i)
        for i in range(3)
    ]
    async with sqlite_store.write() as session:
        await insert_rows(session, [run])
        await insert_rows(session, spans, wait=False)
        await insert_rows(session, [as_new_row(TraceSpan(**dict(spans[0]) | {"name": "obj"}))])
    async with sqlite_store.read() as session:
        stored = (await session.exec(select(TraceSpan).order_by(TraceSpan.id))).all()
        (saved_run,) = (await session.exec(select(Run))).all()
    assert [(s.name, s.duration_ms, s.started_at) for s in stored] == [
        ("s0", 0, WHEN),
        ("s1", 1, WHEN),
        ("s2", 2, WHEN),
        ("obj", 0, WHEN),
    ]
    assert (saved_run.id, saved_run.status, saved_run.source) == ("r1", "running", "user")
