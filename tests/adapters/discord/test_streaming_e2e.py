"""Streamed replies on Discord end to end: a guild message through discord.py, the
real App and pipeline, the anthropic SDK streaming from the fake Messages API, and
the reply growing on the fake Discord by edits (post, then PATCH), ending as exactly
the non-streamed rendering. Tools that wait on a gate hold the run at a known point,
so nothing here depends on timing."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from adapters.discord import parse_message, render
from bot.pipeline.intake import Inbox
from bot.pipeline.live import INTERRUPTED_NOTE, reply_target
from bot.store.models import InboxItem
from bot.types import utcnow
from tests.adapters.discord.helpers import settle
from tests.fakes.anthropic import FakeAnthropic, text_reply, tool_call, tool_use_reply
from tests.fakes.discord import FakeDiscord, Posted
from tests.fakes.discord_payloads import BOT_ID, CHANNEL_ID
from tests.probes import ProbeTool
from tests.waiting import wait_until

pytestmark = pytest.mark.slow  # seconds a test (tests/tiers.py)

STREAMING = {"streaming": {"discord": {"enabled": True, "interval_seconds": 0.05}}}
FINAL = "It is **42**, as [the docs](https://example.com/a) say:\n\n- one\n- two"
LONG = "The quick brown fox jumps over the lazy dog. " * 60  # ~2700 characters
ESSAY = "All work and no play makes Jack a dull boy. " * 100  # ~4400: three parts


def gated(name: str) -> tuple[ProbeTool, asyncio.Event]:
    gate = asyncio.Event()

    async def wait(tool: ProbeTool, args: object) -> str:
        await gate.wait()
        return f"{name} found it"

    return ProbeTool(name, wait), gate


def bot_calls(fake: FakeDiscord) -> list[tuple[str, str]]:
    """(method, content) of the bot's message creates, edits and deletes, in order."""
    return [
        (c.method, (c.body or {}).get("content", ""))
        for c in fake.calls
        if c.path.startswith(f"/channels/{CHANNEL_ID}/messages") and c.method != "GET"
    ]


async def showing(fake: FakeDiscord, text: str, count: int = 1) -> list[Posted]:
    """Wait until the channel shows `count` messages, the last one containing `text`."""

    def ready() -> list[Posted] | None:
        shown = fake.visible(CHANNEL_ID)
        return shown if len(shown) == count and text in shown[-1].content else None

    return await fake.wait_until(ready)


async def ask(fake: FakeDiscord, text: str) -> dict[str, Any]:
    asked = fake.user_message(f"<@{BOT_ID}> {text}")
    await fake.dispatch("MESSAGE_CREATE", asked)
    return asked


