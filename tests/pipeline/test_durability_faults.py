"""The database failing at the worst moments: at intake (the platform gets a
failure and redelivers; answered once) and at the final write (the reply still
goes out, the turn waits in the spool and is written, and charged, once the
database is back). SQLite is locked by another connection, which is what a
busy or stuck database looks like to the service; the Slack adapter, bolt and
the fake Slack are real."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from sqlmodel import select

from adapters.slack import SlackAdapter
from bot.app import App
from bot.store.models import Budget, BudgetHold, InboxItem, Message, Run
from tests.adapters.slack.support import Rig, slack_secrets
from tests.conftest import Database, make_settings
from tests.fakes.anthropic import FakeAnthropic, FakeUsage, text_reply
from tests.fakes.slack import FakeSlack, event_body
from tests.waiting import wait_until


def dm(text: str, ts: str) -> dict[str, Any]:
    return event_body(
        {
            "type": "message",
            "channel": "D1",
            "channel_type": "im",
            "user": "U1",
            "text": text,
            "ts": ts,
            "event_ts": ts,
        }
    )


@asynccontextmanager
async def slack_app(
    tmp_path: Path, fake: FakeAnthropic, **sections: Any
) -> AsyncIterator[tuple[Rig, FakeSlack]]:
    database = Database("sqlite", tmp_path)
    async with FakeSlack() as slack, aiohttp.ClientSession() as http:
        settings = make_settings(
            database,
            fake,
            server={"port": 0},
            slack={"enabled": True, "mode": "http", "api_base_url": slack.api_url},
            **sections,
        )
        # Locked writes fail after 0.2 s instead of 5 s.
        db = settings.database.model_copy(update={"busy_timeout_ms": 200})
        settings = settings.model_copy(update={"database": db})
        app = App(settings, slack_secrets())
        rig = Rig(app, None, slack, http)  # type: ignore[arg-type]
        try:
            await app.open()
            await app.start_adapters(["slack"])
            adapter = app.adapters[0]
            assert isinstance(adapter, SlackAdapter)
            rig.adapter = adapter
            yield rig, slack
        finally:
            await rig.close()


@asynccontextmanager
async def locked(path: Path) -> AsyncIterator[None]:
    """Another process holds SQLite's write lock.

    The lock is taken off the event loop: the service may be in the middle of a
    write transaction whose commit needs the loop, and a busy wait on the
    loop's own thread would hold that commit back until the wait gave up."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)
    await asyncio.to_thread(conn.execute, "BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


async def test_database_down_at_intake_fails_the_delivery_and_the_retry_is_answered_once(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(text_reply("Answered once."))
    async with slack_app(tmp_path, fake_anthropic) as (rig, slack):
        body = dm("hello", "1700000001.000001")
        async with locked(tmp_path / "test.db"):
            status, _ = await rig.event(body)
        assert status == 500  # not stored, so not acknowledged: Slack will retry
        assert fake_anthropic.request_count == 0

        status, _ = await rig.event(body, headers={"X-Slack-Retry-Num": "1"})
        assert status == 200
        await slack.wait_for(lambda: len(slack.messages) == 1)
        status, _ = await rig.event(body, headers={"X-Slack-Retry-Num": "2"})
        assert status == 200  # a redelivery of a stored message: acknowledged, nothing more
        await rig.adapter.idle()
        await asyncio.sleep(0.2)
    assert [m["text"] for m in slack.messages] == ["Answered once."]
    assert fake_anthropic.request_count == 1


async def test_database_down_at_the_final_write_keeps_the_turn_and_charges_it_later(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    model_done = threading.Event()
    fake_anthropic.script(
        text_reply(
            "You get this anyway.",
            usage=FakeUsage(input_tokens=1200, output_tokens=300),
            hold=model_done,
        )
    )
    async with slack_app(
        tmp_path,
        fake_anthropic,
        budgets={"guest": 50_000},
        inbox={"write_retry_seconds": 0.5, "sweep_seconds": 0.1},
        streaming={"enabled": False},  # the one message seen is the final reply
    ) as (rig, slack):
        rig.app.start_recovery()
        status, _ = await rig.event(dm("hello", "1700000001.000001"))
        assert status == 200
        await fake_anthropic.wait_for_requests(1)
        async with locked(tmp_path / "test.db"):
            model_done.set()  # the model answers while nothing can be written
            await slack.wait_for(lambda: len(slack.messages) == 1)
            spool = rig.app.pipeline.s.writer.spool
            assert spool.pending()  # the turn waits in the spool
        # The database is back: the housekeeper writes the spooled turn.
        await wait_until(lambda: not spool.pending())
        async with rig.app.store.read() as s:
            runs = (await s.exec(select(Run))).all()
            rows = (await s.exec(select(Message))).all()
            item = (await s.exec(select(InboxItem))).one()
            budget = (await s.exec(select(Budget))).one()
            holds = (await s.exec(select(BudgetHold))).all()
    assert [m["text"] for m in slack.messages] == ["You get this anyway."]
    assert [r.status for r in runs] == ["completed"]
    assert [(r.role, r.text) for r in rows] == [
        ("user", "hello"),
        ("assistant", "You get this anyway."),
    ]
    assert item.state == "answered"
    assert (budget.used, holds) == (1500, [])  # charged, and the hold released
    assert fake_anthropic.request_count == 1
