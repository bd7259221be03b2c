"""Live replies on Discord, adapter level: `open_stream` / `LiveMessage.update` post
then edit through the real discord.py against the fake Discord, and `send` edits the
drafts into the final reply. (Through the pipeline: test_streaming_e2e.py.)"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from adapters.discord import DiscordAdapter, create_adapter, render
from adapters.discord.streaming import UPDATE_MAX_WAIT_S
from bot.errors import DeliveryFailed, RateLimited
from bot.ports import LiveMessage, Streaming
from bot.types import Button, Reply, Target
from tests.adapters.discord.helpers import SECRETS
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import ALICE, CHANNEL_ID, GUILD_ID

ZWSP = "\u200b"
LONG = "The quick brown fox jumps over the lazy dog. " * 60  # ~2700 characters


class Crash(Exception):
    pass


@dataclass
class Progress:
    """The outbox's `SendProgress`, in memory."""

    parts: list[str] = field(default_factory=list)
    resumed: bool = False
    since: datetime = field(default_factory=lambda: datetime.now(UTC))
    reported: list[tuple[int, str]] = field(default_factory=list)
    crash_at: int | None = None
    """`sent(crash_at, …)` raises `Crash` before recording: the process died there."""

    @property
    def done(self) -> tuple[str, ...]:
        return tuple(self.parts)

    def nonce(self, index: int) -> str:
        return f"sb7.{index}"

    async def sent(self, index: int, platform_id: str, *, last: bool = False) -> None:
        if index == self.crash_at:
            raise Crash(f"killed after part {index}")
        self.reported.append((index, platform_id))
        self.parts.append(platform_id)


@pytest.fixture
async def live_setup(start_discord, fake_discord: FakeDiscord):  # type: ignore[no-untyped-def]
    """A running adapter and a reply target in the guild channel, answering Alice."""
    _, adapter = await start_discord()
    asked = fake_discord.user_message("tell me a story")
    target = Target("discord", CHANNEL_ID, reply_to_message_id=asked["id"], server_id=GUILD_ID)
    fake_discord.calls.clear()
    return adapter, target, asked


def open_live(adapter: DiscordAdapter, target: Target) -> LiveMessage:
    assert isinstance(adapter, Streaming)
    live = adapter.open_stream(target)
    assert live is not None
    return live


def message_calls(fake: FakeDiscord) -> list[tuple[str, str]]:
    """(method, content or "") of every message create/edit/delete, in order."""
    return [
        (c.method, (c.body or {}).get("content", ""))
        for c in fake.calls
        if c.path.startswith(f"/channels/{CHANNEL_ID}/messages")
        and c.method != "GET"  # the catch-up reading the channel's history
    ]


async def test_the_first_update_posts_a_reply_and_later_ones_edit_it(
    live_setup, fake_discord: FakeDiscord
):
    adapter, target, asked = live_setup
    live = open_live(adapter, target)
    assert fake_discord.calls == []  # opening does no I/O

    await live.update("Once upon")
    await live.update("Once upon a time, **there**")
    await live.update("Once upon a time, **there**")  # unchanged: nothing to do
    await live.update("   ")  # nothing to show: what is shown stays

    [shown] = fake_discord.visible(CHANNEL_ID)
    assert live.drafts() == (shown.id,)
    assert shown.reply_to == asked["id"] and shown.pings == {f"user:{ALICE['id']}"}
    assert shown.content == "Once upon a time, **there**" and shown.edits == [shown.content]
    assert message_calls(fake_discord) == [
        ("POST", "Once upon"),
        ("PATCH", "Once upon a time, **there**"),
    ]


async def test_past_2000_characters_an_update_continues_in_a_new_message(
    live_setup, fake_discord: FakeDiscord
):
    adapter, target, _ = live_setup
    live = open_live(adapter, target)
    await live.update(LONG[:1500])
    await live.update(LONG)

    parts = fake_discord.visible(CHANNEL_ID)
    assert [p.content for p in parts] == render(LONG) and len(parts) == 2
    assert live.drafts() == tuple(p.id for p in parts)
    assert parts[1].reply_to is None and parts[1].pings == set()
    assert [m for m, _ in message_calls(fake_discord)] == ["POST", "PATCH", "POST"]

    await live.update(LONG[:1000] + "\n\n_searching memory…_")  # shorter again
    [left] = fake_discord.visible(CHANNEL_ID)
    assert left.id == parts[0].id and left.content.endswith("*searching memory…*")
    assert live.drafts() == (left.id,)


