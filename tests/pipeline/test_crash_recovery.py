"""Killing the real service at the worst moments loses nothing and doubles nothing.

`switchboard run` runs as a subprocess (Slack in HTTP mode against the fake
Slack, a slow fake model), on SQLite and on PostgreSQL. Slack's side redelivers
every event until it is acknowledged, as Slack does. After a SIGKILL and a
restart, every accepted message must be answered exactly once, in order per
conversation.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlmodel import select

from bot.accounts.identity import Identity
from bot.conversations import Conversations
from bot.scheduling.jobs import Jobs
from bot.scheduling.parse import parse_when
from bot.store.models import InboxItem, ScheduledJob
from bot.types import IncomingMessage, utcnow
from tests.conftest import TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic, last_user_text, text_reply
from tests.fakes.slack import FakeSlack, event_body
from tests.service_rig import Service, SlackSender, free_port, service_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
NOT_STREAMED = {"SWITCHBOARD__STREAMING__SLACK__ENABLED": "false"}


def dm_event(channel: str, user: str, text: str, ts: str) -> dict[str, Any]:
    return event_body(
        {
            "type": "message",
            "channel": channel,
            "channel_type": "im",
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
        }
    )


def replies_in(slack: FakeSlack, channel: str) -> list[str]:
    return [str(m["text"]) for m in slack.messages if m["channel"] == channel]


async def wait_for(check: Callable[[], bool], what: str, service: Service, within: float = 90.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        if loop.time() > deadline:
            raise AssertionError(
                f"timed out waiting for {what}\n--- service log ---\n" + service.log_text
            )
        await asyncio.sleep(0.05)


async def test_sigkill_mid_run_loses_nothing_and_doubles_nothing(
    database: Database, tmp_path: Path
) -> None:
    conversations, per_conversation = 6, 3
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        # A slow model: when the service dies, several runs are half done (slow
        # enough that a loaded machine can't finish them between check and kill).
        model.responder = lambda body: text_reply(f"re: {last_user_text(body)}", delay=1.5)
        model.flight_key = lambda body: "all"  # calls being answered now: runs mid-call
        service = Service(service_env(database, model, slack, port := free_port()), tmp_path, port)
        await service.start()
        async with aiohttp.ClientSession() as http:
            sender = SlackSender(http, [service.url])

            async def talk(k: int) -> None:
                channel = f"D{k}"
                for m in range(1, per_conversation + 1):
                    text = f"c{k}-m{m}"
                    await sender.deliver(
                        dm_event(channel, f"U{k}", text, f"17000000{k:02d}.{m:06d}")
                    )
                    reply = f"re: {text}"
                    await wait_for(
                        lambda r=reply: r in replies_in(slack, channel), text, service, 120
                    )

            talking = [asyncio.create_task(talk(k)) for k in range(conversations)]
            # Kill once some replies are out and several runs are mid-call: calls
            # the model has not answered yet (counting requests against replies
            # seen could be fooled by replies already posted but not yet recorded).
            await wait_for(
                lambda: (
                    len(slack.messages) >= conversations // 2 and model.in_flight.get("all", 0) >= 2
                ),
                "replies out and runs in flight",
                service,
            )
            service.kill()
            await service.stop()
            await service.start()
            await asyncio.gather(*talking)
            await asyncio.sleep(1.5)  # anything doubled late would show up now
            code = await service.stop()

    assert code == 0, service.log_text
    for k in range(conversations):
        expected = [f"re: c{k}-m{m}" for m in range(1, per_conversation + 1)]
        assert replies_in(slack, f"D{k}") == expected, service.log_text
    recovered = [line for line in service.logs if "inbox.recovered" in line]
    assert recovered, "the kill left nothing half done: the test proved nothing\n" + (
        service.log_text
    )
    assert any("recovery.started recovered" in line for line in service.logs)


async def test_a_reply_stored_but_not_sent_when_killed_is_sent_once(
    database: Database, tmp_path: Path
) -> None:
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        model.script(text_reply("Stored before it was sent."))
        # Not streamed: the held chat.postMessage is the final send (see
        # tests/adapters/slack/test_slack_crash_streaming.py for a streamed one).
        env = service_env(database, model, slack, port := free_port(), **NOT_STREAMED)
        service = Service(env, tmp_path, port)
        await service.start()
        released = slack.hold("chat.postMessage")
        async with aiohttp.ClientSession() as http:
            await SlackSender(http, [service.url]).deliver(
                dm_event("D1", "U1", "hello", "1700000001.000001")
            )
            await wait_for(lambda: bool(slack.held), "the reply being sent", service)
            service.kill()  # the turn and its reply are committed; the send is in flight
            await service.stop()
            released.set()  # the request that was in flight never reached Slack
            await wait_for(lambda: bool(slack.dropped), "the dropped send", service)
            await service.start()
            await wait_for(lambda: replies_in(slack, "D1") != [], "the reply", service)
            await asyncio.sleep(1.5)
            await service.stop()
    assert replies_in(slack, "D1") == ["Stored before it was sent."]
    assert model.request_count == 1  # sent from the outbox, not answered again
    assert any("outbox.recovered" in line for line in service.logs)


async def test_a_wakeup_killed_mid_fire_runs_again_within_seconds(
    database: Database, tmp_path: Path
) -> None:
    store = database.store()
    await store.upgrade()
    try:
        msg = IncomingMessage(
            platform="slack", platform_user_id="U1", platform_channel_id="D1", text="-"
        )
        user = await Identity(store, ()).resolve(msg)
        conversation = await Conversations(store).resolve(msg)
        now = utcnow()
        job = await Jobs(store).create(
            owner_user_id=user.id,
            conversation_id=conversation.id,
            chat_type="direct",
            prompt="Say good morning.",
            spec=parse_when((now + timedelta(seconds=1)).isoformat(), timezone="UTC", now=now),
            now=now,
        )
    finally:
        await store.dispose()

    first_call = threading.Event()
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        model.script(text_reply("never sent", hold=first_call), text_reply("Good morning!"))
        service = Service(service_env(database, model, slack, port := free_port()), tmp_path, port)
        await service.start()
        await wait_for(lambda: model.request_count == 1, "the wakeup's LLM call", service)
        service.kill()
        await service.stop()
        first_call.set()
        await service.start()
        # Taken over when its lease (3 s here) expires, not an hour later: wait_for's bound.
        await wait_for(lambda: replies_in(slack, "D1") != [], "the wakeup's answer", service)
        await asyncio.sleep(1.5)
        await service.stop()

    assert replies_in(slack, "D1") == ["Good morning!"]
    store = database.store()
    try:
        async with store.read() as s:
            row = (await s.exec(select(ScheduledJob).where(ScheduledJob.id == job.id))).one()
            open_items = (await s.exec(select(InboxItem).where(InboxItem.state == "running"))).all()
    finally:
        await store.dispose()
    # A one-time wakeup is done, not left active without a next run.
    assert (row.state, row.running_since, row.last_status) == ("done", None, "answered")
    assert open_items == []
    assert any("wakeup.taken_over" in line for line in service.logs)


async def test_sigterm_hands_back_what_is_running_and_the_next_start_answers_it(
    database: Database, tmp_path: Path
) -> None:
    model_stuck = threading.Event()
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        model.script(text_reply("too slow", hold=model_stuck), text_reply("Answered after all."))
        env = service_env(
            database, model, slack, port := free_port(), SWITCHBOARD__INBOX__DRAIN_SECONDS="1"
        )
        service = Service(env, tmp_path, port)
        await service.start()
        async with aiohttp.ClientSession() as http:
            await SlackSender(http, [service.url]).deliver(
                dm_event("D1", "U1", "hello", "1700000001.000001")
            )
        await wait_for(lambda: model.request_count == 1, "the LLM call", service)
        code = await service.stop()  # SIGTERM: drain 1 s, then hand back
        model_stuck.set()
        await service.start()
        await wait_for(lambda: replies_in(slack, "D1") != [], "the answer", service, 20)
        await asyncio.sleep(1.0)
        await service.stop()
    assert code == 0, service.log_text
    assert replies_in(slack, "D1") == ["Answered after all."]
    assert any("shutdown.handed_back messages=1" in line for line in service.logs)
