"""Writing a finished turn: the fence (a message another instance took over
means nothing of the turn is written or sent), atomicity when the database
refuses a part, and on PostgreSQL the whole turn as one statement
(`bot.pipeline.turn_statement`). SQLite and PostgreSQL, both paths."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading

import pytest
from sqlalchemy import update
from sqlmodel import col, func, select

from bot.store.models import Budget, InboxItem, Message, OutboxItem, Run, TokenLog
from tests.fakes.anthropic import text_reply
from tests.harness import RecordingAdapter, message
from tests.pipeline.test_early_lease import install
from tests.pipeline.test_hot_path import statements
from tests.waiting import wait_until


async def open_app(make_app, allowance: int | str = "unlimited"):  # type: ignore[no-untyped-def]
    """An unlimited budget is charged with the turn; a limited one when each
    model call ends (`bot.pipeline.metering`)."""
    app = await make_app(budgets={"guest": allowance})
    adapter = RecordingAdapter()
    app.attach(adapter)
    return app, adapter


async def counts(app) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Rows a turn writes, and the budget it charges."""
    async with app.store.read() as s:
        found = {
            model.__name__: (await s.exec(select(func.count()).select_from(model))).one()
            for model in (Run, Message, OutboxItem, TokenLog)
        }
        found["used"] = (await s.exec(select(func.sum(Budget.used)))).one() or 0
    return found


def refuse_outbox(sqlite: bool) -> list[str]:
    """A trigger that fails any new outbox row while `refuse_outbox` has a row."""
    table = [
        "CREATE TABLE refuse_outbox (id INTEGER PRIMARY KEY)",
        "INSERT INTO refuse_outbox VALUES (1)",
    ]
    if sqlite:
        return [
            *table,
            "CREATE TRIGGER refuse_outbox BEFORE INSERT ON outbox"
            " WHEN EXISTS (SELECT 1 FROM refuse_outbox)"
            " BEGIN SELECT RAISE(ABORT, 'outbox refused'); END",
        ]
    return [
        *table,
        "CREATE FUNCTION refuse_outbox() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN IF EXISTS (SELECT 1 FROM refuse_outbox)"
        " THEN RAISE EXCEPTION 'outbox refused'; END IF; RETURN NEW; END $$",
        "CREATE TRIGGER refuse_outbox BEFORE INSERT ON outbox"
        " FOR EACH ROW EXECUTE FUNCTION refuse_outbox()",
    ]


async def test_a_turn_whose_message_another_instance_took_over_writes_and_sends_nothing(
    make_app, fake_anthropic
):
    """This process stalled past its lease and another instance took the
    message over while the model was answering: the finished turn is not
    ours, so no row of it is written, nothing sent, and the message stays
    with the instance that took it. (The model call was made: its tokens are
    charged when the call ends, `bot.pipeline.metering`, with the call's token
    log in the same transaction, not with the turn.)"""
    app, adapter = await open_app(make_app, 100_000)
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    before, sent = await counts(app), len(adapter.sent)
    release = threading.Event()
    fake_anthropic.script(dataclasses.replace(text_reply("too late"), hold=release))
    late = dataclasses.replace(message("are you there?"), event_id="late-1")
    handling = asyncio.create_task(app.pipeline.handle(late))
    await fake_anthropic.wait_for_requests(2)
    async with app.store.write() as s:
        await s.exec(
            update(InboxItem)
            .where(col(InboxItem.event_id) == "late-1")
            .values(lease_owner="instance-b")
        )
    release.set()
    await handling
    await app.pipeline.idle()
    after = await counts(app)
    assert after["used"] > before.pop("used")
    assert after["TokenLog"] == before.pop("TokenLog") + 1  # the call's, with its charge
    assert {k: v for k, v in after.items() if k not in ("used", "TokenLog")} == before
    assert len(adapter.sent) == sent
    async with app.store.read() as s:
        row = (await s.exec(select(InboxItem).where(InboxItem.event_id == "late-1"))).one()
    assert (row.state, row.lease_owner, row.run_id) == ("running", "instance-b", None)


