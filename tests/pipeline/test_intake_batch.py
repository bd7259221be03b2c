"""Messages accepted at the same moment: each stored once, a redelivery
refused, and on PostgreSQL stored with a few statements instead of one each
(`bot.pipeline.intake_batch`); a row the database refuses, or a connection cut
under a statement, fails only its own message."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import Counter

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlmodel import select

from bot.pipeline.intake import Inbox
from bot.store import Store
from bot.store.models import InboxItem
from tests.harness import message


def incoming(event_id: str, words: str = "hello") -> object:
    return dataclasses.replace(
        message(words, platform_channel_id=f"chan-{event_id}"), event_id=event_id
    )


async def stored(store: Store) -> Counter[str]:
    async with store.read() as s:
        rows = (await s.exec(select(InboxItem.event_id, InboxItem.state))).all()
    assert all(state == "running" for _, state in rows)
    return Counter(event_id for event_id, _ in rows)


async def test_messages_arriving_together_are_each_stored_once(store: Store) -> None:
    inbox = Inbox(store, "instance-a", 30)
    for early in ("e0", "e1", "e2"):  # stored before: their redeliveries are refused
        assert await inbox.accept(incoming(early))  # type: ignore[arg-type]
    events = [f"e{i}" for i in range(40)] + ["e5", "e6", "e7"]  # three sent twice at once
    before = inbox._batch.statements if inbox._batch is not None else 0
    results = await asyncio.gather(*(inbox.accept(incoming(e)) for e in events))  # type: ignore[arg-type]

    accepted = Counter(e for e, ok in zip(events, results, strict=True) if ok)
    assert accepted == Counter(f"e{i}" for i in range(3, 40))  # each new one once
    assert await stored(store) == Counter(f"e{i}" for i in range(40))
    if not store.is_sqlite:
        assert inbox._batch is not None
        # Not one INSERT each: those arriving while one is out wait and go together.
        assert inbox._batch.statements - before <= 2


def postgres_only(store: Store) -> None:
    if store.is_sqlite:
        pytest.skip("SQLite stores each message on its own (one writer, no round trip)")


async def _install(store: Store, body: str) -> None:
    """A BEFORE INSERT trigger on inbox running `body` for event ids starting
    with 'bad'."""
    async with store.write() as s:
        await s.exec(
            text(  # type: ignore[call-overload]
                "CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$"
                f" BEGIN IF NEW.event_id LIKE 'bad%' THEN {body} END IF; RETURN NEW; END $$"
            )
        )
        await s.exec(
            text(  # type: ignore[call-overload]
                "CREATE TRIGGER refuse_bad BEFORE INSERT ON inbox"
                " FOR EACH ROW EXECUTE FUNCTION refuse_bad()"
            )
        )


async def _burst_with_one_bad(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    """22 messages at once, one of them (sent twice) refused by the trigger."""
    inbox = Inbox(store, "instance-a", 30)
    events = ["first", *(f"m{i}" for i in range(10)), "bad", *(f"n{i}" for i in range(10)), "bad"]
    with caplog.at_level(logging.WARNING, logger="switchboard.inbox"):
        results = await asyncio.gather(
            *(inbox.accept(incoming(e)) for e in events),  # type: ignore[arg-type]
            return_exceptions=True,
        )
    bad = [r for e, r in zip(events, results, strict=True) if e == "bad"]
    assert len(bad) == 2 and all(isinstance(r, DBAPIError) for r in bad)  # neither acknowledged
    good = {e: r for e, r in zip(events, results, strict=True) if e != "bad"}
    assert set(good.values()) == {True}
    assert await stored(store) == Counter(good)  # the others stored, once each
    assert "inbox.batch_failed rows=22" in caplog.text
    # The intake connections still work.
    assert await inbox.accept(incoming("after"))  # type: ignore[arg-type]
    assert (await stored(store))["after"] == 1


async def test_a_row_the_database_refuses_fails_only_its_own_message(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    postgres_only(store)
    await _install(store, "RAISE EXCEPTION 'refused';")
    await _burst_with_one_bad(store, caplog)


async def test_a_connection_cut_under_a_batch_fails_only_the_message_that_cut_it(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The server ends the connection in the middle of the multi-row INSERT
    (the trigger terminates its own backend): nothing of that statement is
    stored; each row is tried again on its own, on new connections."""
    postgres_only(store)
    await _install(store, "PERFORM pg_terminate_backend(pg_backend_pid());")
    await _burst_with_one_bad(store, caplog)
