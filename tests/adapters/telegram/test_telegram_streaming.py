"""Streamed replies on Telegram (adapters/telegram/streaming.py and the drafts of
`send`), through both libraries against the fake Bot API: drafts in private chats,
a posted message then edits in groups and topics, overflow into a new message, 429s,
discard, and the final `send` editing what was streamed instead of posting again.
Time is a controllable clock shared by the adapter and the fake."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.telegram import TelegramAdapter
from adapters.telegram.factory import make_transport
from adapters.telegram.render import render
from bot.config import Settings
from bot.errors import DeliveryFailed, RateLimited
from bot.ports import LiveMessage, Streaming
from bot.types import Button, Reply, Target
from tests.fakes.telegram import TOKEN, FakeTelegram, bad_request, flood, server_error
from tests.fakes.telegram_html import parse_html
from tests.fakes.telegram_updates import GROUP_ID, FakeClock

USER_ID = 5120348871
STREAM_CALLS = ("sendMessage", "editMessageText", "sendMessageDraft", "deleteMessage")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def fake(clock: FakeClock) -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram(clock=clock.now) as server:
        yield server


@pytest.fixture
async def adapter(library: str, fake: FakeTelegram, clock: FakeClock) -> AsyncIterator[Any]:
    settings = Settings.model_validate({"telegram": {"enabled": True, "library": library}})
    transport = make_transport(library, TOKEN, fake.base_url)
    made = TelegramAdapter(settings.telegram, transport, clock=clock)
    yield made
    await transport.close()


@dataclass
class Progress:
    """A `SendProgress` kept in memory (the outbox's role)."""

    done: list[str] = field(default_factory=list)
    resumed: bool = False
    since: datetime = field(default_factory=lambda: datetime.now(UTC))
    fail_after: int | None = None

    def nonce(self, index: int) -> str:
        return f"n{index}"

    async def sent(self, index: int, platform_id: str, *, last: bool = False) -> None:
        assert index == len(self.done)
        self.done.append(platform_id)
        if self.fail_after is not None and len(self.done) >= self.fail_after:
            raise RuntimeError("the process died here")


def group(thread: str | None = None, reply_to: str | None = "55") -> Target:
    return Target("telegram", str(GROUP_ID), thread_id=thread, reply_to_message_id=reply_to)


def private(thread: str | None = None) -> Target:
    return Target("telegram", str(USER_ID), thread_id=thread)


def stream(adapter: TelegramAdapter, target: Target) -> LiveMessage:
    assert isinstance(adapter, Streaming)
    live = adapter.open_stream(target)
    assert live is not None
    return live


def streamed(fake: FakeTelegram) -> list[tuple[str, str | None]]:
    """(method, visible text) of every successful message call, in order."""
    return [(c.method, c.visible_text) for c in fake.calls if c.method in STREAM_CALLS and c.ok]


def visible(markdown: str) -> list[str]:
    """What the non-streamed path shows: each rendered part as Telegram displays it."""
    return [parse_html(chunk) for chunk in render(markdown)]


def paragraphs(n: int, size: int = 900) -> str:
    return "\n\n".join(f"Paragraph {k}: " + "word " * (size // 5) for k in range(n))


async def test_open_stream_does_no_io(adapter, fake):
    assert isinstance(adapter, Streaming)
    assert adapter.open_stream(group()) is not None
    assert adapter.open_stream(private()) is not None
    assert fake.calls == []


async def test_group_posts_once_then_edits_and_send_edits_the_draft(adapter, fake):
    live = stream(adapter, group(thread="77"))
    await live.update("Hello")
    await live.update("Hello")  # the same text: no call
    await live.update("Hello **world**, _searching memory…_")
    await live.update("Hello **world**, here it is.")
    await live.close()
    [draft] = live.drafts()
    final = "Hello **world**, here it is. Done."
    ids = await adapter.send(Reply(final, group(thread="77"), drafts=live.drafts()))

    assert ids == [draft]
    assert streamed(fake) == [
        ("sendMessage", "Hello"),
        ("editMessageText", "Hello world, searching memory…"),
        ("editMessageText", "Hello world, here it is."),
        ("editMessageText", "Hello world, here it is. Done."),
    ]
    first = fake.calls_to("sendMessage")[0]
    assert first.params["message_thread_id"] == 77
    assert first.params["reply_parameters"]["message_id"] == 55
    assert [c.params["parse_mode"] for c in fake.calls_to("editMessageText")] == ["HTML"] * 3
    assert fake.shown(GROUP_ID) == {int(draft): visible(final)[0]}
    assert fake.calls_to("sendMessageDraft") == []


async def test_private_chat_streams_drafts_then_sends_the_message(adapter, fake):
    live = stream(adapter, private(thread="9"))
    await live.update("Thinking about *it*")
    await live.update("Thinking about *it*")  # not sent again
    await live.update("Thinking about *it*: the answer")
    await live.close()
    assert live.drafts() == ()
    final = "Thinking about *it*: the answer is **42**."
    ids = await adapter.send(Reply(final, private(thread="9"), drafts=live.drafts()))

    assert streamed(fake) == [
        ("sendMessageDraft", "Thinking about it"),
        ("sendMessageDraft", "Thinking about it: the answer"),
        ("sendMessage", "Thinking about it: the answer is 42."),
    ]
    drafts = fake.calls_to("sendMessageDraft")
    draft_ids = {c.params["draft_id"] for c in drafts}
    assert len(draft_ids) == 1 and 0 not in draft_ids  # one non-zero id for the reply
    assert all(c.params["message_thread_id"] == 9 for c in drafts)
    assert all(c.params["parse_mode"] == "HTML" for c in drafts)
    assert drafts[0].params["text"] == "Thinking about <i>it</i>"
    assert fake.shown(USER_ID) == {int(ids[0]): visible(final)[0]}


async def test_an_unchanged_draft_is_sent_again_until_closed(adapter, fake, clock, caplog):
    adapter.draft_refresh_seconds = 0.02  # Telegram forgets a draft after ~30 s
    live = stream(adapter, private())
    await live.update("Let me look.\n\n_using lookup…_")  # a long tool run: no updates
    fake.fail_next("sendMessageDraft", flood(1))  # a refresh refused: the next one goes
    # the adapter has read the 429 and blocked the chat (the fake's answer is not enough: a
    # clock moved before the adapter blocks the chat leaves it blocked past the new time)
    await fake.wait_for(lambda: "telegram.stream_flood_wait" in caplog.text)
    clock.time += 1  # the flood wait passes
    await fake.wait_for(lambda: len([c for c in fake.calls_to("sendMessageDraft") if c.ok]) >= 3)
    await live.close()
    drafts = fake.calls_to("sendMessageDraft")
    assert {c.params["text"] for c in drafts} == {"Let me look.\n\n<i>using lookup…</i>"}
    assert len({c.params["draft_id"] for c in drafts}) == 1
    assert 429 in [c.status for c in drafts]
    await asyncio.sleep(0.1)
    assert len(fake.calls_to("sendMessageDraft")) == len(drafts)  # closed: no more
    await adapter.send(Reply("Found it.", private(), drafts=live.drafts()))
    assert [c.visible_text for c in fake.sent()] == ["Found it."]


async def test_overflow_past_4096_continues_in_a_new_message(adapter, fake):
    text = paragraphs(8)
    assert len(render(text)) == 2
    live = stream(adapter, group())
    await live.update(paragraphs(3))
    await live.update(paragraphs(6))
    await live.update(text)
    await live.close()
    drafts = live.drafts()
    assert len(drafts) == 2
    final = paragraphs(11)
    parts = visible(final)
    assert len(parts) == 3
    ids = await adapter.send(Reply(final, group(), drafts=drafts))

    assert ids[:2] == list(drafts)
    posts = fake.calls_to("sendMessage")
    assert len(posts) == 3  # the first part, the second once past 4096, the third at the end
    assert "reply_parameters" in posts[0].params
    assert "reply_parameters" not in posts[1].params
    assert "reply_parameters" not in posts[2].params
    assert all(len(c.visible_text or "") <= 4096 for c in fake.calls if c.visible_text)
    assert [fake.shown(GROUP_ID)[int(i)] for i in ids] == parts


async def test_private_overflow_posts_the_full_parts_and_drafts_the_rest(adapter, fake):
    live = stream(adapter, private())
    await live.update(paragraphs(3))
    await live.update(paragraphs(8))
    await live.close()
    [posted] = live.drafts()
    ids = await adapter.send(Reply(paragraphs(8), private(), drafts=live.drafts()))

    assert ids[0] == posted
    draft_ids = [c.params["draft_id"] for c in fake.calls_to("sendMessageDraft")]
    assert len(draft_ids) == 2 and draft_ids[1] == draft_ids[0] + 1  # a new draft per part
    assert [fake.shown(USER_ID)[int(i)] for i in ids] == visible(paragraphs(8))
    assert len(fake.shown(USER_ID)) == 2


async def test_send_deletes_drafts_left_over_and_puts_buttons_on_the_last_part(adapter, fake):
    live = stream(adapter, group())
    await live.update(paragraphs(8))
    await live.close()
    first, second = live.drafts()
    buttons = (Button("Confirm", "/confirm K7Q2MX"),)
    ids = await adapter.send(
        Reply("Short after all.", group(), buttons=buttons, drafts=(first, second))
    )

    assert ids == [first]
    [edit] = fake.calls_to("editMessageText")
    assert edit.params["message_id"] == int(first)
    assert (
        edit.params["reply_markup"]["inline_keyboard"][0][0]["callback_data"] == "/confirm K7Q2MX"
    )
    [delete] = fake.calls_to("deleteMessage")
    assert delete.params["message_id"] == int(second)
    assert fake.shown(GROUP_ID) == {int(first): "Short after all."}


async def test_final_edit_of_unchanged_text_is_success(adapter, fake):
    live = stream(adapter, group())
    await live.update("All **done**.")
    await live.close()
    ids = await adapter.send(Reply("All **done**.", group(), drafts=live.drafts()))

    assert ids == list(live.drafts())
    [edit] = fake.calls_to("editMessageText")
    assert edit.status == 400 and "not modified" in (edit.description or "")
    assert len(fake.calls_to("sendMessage")) == 1


async def test_buttons_alone_still_change_an_unchanged_draft(adapter, fake):
    live = stream(adapter, group())
    await live.update("Confirm?")
    buttons = (Button("Confirm", "/confirm K7Q2MX"),)
    await adapter.send(Reply("Confirm?", group(), buttons=buttons, drafts=live.drafts()))
    [edit] = fake.calls_to("editMessageText")
    assert edit.ok and edit.result["reply_markup"]["inline_keyboard"]


async def test_429_during_update_raises_rate_limited_and_the_final_lands(adapter, fake, clock):
    live = stream(adapter, group())
    await live.update("one")
    fake.fail_next("editMessageText", flood(7))
    with pytest.raises(RateLimited) as raised:
        await live.update("one two")
    assert raised.value.retry_after == 7
    calls = len(fake.calls)
    with pytest.raises(RateLimited) as again:  # still in the flood wait: no call at all
        await live.update("one two three")
    assert 0 < again.value.retry_after <= 7
    assert len(fake.calls) == calls
    await live.close()
    before = clock.now()
    await adapter.send(Reply("one two three four", group(), drafts=live.drafts()))

    assert clock.now() - before >= 6.9  # the final waited the flood out, then landed once
    assert fake.shown(GROUP_ID) == {int(live.drafts()[0]): "one two three four"}
    assert [c.status for c in fake.calls_to("editMessageText")] == [429, 200]


async def test_429_on_a_draft_raises_rate_limited(adapter, fake):
    live = stream(adapter, private())
    fake.fail_next("sendMessageDraft", flood(3))
    with pytest.raises(RateLimited):
        await live.update("hello")
    await adapter.send(Reply("hello there", private(), drafts=live.drafts()))
    assert [c.visible_text for c in fake.sent()] == ["hello there"]


async def test_discard_deletes_what_was_posted(adapter, fake):
    live = stream(adapter, group())
    await live.update(paragraphs(8))
    await live.close()
    assert len(fake.shown(GROUP_ID)) == 2
    await live.discard()
    assert fake.shown(GROUP_ID) == {}
    assert len(fake.calls_to("deleteMessage")) == 2
    assert live.drafts() == ()


async def test_discard_in_a_private_chat_posts_and_deletes_nothing(adapter, fake):
    live = stream(adapter, private())
    await live.update("maybe")
    await live.discard()
    assert [c.method for c in fake.calls] == ["sendMessageDraft"]


async def test_discard_does_not_raise_when_telegram_fails(adapter, fake):
    live = stream(adapter, group())
    await live.update("posted")
    fake.fail_next("deleteMessage", bad_request("message can't be deleted"))
    await live.discard()  # logged, not raised


async def test_a_draft_deleted_meanwhile_is_posted_again(adapter, fake):
    live = stream(adapter, group())
    await live.update("streamed")
    [draft] = live.drafts()
    await fake_delete(fake, draft)
    ids = await adapter.send(Reply("streamed and final", group(), drafts=live.drafts()))
    assert ids != [draft]
    assert fake.shown(GROUP_ID) == {int(ids[0]): "streamed and final"}


async def fake_delete(fake: FakeTelegram, message_id: str) -> None:
    """Someone deleted the bot's message (as an admin may)."""
    await fake._m_deletemessage({"chat_id": GROUP_ID, "message_id": int(message_id)}, None)  # type: ignore[arg-type]


async def test_send_resumed_after_a_crash_neither_repeats_nor_loses_a_part(adapter, fake):
    live = stream(adapter, group())
    await live.update(paragraphs(8))
    drafts = live.drafts()
    final = paragraphs(11)
    progress = Progress(fail_after=2)
    with pytest.raises(RuntimeError):  # died after recording two of three parts
        await adapter.send(Reply(final, group(), drafts=drafts), progress)
    resumed = Progress(done=list(progress.done), resumed=True)
    ids = await adapter.send(Reply(final, group(), drafts=drafts), resumed)

    assert ids[:2] == list(drafts)
    assert len(ids) == 3 and len(set(ids)) == 3
    assert [fake.shown(GROUP_ID)[int(i)] for i in ids] == visible(final)
    assert len(fake.shown(GROUP_ID)) == 3


async def test_an_edit_not_recorded_before_a_crash_is_simply_made_again(adapter, fake):
    live = stream(adapter, group())
    await live.update(paragraphs(8))
    drafts = live.drafts()
    final = paragraphs(8).replace("Paragraph", "Section")
    first = await adapter.send(Reply(final, group(), drafts=drafts), Progress())
    again = await adapter.send(Reply(final, group(), drafts=drafts), Progress(resumed=True))
    assert first == again == list(drafts)
    assert [fake.shown(GROUP_ID)[int(i)] for i in drafts] == visible(final)
    assert len(fake.sent()) == 2  # only the streamed posts: edits are idempotent


async def test_drafts_refused_by_the_server_fall_back_to_posting(adapter, fake):
    fake.drafts_supported = False
    live = stream(adapter, private())
    await live.update("first")
    await live.update("first second")
    [posted] = live.drafts()
    await adapter.send(Reply("first second third", private(), drafts=live.drafts()))
    assert [m for m, _ in streamed(fake)] == ["sendMessage", "editMessageText", "editMessageText"]
    assert fake.shown(USER_ID) == {int(posted): "first second third"}


async def test_html_rejected_during_a_stream_is_shown_as_plain_text(adapter, fake):
    live = stream(adapter, group())
    fake.fail_next("sendMessage", bad_request("can't parse entities: Unsupported start tag"))
    await live.update("**bold** & more")
    first, second = fake.calls_to("sendMessage")
    assert first.status == 400 and second.ok and "parse_mode" not in second.params
    assert second.params["text"] == "bold & more"


async def test_blank_text_shows_nothing(adapter, fake):
    for target in (group(), private()):
        live = stream(adapter, target)
        await live.update("")
        await live.update("  \n ")
        assert live.drafts() == ()
    assert fake.calls == []


async def test_another_failure_ends_the_live_view_but_not_the_reply(adapter, fake):
    live = stream(adapter, group())
    await live.update("part")
    fake.fail_next("editMessageText", server_error())
    with pytest.raises(Exception) as raised:
        await live.update("part two")
    assert not isinstance(raised.value, RateLimited)
    ids = await adapter.send(Reply("part two, final", group(), drafts=live.drafts()))
    assert fake.shown(GROUP_ID) == {int(ids[0]): "part two, final"}


async def test_a_final_that_cannot_be_delivered_raises_delivery_failed(adapter, fake):
    live = stream(adapter, group())
    await live.update("part")
    fake.fail_next("editMessageText", bad_request("chat not found"))
    with pytest.raises(DeliveryFailed, match=r"(?i)chat not found"):
        await adapter.send(Reply("final", group(), drafts=live.drafts()))
