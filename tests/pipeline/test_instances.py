"""Two real `switchboard run` processes on one PostgreSQL behave like one.

Slack's deliveries are spread over both instances the way a load balancer
does; one instance is SIGKILLed mid-run and restarted. Per conversation: no
accepted message lost, no reply doubled, replies in order, and never two LLM
calls of one conversation at once (the fake model counts them)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlmodel import select

from bot.store.models import InboxItem
from tests.conftest import POSTGRES_URL, TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic, last_user_text, text_reply
from tests.fakes.slack import FakeSlack
from tests.pipeline.test_crash_recovery import dm_event, replies_in, wait_for
from tests.service_rig import Service, SlackSender, free_port, service_env

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.postgres,
    pytest.mark.skipif(not POSTGRES_URL, reason="SWITCHBOARD_TEST_POSTGRES_URL not set"),
    pytest.mark.timeout(300),
]

CONVERSATION = re.compile(r"^(c\d+|burst)-")


def conversation_of(body: dict[str, Any]) -> str:
    found = CONVERSATION.match(last_user_text(body).splitlines()[-1])
    return found.group(1) if found else "other"


async def two_instances(
    db: Database, model: FakeAnthropic, slack: FakeSlack, tmp_path: Path
) -> list[Service]:
    services = []
    for name in ("a", "b"):
        env = service_env(db, model, slack, port := free_port())
        (tmp_path / name).mkdir()
        services.append(Service(env, tmp_path / name, port))
    await asyncio.gather(*(s.start() for s in services))
    return services


async def inbox_states(db: Database) -> dict[str, str]:
    store = db.store()
    try:
        async with store.read() as s:
            rows = (await s.exec(select(InboxItem))).all()
    finally:
        await store.dispose()
    return {row.event_id: row.state for row in rows}


async def test_two_instances_one_killed_lose_nothing_and_double_nothing(
    pg: Database, tmp_path: Path
) -> None:
    conversations, per_conversation = 8, 3
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        model.responder = lambda body: text_reply(f"re: {last_user_text(body)}", delay=0.5)
        model.flight_key = conversation_of
        a, b = await two_instances(pg, model, slack, tmp_path)
        async with aiohttp.ClientSession() as http:
            sender = SlackSender(http, [a.url, b.url])

            async def talk(k: int) -> None:
                for m in range(1, per_conversation + 1):
                    text = f"c{k}-m{m}"
                    await sender.deliver(dm_event(f"D{k}", f"U{k}", text, f"17{k:08d}.{m:06d}"))
                    reply = f"re: {text}"
                    await wait_for(lambda r=reply: r in replies_in(slack, f"D{k}"), text, a, 120)

            talking = [asyncio.create_task(talk(k)) for k in range(conversations)]
            await wait_for(
                lambda: (
                    len(slack.messages) >= conversations // 2
                    and model.request_count >= len(slack.messages) + 2
                ),
                "replies out and runs in flight",
                a,
            )
            a.kill()  # B keeps serving; A's half-done work must not be lost
            await a.stop()
            await a.start()
            await asyncio.gather(*talking)
            await asyncio.sleep(1.5)
            await asyncio.gather(a.stop(), b.stop())
    for k in range(conversations):
        expected = [f"re: c{k}-m{m}" for m in range(1, per_conversation + 1)]
        assert replies_in(slack, f"D{k}") == expected, a.log_text + "\n-----\n" + b.log_text
    assert max(model.max_in_flight.values()) == 1  # one run per conversation at a time
    states = await inbox_states(pg)
    assert len(states) == conversations * per_conversation
    assert set(states.values()) == {"answered"}


async def test_a_burst_of_one_conversation_over_both_instances_runs_one_at_a_time(
    pg: Database, tmp_path: Path
) -> None:
    messages = 8
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        # Merged messages reach the model as one turn, in order: it answers the last.
        model.responder = lambda body: text_reply(
            f"re: {last_user_text(body).splitlines()[-1]}", delay=0.4
        )
        model.flight_key = conversation_of
        a, b = await two_instances(pg, model, slack, tmp_path)
        async with aiohttp.ClientSession() as http:
            sender = SlackSender(http, [a.url, b.url])
            for i in range(1, messages + 1):  # quick succession, alternating instances
                await sender.deliver(dm_event("D1", "U1", f"burst-{i}", f"1700000001.{i:06d}"))
            last = f"re: burst-{messages}"
            try:
                await wait_for(lambda: last in replies_in(slack, "D1"), "the last answer", a, 60)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n--- b ---\n{b.log_text}") from None
            await asyncio.sleep(1.5)
            await asyncio.gather(a.stop(), b.stop())
    assert model.max_in_flight["burst"] == 1, a.log_text + "\n-----\n" + b.log_text
    states = await inbox_states(pg)
    assert list(states.values()) == ["answered"] * messages  # none lost
    answered = [int(r.removeprefix("re: burst-")) for r in replies_in(slack, "D1")]
    assert answered == sorted(set(answered))  # in order, none twice (bursts may merge)
    assert answered[-1] == messages
    seen = [  # what the model was given, run after run: every message once, in order
        int(line.removeprefix("burst-"))
        for request in model.requests
        for message in request.messages
        if message["role"] == "user"
        for block in (message["content"] if isinstance(message["content"], list) else [])
        if block.get("type") == "text"
        for line in block["text"].splitlines()
        if line.startswith("burst-")
    ]
    assert sorted(set(seen)) == list(range(1, messages + 1))
    # Both instances took deliveries, and both ran some of the conversation.
    assert any("run.deferred" in line for line in a.logs + b.logs) or len(answered) > 1