async def test_a_turn_the_database_refuses_in_part_is_written_whole_once_it_takes_it(
    make_app, fake_anthropic, caplog
):
    """The outbox refuses the reply's row (a trigger) for a while: the turn is
    retried, none of it is stored meanwhile (the messages, the run, the
    charge go with the reply or not at all), and once the outbox takes rows
    again the turn is stored once and the reply sent once."""
    app, adapter = await open_app(make_app)
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    before, sent = await counts(app), len(adapter.sent)
    await install(app, refuse_outbox(app.store.is_sqlite))
    caplog.set_level(logging.WARNING, logger="switchboard.spool")
    handling = asyncio.create_task(app.pipeline.handle(message("store me whole")))
    await wait_until(lambda: any("run.save_retry" in r.getMessage() for r in caplog.records))
    assert await counts(app) == before  # nothing of the refused turn
    await install(app, ["DELETE FROM refuse_outbox"])
    assert (await handling).status == "answered"
    await app.pipeline.idle()
    after = await counts(app)
    assert after["Run"] == before["Run"] + 1
    assert after["Message"] == before["Message"] + 2  # the message and the answer
    assert after["OutboxItem"] == before["OutboxItem"] + 1
    assert after["used"] > before["used"]
    assert len(adapter.sent) == sent + 1
    assert "run.not_saved" not in caplog.text


async def test_on_postgres_a_turn_is_one_statement(make_app, fake_anthropic):
    """The run, its messages, spans and token logs, the inbox's end, the
    charge and the outbox: one statement (in a transaction: the fence rolls it
    back), and what it returns (the charge, the outbox ids) is what the turn
    reports. On the plain path each part is a statement of that transaction."""
    app, adapter = await open_app(make_app)
    if app.store.is_sqlite:
        pytest.skip("SQLite writes the turn as one transaction of statements")
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    with statements(app) as seen:
        assert (await app.pipeline.handle(message("again"))).status == "answered"
    await app.pipeline.idle()
    [turn] = [s for s in seen if "INSERT INTO outbox" in s]
    assert "UPDATE inbox" in turn and "UPDATE budgets" in turn
    for part in ("INSERT INTO runs", "INSERT INTO messages"):
        assert (part in turn) == app.store.fast_path
    assert "CAST" not in turn.split("SELECT", 1)[0]
    async with app.store.read() as s:
        outbox = (await s.exec(select(OutboxItem).order_by(col(OutboxItem.id)))).all()
        budget = (await s.exec(select(Budget))).one()
        spent = func.sum(TokenLog.input_tokens + TokenLog.output_tokens)
        tokens = (await s.exec(select(spent))).one()
    assert [o.state for o in outbox] == ["sent", "sent"]
    assert adapter.sent[-1].text == outbox[-1].text
    assert budget.used == tokens  # both turns charged, once each


async def test_a_turn_committed_whose_answer_was_lost_is_stored_once_and_sent_once(
    make_app, fake_anthropic, monkeypatch, caplog
):
    """The database committed the turn, but its answer never came back (the
    connection dropped just after): the retry finds the turn stored, writes
    nothing more, and the reply stored with it goes out once, from the
    outbox (before, the retry failed on what was there and the reply stayed
    unsent in the outbox, leased to this process, or was sent twice)."""
    app, adapter = await open_app(make_app)
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    before, sent = await counts(app), len(adapter.sent)
    writer = app.pipeline.s.writer
    write = writer._write
    lost: list[object] = []

    async def answer_lost(*args):  # type: ignore[no-untyped-def]
        saved = await write(*args)
        if not lost:
            lost.append(saved)
            raise ConnectionResetError("connection lost before the database's answer")
        return saved

    monkeypatch.setattr(writer, "_write", answer_lost)
    caplog.set_level(logging.WARNING, logger="switchboard.spool")
    assert (await app.pipeline.handle(message("once, please"))).status == "answered"
    await app.pipeline.idle()
    assert lost  # the answer was lost once
    after = await counts(app)
    assert after["Run"] == before["Run"] + 1
    assert after["Message"] == before["Message"] + 2
    assert after["OutboxItem"] == before["OutboxItem"] + 1
    assert len(adapter.sent) == sent + 1
    async with app.store.read() as s:
        assert set((await s.exec(select(OutboxItem.state))).all()) == {"sent"}
    assert "run.saved_before" in caplog.text
    assert "run.not_saved" not in caplog.text