async def test_send_edits_the_drafts_into_the_final_reply(live_setup, fake_discord: FakeDiscord):
    adapter, target, _ = live_setup
    live = open_live(adapter, target)
    await live.update("Once upon a ti")
    await live.close()
    fake_discord.calls.clear()

    final = "Once upon a time there was a **fox**. Want more?"
    buttons = (Button("More", "/more"),)
    progress = Progress()
    sent = await adapter.send(Reply(final, target, buttons=buttons, drafts=live.drafts()), progress)

    [shown] = fake_discord.visible(CHANNEL_ID)
    assert sent == [shown.id] == list(live.drafts())
    assert progress.reported == [(0, shown.id)]
    assert [shown.content] == render(final)  # exactly the non-streamed rendering
    assert shown.components and shown.components[0]["components"][0]["custom_id"] == "/more"
    assert [m for m, _ in message_calls(fake_discord)] == ["PATCH"]  # edited, not re-posted

    again = Progress(parts=list(progress.parts), resumed=True)  # taken over: nothing to do
    await adapter.send(Reply(final, target, buttons=buttons, drafts=live.drafts()), again)
    assert [m for m, _ in message_calls(fake_discord)] == ["PATCH"]


async def test_send_posts_parts_beyond_the_drafts_and_deletes_drafts_left_over(
    live_setup, fake_discord: FakeDiscord
):
    adapter, target, _ = live_setup
    live = open_live(adapter, target)
    await live.update("A short start")
    fake_discord.calls.clear()
    await adapter.send(Reply(LONG, target, drafts=live.drafts()), Progress())
    parts = fake_discord.visible(CHANNEL_ID)
    assert [p.content for p in parts] == render(LONG)
    assert parts[0].id == live.drafts()[0]
    assert [m for m, _ in message_calls(fake_discord)] == ["PATCH", "POST"]

    other = open_live(adapter, target)
    await other.update(LONG)
    assert len(other.drafts()) == 2
    fake_discord.calls.clear()
    await adapter.send(Reply("In the end, short.", target, drafts=other.drafts()), Progress())
    assert [m for m, _ in message_calls(fake_discord)] == ["PATCH", "DELETE"]
    shown = [p for p in fake_discord.visible(CHANNEL_ID) if p.id in other.drafts()]
    assert [p.content for p in shown] == ["In the end, short."]


async def test_a_429_on_an_update_raises_at_once_and_the_final_still_lands(
    live_setup, fake_discord: FakeDiscord
):
    adapter, target, _ = live_setup
    live = open_live(adapter, target)
    await live.update("First words")
    fake_discord.rate_limit(CHANNEL_ID, retry_after=25.0, method="PATCH")
    with pytest.raises(RateLimited) as raised:
        await live.update("First words and more")
    assert raised.value.retry_after == 25.0  # Discord's own figure, not waited out
    assert UPDATE_MAX_WAIT_S < 25.0 < adapter.settings.max_ratelimit_wait
    [shown] = fake_discord.visible(CHANNEL_ID)
    assert shown.content == "First words"

    fake_discord.rate_limit(CHANNEL_ID, retry_after=0.05, method="PATCH")  # the final waits
    await adapter.send(Reply("First words and the end.", target, drafts=live.drafts()))
    assert shown.content == "First words and the end."
    assert len(fake_discord.rate_limited) == 2 and fake_discord.visible(CHANNEL_ID) == [shown]


async def test_a_429_on_the_first_post_or_from_cloudflare_raises_rate_limited(
    live_setup, fake_discord: FakeDiscord
):
    adapter, target, _ = live_setup
    live = open_live(adapter, target)
    fake_discord.rate_limit(CHANNEL_ID, retry_after=12.0)
    with pytest.raises(RateLimited) as raised:
        await live.update("Hello")
    assert raised.value.retry_after == 12.0 and live.drafts() == ()

    await live.update("Hello")
    fake_discord.rate_limit(CHANNEL_ID, retry_after=7.0, method="PATCH", cloudflare=True)
    with pytest.raises(RateLimited) as raised:
        await live.update("Hello there")
    assert raised.value.retry_after == 7.0
    [shown] = fake_discord.visible(CHANNEL_ID)
    assert shown.content == "Hello"


async def test_a_short_429_is_waited_out_inside_the_update(live_setup, fake_discord: FakeDiscord):
    adapter, target, _ = live_setup
    live = open_live(adapter, target)
    await live.update("Hello")
    fake_discord.rate_limit(CHANNEL_ID, retry_after=0.05, method="PATCH")
    await live.update("Hello there")
    [shown] = fake_discord.visible(CHANNEL_ID)
    assert shown.content == "Hello there" and fake_discord.rate_limited
    assert [m for m, _ in message_calls(fake_discord)] == ["POST", "PATCH", "PATCH"]


