"""Discord does not redeliver: messages sent while the bot was away are read from
the channel's history after a new session, answered once, and never again."""

from __future__ import annotations

import asyncio

import pytest

from adapters.discord import create_adapter
from tests.adapters.discord.helpers import SECRETS, settle
from tests.fakes.anthropic import FakeAnthropic, last_user_text, text_reply
from tests.fakes.chaos import Fault
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import BOT_ID, CHANNEL_ID, OTHER_CHANNEL_ID

pytestmark = pytest.mark.slow  # seconds a test (tests/tiers.py)


def starter(make_app, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic):  # type: ignore[no-untyped-def]
    # "[Alice] two" → "re: two" (the last line: merged messages come in order)
    fake_anthropic.responder = lambda body: text_reply(
        "re: " + last_user_text(body).splitlines()[-1].split("] ", 1)[-1]
    )
    settings = {
        "server": {"port": 0},
        "discord": {"enabled": True, "api_base_url": fake_discord.api_base_url},
        "streaming": {"enabled": False},  # the order of final replies is what counts here
    }

    async def start():  # type: ignore[no-untyped-def]
        app = await make_app(**settings)
        adapter = create_adapter(app.settings, SECRETS)
        await app.start([adapter])
        await fake_discord.sync()
        return app, adapter

    return start


async def test_messages_missed_while_away_are_caught_up_once(
    make_app, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    start = starter(make_app, fake_discord, fake_anthropic)

    app, adapter = await start()
    await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message(f"<@{BOT_ID}> one"))
    await fake_discord.wait_for_message(CHANNEL_ID, 1)
    await settle(fake_discord, adapter)
    await app.close()

    # While the bot is away: two questions for it and some chatter, never delivered.
    fake_discord.user_message(f"<@{BOT_ID}> two")
    fake_discord.user_message("just chatting")
    fake_discord.user_message(f"<@{BOT_ID}> three")

    app, adapter = await start()  # a new session: READY, then the catch-up
    await fake_discord.wait_until(
        lambda: any("three" in p.content for p in fake_discord.visible(CHANNEL_ID))
    )
    await settle(fake_discord, adapter)
    await app.close()
    calls = fake_anthropic.request_count
    app, adapter = await start()  # and again: nothing answered twice
    await settle(fake_discord, adapter)

    texts = [p.content for p in fake_discord.visible(CHANNEL_ID)]
    asked = [
        block["text"]
        for request in fake_anthropic.requests
        for block in request.messages[-1]["content"]
        if block.get("type") == "text"
    ]
    assert texts[0] == "re: one" and texts[-1] == "re: three"
    assert len(texts) in (2, 3)  # "two" and "three" answered together or one by one
    assert sum("two" in a for a in asked) >= 1 and "just chatting" not in " ".join(asked)
    assert fake_anthropic.request_count == calls  # the third start caught up nothing new
    assert fake_discord.requests("GET", rf"/channels/{CHANNEL_ID}/messages")


async def test_a_channel_with_nothing_stored_is_caught_up_too(
    make_app, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    """The first message of a channel, sent while the bot was away: nothing of
    that channel was stored, so only the guild's channel list leads to it."""
    start = starter(make_app, fake_discord, fake_anthropic)
    app, adapter = await start()
    await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message(f"<@{BOT_ID}> one"))
    await fake_discord.wait_for_message(CHANNEL_ID, 1)
    await settle(fake_discord, adapter)
    await app.close()

    fake_discord.user_message(f"<@{BOT_ID}> over here", channel_id=OTHER_CHANNEL_ID)

    app, adapter = await start()
    await fake_discord.wait_for_message(OTHER_CHANNEL_ID, 1)
    await settle(fake_discord, adapter)
    assert [p.content for p in fake_discord.visible(OTHER_CHANNEL_ID)] == ["re: over here"]
    assert [p.content for p in fake_discord.visible(CHANNEL_ID)] == ["re: one"]


async def test_a_live_message_waits_for_the_catch_up_of_what_came_before_it(
    make_app, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    """Sent while the bot was away, then one delivered live as the new session
    reads the channel's history: answered in the order they were sent."""
    start = starter(make_app, fake_discord, fake_anthropic)
    app, adapter = await start()
    await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message(f"<@{BOT_ID}> one"))
    await fake_discord.wait_for_message(CHANNEL_ID, 1)
    await settle(fake_discord, adapter)
    await app.close()

    fake_discord.user_message(f"<@{BOT_ID}> two")  # while away
    reading = asyncio.Event()

    def slow_history(name: str) -> Fault | None:
        if name == "GET /channels/{channel}/messages" and not reading.is_set():
            reading.set()
            return Fault.hang(3.0)  # answered after: the catch-up stays under way meanwhile
        return None

    fake_discord.chaos = slow_history
    app, adapter = await start()
    await reading.wait()
    await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message(f"<@{BOT_ID}> three"))
    await fake_discord.wait_until(
        lambda: any("three" in p.content for p in fake_discord.visible(CHANNEL_ID))
    )
    await settle(fake_discord, adapter)
    texts = [p.content for p in fake_discord.visible(CHANNEL_ID)]
    asked = [
        " ".join(b["text"] for b in r.messages[-1]["content"] if b.get("type") == "text")
        for r in fake_anthropic.requests
    ]
    # "two" answered before "three", or with it (one run, answered by its last line)
    assert texts[0] == "re: one" and texts[-1] == "re: three", texts
    assert "re: two" not in texts or texts.index("re: two") < texts.index("re: three"), texts
    assert any("two" in a for a in asked), asked