async def test_a_reply_grows_by_edits_and_ends_as_the_non_streamed_rendering(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    lookup, gate = gated("lookup")
    _, adapter = await start_discord(sections=STREAMING, tools=[lookup])
    fake_anthropic.script(
        tool_use_reply(tool_call("lookup"), text="Let me look that up."),
        text_reply(FINAL, chunk_size=6, chunk_delay=0.02),
    )
    asked = await ask(fake_discord, "what is it?")

    [live] = await showing(fake_discord, "using lookup")  # while the tool runs
    assert live.content == "Let me look that up.\n\n*using lookup…*"
    assert live.reply_to == asked["id"]
    gate.set()
    await fake_discord.wait_until(lambda: live.content == render(FINAL)[0])
    await settle(fake_discord, adapter)

    assert fake_discord.visible(CHANNEL_ID) == [live]
    assert [live.content] == render(FINAL)  # what `send` renders without streaming
    calls = bot_calls(fake_discord)
    assert calls[0][0] == "POST"  # the first words, posted before the tool had answered
    assert calls[0][1].startswith("Let me look that up.")
    assert [m for m, _ in calls[1:]] == ["PATCH"] * (len(calls) - 1)  # edited, never re-posted
    assert live.edits[-1] == calls[-1][1] == render(FINAL)[0]


async def test_past_2000_characters_the_stream_continues_in_new_messages(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    lookup, gate = gated("lookup")
    _, adapter = await start_discord(sections=STREAMING, tools=[lookup])
    fake_anthropic.script(
        tool_use_reply(tool_call("lookup"), text=LONG.strip()),
        text_reply(ESSAY.strip(), chunk_size=400, chunk_delay=0.02),
    )
    await ask(fake_discord, "write a lot")

    first, second = await showing(fake_discord, "using lookup", count=2)
    assert first.content == render(LONG)[0] and first.reply_to is not None
    assert second.reply_to is None
    gate.set()
    expected = render(ESSAY.strip())
    await fake_discord.wait_until(
        lambda: [p.content for p in fake_discord.visible(CHANNEL_ID)] == expected or None
    )
    await settle(fake_discord, adapter)

    parts = fake_discord.visible(CHANNEL_ID)
    assert [p.content for p in parts] == expected and len(parts) == 3
    assert parts[0].id == first.id  # the first message became the reply's first part
    mine = [p for p in fake_discord.posted if p.channel_id == CHANNEL_ID]
    assert all(p in parts or p.deleted for p in mine)  # nothing left dangling
    methods = [m for m, _ in bot_calls(fake_discord)]
    assert methods.count("POST") == len(mine) and methods.count("DELETE") == len(mine) - 3


async def test_a_streamed_no_reply_touches_nothing(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    _, adapter = await start_discord(sections=STREAMING)
    fake_anthropic.script(text_reply("NO_REPLY", chunk_size=1, chunk_delay=0.02))
    await ask(fake_discord, "ok")
    await fake_anthropic.wait_for_requests(1)
    await settle(fake_discord, adapter)
    assert fake_discord.posted == [] and bot_calls(fake_discord) == []


async def test_words_then_silence_delete_what_was_shown(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    lookup, gate = gated("lookup")
    _, adapter = await start_discord(sections=STREAMING, tools=[lookup])
    fake_anthropic.script(
        tool_use_reply(tool_call("lookup"), text="Checking."), text_reply("NO_REPLY")
    )
    await ask(fake_discord, "hm")
    [live] = await showing(fake_discord, "using lookup")
    gate.set()
    await fake_discord.wait_until(lambda: live.deleted)
    await settle(fake_discord, adapter)
    assert fake_discord.visible(CHANNEL_ID) == []
    assert [m for m, _ in bot_calls(fake_discord)][-1] == "DELETE"


async def test_a_429_while_streaming_pauses_the_updates_and_the_final_lands(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic, caplog
):
    lookup, first_gate = gated("lookup")
    search, second_gate = gated("search")
    _, adapter = await start_discord(sections=STREAMING, tools=[lookup, search])
    fake_anthropic.script(
        tool_use_reply(tool_call("lookup"), text="Let me look."),
        tool_use_reply(tool_call("search"), text="Still looking."),
        text_reply(FINAL, chunk_size=6, chunk_delay=0.02),
    )
    await ask(fake_discord, "what is it?")
    [live] = await showing(fake_discord, "using lookup")

    fake_discord.rate_limit(CHANNEL_ID, retry_after=2.0, method="PATCH")
    first_gate.set()  # "Still looking." is due while the run waits on the second tool
    await fake_discord.wait_until(lambda: fake_discord.rate_limited)  # a live update's
    await wait_until(lambda: "too long, erroring instead" in caplog.text)  # not waited out
    second_gate.set()
    await fake_discord.wait_until(lambda: live.content == render(FINAL)[0])
    await settle(fake_discord, adapter)

    assert fake_discord.visible(CHANNEL_ID) == [live]
    assert [m for m, _ in bot_calls(fake_discord)].count("POST") == 1


async def test_stop_mid_stream_leaves_the_partial_reply_marked(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    lookup, gate = gated("lookup")
    _, adapter = await start_discord(sections=STREAMING, tools=[lookup])
    fake_anthropic.script(tool_use_reply(tool_call("lookup"), text="Half of the answer"))
    await ask(fake_discord, "think hard")
    [live] = await showing(fake_discord, "using lookup")

    await fake_discord.dispatch("INTERACTION_CREATE", fake_discord.slash_command("stop"))
    await fake_discord.wait_until(lambda: "stopped" in live.content)
    gate.set()
    await settle(fake_discord, adapter)
    assert live.content == "Half of the answer\n\n*(stopped)*"
    assert live in fake_discord.visible(CHANNEL_ID)
    assert "using lookup" not in live.content  # no activity line left dangling


async def test_after_a_crash_mid_stream_the_posted_messages_end_with_a_note(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    app, adapter = await start_discord(sections={**STREAMING, "inbox": {"sweep_seconds": 0.1}})
    asked = fake_discord.user_message(f"<@{BOT_ID}> tell me a story")
    msg = parse_message(asked, adapter.identity)
    assert msg is not None and msg.dedupe_key
    # Another process took the message, streamed two messages of its answer, and died.
    dead = Inbox(app.store, owner="dead-instance", lease_seconds=20)
    assert await dead.accept(msg)
    live = adapter.open_stream(reply_target(msg))
    assert live is not None
    await live.update(LONG)
    first, second = live.drafts()
    await dead.record_drafts("discord", msg.dedupe_key, live.drafts())
    async with app.store.write() as session:
        await session.exec(update(InboxItem).values(lease_expires_at=utcnow() - timedelta(1)))

    fake_anthropic.script(text_reply("The story, again.", chunk_size=4, chunk_delay=0.01))
    app.start_recovery(["discord"])
    answer = await fake_discord.wait_until(
        lambda: next(
            (p for p in fake_discord.visible(CHANNEL_ID) if p.content == "The story, again."),
            None,
        )
    )
    note = render(INTERRUPTED_NOTE)[0]
    await fake_discord.wait_until(lambda: fake_discord.visible(CHANNEL_ID)[0].content == note)
    await settle(fake_discord, adapter)

    shown = fake_discord.visible(CHANNEL_ID)
    assert [p.id for p in shown] == [first, answer.id]  # the dead run's first message...
    assert shown[0].content == note  # ...now says what happened; the rest is gone
    assert fake_discord.message(second) is not None and second in fake_discord.deleted_ids
    assert answer.reply_to == asked["id"]
