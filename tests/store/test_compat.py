"""The fast path's guard (`bot.store.compat`): the self-check passes on the
installed versions; when a private name it relies on is gone, one WARNING, and
the service runs the plain path (stock aiosqlite, SQLAlchemy Core and pool)
and answers messages; `[database] fast_path = false` selects it on purpose."""

from __future__ import annotations

import logging
from typing import Any

import aiosqlite
import pytest
from sqlalchemy import event, text
from sqlalchemy.pool import AsyncAdaptedQueuePool, QueuePool
from sqlmodel import col, select

from bot.store import Store, compat, direct, sqlite_driver
from bot.store.kept import Kept
from bot.store.models import InboxItem, Message, Run
from bot.store.pool import KeepingPool
from tests.conftest import FAST_PATH, Database
from tests.fakes.anthropic import text_reply
from tests.harness import RecordingAdapter, message


@pytest.fixture
def unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The self-check runs again for this test (and after it, for the next)."""
    monkeypatch.setattr(compat, "_checked", None)
    monkeypatch.setattr(compat, "_forced", None)


def _sqlite_driver(store: Store) -> Any:
    return store.engine.sync_engine.pool._creator  # type: ignore[attr-defined]


def test_the_installed_versions_pass_the_self_check() -> None:
    assert compat.problems() == []


@pytest.mark.parametrize(
    ("owner", "name"),
    [
        (aiosqlite.Connection, "_execute"),
        (QueuePool, "_dec_overflow"),
    ],
)
def test_a_missing_private_name_is_a_problem_named_by_its_dependency(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str
) -> None:
    monkeypatch.delattr(owner, name)
    found = compat.problems()
    assert len(found) == 1 and name in found[0]


def test_a_behaviour_that_changed_is_a_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    """The names there, but the pool no longer closes a connection returned
    beyond its size (what `KeepingPool` relies on `_dec_overflow` for)."""
    monkeypatch.setattr(compat.KeepingPool, "_dec_overflow", lambda self: True)
    stock = AsyncAdaptedQueuePool._do_return_conn
    monkeypatch.setattr(compat.KeepingPool, "_do_return_conn", stock)
    assert any("pool" in problem for problem in compat.problems())


async def test_a_failed_self_check_warns_once_and_the_service_answers_on_the_plain_path(
    unchecked: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    make_app: Any,
    fake_anthropic: Any,
    database: Database,
) -> None:
    """The name is missing when the service starts (it is put back before the
    service runs: stock aiosqlite uses it itself)."""
    with caplog.at_level(logging.WARNING, logger="switchboard.store"):
        with monkeypatch.context() as patched:
            patched.delattr(aiosqlite.Connection, "_execute")
            assert compat.fast_path_usable() is False
        app = await make_app()
        adapter = RecordingAdapter()
        app.attach(adapter)
        store: Store = app.store
        assert not store.fast_path
        warnings = [r for r in caplog.records if "store.fast_path_off" in r.getMessage()]
        assert len(warnings) == 1 and "aiosqlite" in warnings[0].getMessage()
        assert compat.fast_path_usable() is False  # asked again: no second warning
    assert len([r for r in caplog.records if "store.fast_path_off" in r.getMessage()]) == 1
    _assert_plain(store)

    statements: list[str] = []
    event.listen(
        store.engine.sync_engine,
        "before_cursor_execute",
        lambda _c, _cur, sql, *_: statements.append(sql),
    )
    fake_anthropic.script(text_reply("Hello from the plain path."))
    outcome = await app.pipeline.handle(message("hi"))
    assert outcome.status == "answered"
    assert adapter.texts == ["Hello from the plain path."]
    async with store.read() as session:
        rows = (await session.exec(select(Message.text).order_by(col(Message.id)))).all()
        run = (await session.exec(select(Run))).one()
        state = (await session.exec(select(InboxItem.state))).one()
    assert rows == ["hi", "Hello from the plain path."]
    assert run.status == "completed" and state == "answered"
    assert any(sql.startswith("INSERT INTO runs") for sql in statements)


async def test_fast_path_false_selects_the_plain_path(database: Database) -> None:
    store = database.store(fast_path=False)
    try:
        await store.upgrade()
        _assert_plain(store)
    finally:
        await store.dispose()


@pytest.mark.fast_path
async def test_the_fast_path_is_on_by_default(database: Database) -> None:
    assert FAST_PATH
    store = database.store()
    try:
        assert store.fast_path
        if store.is_sqlite:
            assert _sqlite_driver(store) is not None
        else:
            assert isinstance(store.engine.pool, KeepingPool)
            assert isinstance(store._kept, Kept)
    finally:
        await store.dispose()


def _assert_plain(store: Store) -> None:
    """No class of `bot.store.compat` in use: SQLite's connections are stock
    aiosqlite's, PostgreSQL's pool is SQLAlchemy's, nothing kept, no statement
    runs straight on a driver."""
    assert not store.fast_path
    if store.is_sqlite:
        assert store._held_write is None and not store._reads_on_loop
    else:
        assert type(store.engine.pool) is AsyncAdaptedQueuePool
        assert store._kept is None and store._kept_urgent is None
    options = store.engine.sync_engine.get_execution_options()
    assert not options.get(direct.ON_DRIVER)
    assert sqlite_driver.Connection.__mro__[1] is compat.AiosqliteConnection


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast", "plain"])
async def test_both_paths_work_in_the_configured_schema(pg: Database, fast_path: bool) -> None:
    store = pg.store(fast_path=fast_path)
    try:
        for opened in (store.write, store.write_one, store.read):
            async with opened() as session:
                shown = (await session.exec(text("SHOW search_path"))).one()  # type: ignore[call-overload]
            assert shown[0] == pg.schema
    finally:
        await store.dispose()