async def test_discard_deletes_what_was_posted(live_setup, fake_discord: FakeDiscord):
    adapter, target, _ = live_setup
    live = open_live(adapter, target)
    await live.update(LONG)
    first, second = live.drafts()
    fake_discord.delete(first)  # a moderator deleted it meanwhile

    await live.discard()  # must not raise
    assert fake_discord.visible(CHANNEL_ID) == [] and live.drafts() == ()
    deletes = [c.path for c in fake_discord.calls if c.method == "DELETE"]
    assert deletes == [f"/channels/{CHANNEL_ID}/messages/{m}" for m in (first, second)]


async def test_a_draft_deleted_meanwhile_is_posted_anew(live_setup, fake_discord: FakeDiscord):
    adapter, target, asked = live_setup
    live = open_live(adapter, target)
    await live.update("Draft")
    [draft] = fake_discord.visible(CHANNEL_ID)
    fake_discord.delete(draft.id)  # by a moderator

    progress = Progress()
    await adapter.send(Reply("The final answer.", target, drafts=live.drafts()), progress)
    [final] = fake_discord.visible(CHANNEL_ID)
    assert final.id != draft.id and final.content == "The final answer."
    assert final.reply_to == asked["id"] and progress.reported == [(0, final.id)]


async def test_a_send_refused_or_cut_between_parts_resumes_without_doubling_anything(
    live_setup, fake_discord: FakeDiscord
):
    adapter, target, _ = live_setup
    live = open_live(adapter, target)
    await live.update(LONG)
    drafts = live.drafts()
    final = LONG + " The end."
    fake_discord.rate_limit(CHANNEL_ID, retry_after=3600.0, method="PATCH")  # refused

    progress = Progress()
    with pytest.raises(DeliveryFailed):
        await adapter.send(Reply(final, target, drafts=drafts), progress)
    assert progress.parts == []  # nothing was taken

    crashing = Progress(crash_at=1)  # the process dies after part 2's edit, unrecorded
    with pytest.raises(Crash):
        await adapter.send(Reply(final, target, drafts=drafts), crashing)
    assert crashing.parts == [drafts[0]]

    resumed = Progress(parts=list(crashing.parts), resumed=True)  # taken over
    await adapter.send(Reply(final, target, drafts=drafts), resumed)
    parts = fake_discord.visible(CHANNEL_ID)
    assert [p.content for p in parts] == render(final)
    assert [p.id for p in parts] == list(drafts) == resumed.parts
    edits = [c for c in message_calls(fake_discord)[2:] if c[0] == "PATCH"]
    assert [m for m, _ in message_calls(fake_discord)[2:]] == ["PATCH"] * len(edits)  # no POST
    assert [content for _, content in edits[-3:]] == [render(final)[0], *render(final)[1:] * 2]


async def test_model_pings_in_a_live_update_never_ping(live_setup, fake_discord: FakeDiscord):
    adapter, target, _ = live_setup
    live = open_live(adapter, target)
    await live.update("Hey @everyone, ask <@&1200000000000000008>")
    [shown] = fake_discord.visible(CHANNEL_ID)
    assert f"@{ZWSP}everyone" in shown.content and f"<@{ZWSP}&" in shown.content
    assert shown.pings == {f"user:{ALICE['id']}"}  # the author, by the reply only
    assert shown.allowed_mentions == {"parse": [], "replied_user": True}


async def test_a_direct_message_stream_is_not_a_reply(start_discord, fake_discord: FakeDiscord):
    _, adapter = await start_discord()
    target = Target("discord", "1400000000000000001")
    live = open_live(adapter, target)
    await live.update("Private words")
    [shown] = fake_discord.visible("1400000000000000001")
    assert shown.reply_to is None and shown.pings == set()


def test_a_stopped_adapter_opens_no_stream():
    from bot.config import Settings

    adapter = create_adapter(Settings.model_validate({"discord": {"enabled": True}}), SECRETS)
    assert adapter.open_stream(Target("discord", CHANNEL_ID)) is None


async def test_a_refused_update_ends_the_live_view_but_not_the_reply(
    live_setup, fake_discord: FakeDiscord
):
    adapter, target, _ = live_setup
    live = open_live(adapter, target)
    fake_discord.fail(CHANNEL_ID)  # 403 Missing Permissions on every post
    with pytest.raises(DeliveryFailed, match="Forbidden"):
        await live.update("Hello")  # not a RateLimited: the core stops updating
    assert live.drafts() == ()
    await live.discard()  # nothing posted: nothing to delete, no error
    assert not [c for c in fake_discord.calls if c.method == "DELETE"]
