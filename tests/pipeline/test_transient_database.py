"""A database failure that passes, met in the middle of a run, is tried again:
the user gets their answer, not "Sorry, something went wrong".

- PostgreSQL ends the connection a budget reservation runs on
  (`pg_terminate_backend`: "terminating connection due to administrator
  command"), deterministically, from a trigger on the hold's INSERT;
- every connection of the service is cut while the model answers, and the run
  goes on (its settlement, its next reservation, its turn);
- SQLite is busy (another process holds the write lock) when a run reserves.

The real pipeline and store, the anthropic SDK against the fake API."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sqlite3
import threading
from collections.abc import Mapping
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlmodel import select

from bot.pipeline.runner import INTERNAL_ERROR_REPLY
from bot.store.models import BudgetHold, InboxItem, Run
from bot.store.transient import is_transient
from tests.accounts.test_changes_elsewhere import cut_every_connection
from tests.conftest import Database
from tests.fakes.anthropic import FakeUsage, text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message
from tests.probes import ProbeTool
from tests.waiting import wait_until

LIMITED = {"budgets": {"guest": 100_000}}

SELF_CUT = [
    "CREATE SEQUENCE cut_once",
    """CREATE FUNCTION cut_once() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF nextval('cut_once') = 1 THEN
            PERFORM pg_terminate_backend(pg_backend_pid());
        END IF;
        RETURN NEW;
    END $$""",
    "CREATE TRIGGER cut_once BEFORE INSERT ON budget_holds"
    " FOR EACH ROW EXECUTE FUNCTION cut_once()",
]
"""The first hold's INSERT ends its own connection, as an administrator (or a
failover) ending the backend mid-statement does; later ones pass."""


def postgres_only(database: Database) -> None:
    if database.backend != "postgres":
        pytest.skip("a PostgreSQL server connection to end")


async def settled(app: Any) -> tuple[list[str], list[str], list[BudgetHold]]:
    """(run statuses, inbox states, holds left)."""
    async with app.store.read() as s:
        runs = [r.status for r in (await s.exec(select(Run))).all()]
        items = [i.state for i in (await s.exec(select(InboxItem))).all()]
        holds = list((await s.exec(select(BudgetHold))).all())
    return runs, items, holds


async def test_a_reservation_whose_connection_the_server_ends_is_tried_again(
    make_app, fake_anthropic, database: Database, caplog: pytest.LogCaptureFixture
):
    postgres_only(database)
    app = await make_app(**LIMITED)
    adapter = RecordingAdapter()
    app.attach(adapter)
    async with app.store.write() as session:
        for statement in SELF_CUT:
            await session.exec(text(statement))  # type: ignore[call-overload]
    fake_anthropic.script(text_reply("Here is your answer."))
    with caplog.at_level(logging.WARNING):
        outcome = await app.pipeline.handle(message("hello"))

    assert outcome.status == "answered", caplog.text
    assert adapter.texts == ["Here is your answer."]
    assert INTERNAL_ERROR_REPLY not in adapter.texts
    assert "store.retry budget.reserve" in caplog.text
    assert "terminating connection" in caplog.text  # it did meet the cut
    runs, items, holds = await settled(app)
    assert (runs, items, holds) == (["completed"], ["answered"], [])


async def test_every_connection_cut_while_the_model_answers_the_run_goes_on(
    make_app, fake_anthropic, database: Database
):
    """A database restart (every backend of the service ended) while the first
    call of a tool loop is with the model: the settlement, the next
    reservation and the turn all find their way to new connections."""
    postgres_only(database)
    app = await make_app(tools=[ProbeTool("step")], **LIMITED)
    adapter = RecordingAdapter()
    app.attach(adapter)
    first_call = threading.Event()
    fake_anthropic.script(
        dataclasses.replace(tool_use_reply(tool_call("step")), hold=first_call),
        text_reply("Done after the restart.", usage=FakeUsage(input_tokens=50, output_tokens=5)),
    )
    answering = asyncio.create_task(app.pipeline.handle(message("go")))
    await fake_anthropic.wait_for_requests(1)
    await cut_every_connection(database)
    first_call.set()
    outcome = await answering

    assert outcome.status == "answered"
    assert adapter.texts == ["Done after the restart."]
    runs, items, holds = await settled(app)
    assert (runs, items, holds) == (["completed"], ["answered"], [])


async def test_a_reservation_while_sqlite_is_busy_is_tried_again(
    make_app, fake_anthropic, database: Database, caplog: pytest.LogCaptureFixture
):
    """Another process holds SQLite's write lock longer than the busy timeout
    just as a run reserves its next call: tried again once it let go."""
    if database.backend != "sqlite":
        pytest.skip("SQLite's busy database")
    path = make_url(database.url).database
    assert path is not None
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    async def lock_the_database(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        other.execute("BEGIN IMMEDIATE")  # as another process's write would
        return "stepped"

    app = await make_app(
        tools=[ProbeTool("step", behaviour=lock_the_database)],
        database={"busy_timeout_ms": 50},
        **LIMITED,
    )
    adapter = RecordingAdapter()
    app.attach(adapter)
    fake_anthropic.script(tool_use_reply(tool_call("step")), text_reply("Got there."))

    async def let_go_once_tried() -> None:
        await wait_until(lambda: "store.retry budget.reserve" in caplog.text, 30)
        other.execute("ROLLBACK")

    try:
        with caplog.at_level(logging.WARNING):
            letting_go = asyncio.create_task(let_go_once_tried())
            outcome = await app.pipeline.handle(message("go"))
            await letting_go
    finally:
        other.close()
    assert outcome.status == "answered", caplog.text
    assert adapter.texts == ["Got there."]
    assert "database is locked" in caplog.text
    runs, items, holds = await settled(app)
    assert (runs, items, holds) == (["completed"], ["answered"], [])


def test_which_failures_pass() -> None:
    assert is_transient(sqlite3.OperationalError("database is locked"))
    assert not is_transient(sqlite3.OperationalError("no such table: budgets"))
    assert not is_transient(sqlite3.IntegrityError("UNIQUE constraint failed: runs.id"))
    assert is_transient(ConnectionResetError("reset by peer"))
    assert not is_transient(ValueError("terminating connection"))  # not the database's

    class Admin(Exception):
        sqlstate = "57P01"

    class Unique(Exception):
        sqlstate = "23505"

    wrapped = RuntimeError("wrapped")
    wrapped.__cause__ = Admin("terminating connection due to administrator command")
    assert is_transient(wrapped)
    assert not is_transient(Unique("duplicate key"))
