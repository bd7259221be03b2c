"""Streamed Slack replies, through slack_sdk against the fake Slack: native
streams (chat.startStream / appendStream / stopStream) in threads and DMs,
chat.postMessage + chat.update elsewhere, and the final `send` editing the
drafts into the reply's parts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp
import pytest

from adapters.slack import SlackAdapter, render
from adapters.slack.streaming import SlackLiveMessage
from bot.errors import DeliveryFailed, RateLimited
from bot.ports import Streaming
from bot.types import Button, Reply, Target, utcnow
from bot.web.server import WebServer
from tests.adapters.slack.support import channel_message, dm, mention
from tests.adapters.slack.test_slack_adapter import Clock, GateCore, settings
from tests.fakes.slack import (
    APP_TOKEN,
    BOT_TOKEN,
    SIGNING_SECRET,
    TEAM_ID,
    FakeSlack,
    signed_headers,
)

pytest_plugins = ("tests.adapters.slack.fixtures",)

LONG = "\n\n".join(f"Paragraph {i}: " + "word " * 300 for i in range(4))  # two messages


@dataclass
class Progress:
    """A `SendProgress` kept in memory."""

    parts: list[str] = field(default_factory=list)
    resumed: bool = False
    since: datetime = field(default_factory=utcnow)

    @property
    def done(self) -> Sequence[str]:
        return tuple(self.parts)

    def nonce(self, index: int) -> str:
        return f"n{index}"

    async def sent(self, index: int, platform_id: str, *, last: bool = False) -> None:
        assert index == len(self.parts)
        self.parts.append(platform_id)


@dataclass
class Setup:
    adapter: SlackAdapter
    slack: FakeSlack
    clock: Clock
    url: str

    async def hear(self, body: dict[str, Any]) -> None:
        """Deliver an event as Slack does (the adapter learns who asked)."""
        raw = json.dumps(body)
        headers = {"Content-Type": "application/json", **signed_headers(raw)}
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{self.url}/slack/events", data=raw, headers=headers) as response,
        ):
            assert response.status == 200

    def calls(self) -> list[str]:
        """The Web API methods called so far, in order, without auth.test."""
        return [c.method for c in self.slack.calls if c.method != "auth.test"]


@pytest.fixture
async def setup(slack: FakeSlack) -> AsyncIterator[Setup]:
    clock = Clock()
    core = GateCore()
    core.gate.set()
    adapter = SlackAdapter(
        settings(slack),
        bot_token=BOT_TOKEN,
        app_token=APP_TOKEN,
        signing_secret=SIGNING_SECRET,
        sleep=clock.sleep,
    )
    web = WebServer("127.0.0.1", 0)
    web.add_routes(adapter.routes())
    await web.start()
    await adapter.start(core)
    try:
        yield Setup(adapter, slack, clock, web.url)
    finally:
        await adapter.stop()
        await web.stop()


DM_THREAD = Target("slack", "D0ALICE", thread_id="1700000001.000100", server_id=TEAM_ID)
DM_TOP = Target("slack", "D0ALICE", server_id=TEAM_ID)
CHANNEL_THREAD = Target("slack", "C0GENERAL", thread_id="1700000002.000200", server_id=TEAM_ID)


async def in_dm_thread(setup: Setup) -> SlackLiveMessage:
    await setup.hear(dm("a question", thread_ts=DM_THREAD.thread_id))
    live = setup.adapter.open_stream(DM_THREAD)
    assert isinstance(live, SlackLiveMessage) and live.native
    return live


def final(text: str, target: Target, drafts: Sequence[str], **extra: Any) -> Reply:
    return Reply(text, target, drafts=tuple(drafts), **extra)


async def test_the_adapter_streams_and_opening_does_no_io(setup):
    assert isinstance(setup.adapter, Streaming)
    before = len(setup.slack.calls)
    assert setup.adapter.open_stream(DM_TOP) is not None
    assert len(setup.slack.calls) == before


async def test_a_dm_thread_streams_natively_in_deltas_then_is_edited_into_the_reply(setup):
    slack = setup.slack
    live = await in_dm_thread(setup)
    await live.update("Hello")
    await live.update("Hello **wor")
    await live.update("Hello **world**, here")
    await live.update("Hello **world**, here")  # nothing new: no call
    assert setup.calls() == ["chat.startStream", "chat.appendStream", "chat.appendStream"]
    start = slack.calls_to("chat.startStream")[0].args
    assert start["thread_ts"] == DM_THREAD.thread_id
    assert (start["recipient_user_id"], start["recipient_team_id"]) == ("U0ALICE", TEAM_ID)
    (streamed,) = slack.messages
    assert streamed["deltas"] == ["Hello", " **wor", "ld**, here"]
    assert streamed["text"] == "Hello **world**, here"
    assert live.drafts() == (streamed["ts"],)

    await live.close()
    text = "Hello **world**, here is the whole answer."
    ids = await setup.adapter.send(final(text, DM_THREAD, live.drafts()))

    assert ids == [streamed["ts"]]
    assert setup.calls()[-2:] == ["chat.stopStream", "chat.update"]
    assert slack.calls_to("chat.postMessage") == []  # edited, not posted again
    (message,) = slack.messages
    assert message["text"] == render(text)[0] == "Hello *world*, here is the whole answer."
    assert message["blocks"] is None  # the streamed rendering is gone
    assert message["streaming"] is False


async def test_a_channel_thread_streams_to_the_asker(setup):
    await setup.hear(channel_message(mention("hi"), ts=CHANNEL_THREAD.thread_id))
    live = setup.adapter.open_stream(CHANNEL_THREAD)
    await live.update("Hi Alice")
    (call,) = setup.slack.calls_to("chat.startStream")
    assert call.args["recipient_user_id"] == "U0ALICE"
    assert call.args["thread_ts"] == CHANNEL_THREAD.thread_id


async def test_a_top_level_dm_posts_then_edits(setup):
    slack = setup.slack
    await setup.hear(dm("a question"))
    live = setup.adapter.open_stream(DM_TOP)
    await live.update("   ")  # nothing to show yet: no message
    await live.update("First *words*")
    await live.update("First *words* and more")
    assert setup.calls() == ["chat.postMessage", "chat.update"]
    (message,) = slack.messages
    assert message["thread_ts"] is None  # where send posts too
    assert message["edits"] == ["First _words_ and more"]  # rendered as send renders

    await live.close()  # nothing to stop
    await setup.adapter.send(final("First *words* and more.", DM_TOP, live.drafts()))
    assert setup.calls() == ["chat.postMessage", "chat.update", "chat.update"]
    assert [m["text"] for m in slack.messages] == render("First *words* and more.")


async def test_an_unknown_asker_means_posts_and_edits_in_the_thread(setup):
    live = setup.adapter.open_stream(CHANNEL_THREAD)  # this process saw no event for it
    await live.update("Hello")
    assert setup.calls() == ["chat.postMessage"]
    assert setup.slack.messages[0]["thread_ts"] == CHANNEL_THREAD.thread_id


async def test_a_text_that_does_not_extend_the_stream_stops_it_and_edits(setup):
    slack = setup.slack
    live = await in_dm_thread(setup)
    await live.update("Let me look.\n\n_searching memory…_")
    await live.update("Let me look.\n\nFound it: **42**")
    assert setup.calls() == ["chat.startStream", "chat.stopStream", "chat.update"]
    (message,) = slack.messages
    assert message["text"] == "Let me look.\n\nFound it: *42*"
    await live.update("Let me look.\n\nFound it: **42**. Done")
    assert setup.calls()[-1] == "chat.update"  # edits from now on
    assert live.drafts() == (message["ts"],)


async def test_overflow_continues_in_a_new_message_and_the_final_edits_both(setup):
    slack = setup.slack
    live = await in_dm_thread(setup)
    await live.update(LONG[:3000])
    await live.update(LONG)
    chunks = render(LONG)
    assert len(chunks) == 2
    assert setup.calls() == [
        "chat.startStream",
        "chat.stopStream",
        "chat.update",
        "chat.postMessage",
    ]
    assert [m["text"] for m in slack.messages] == chunks
    assert slack.messages[1]["thread_ts"] == DM_THREAD.thread_id

    await live.close()
    ids = await setup.adapter.send(final(LONG, DM_THREAD, live.drafts()))
    assert ids == list(live.drafts())
    assert [m["text"] for m in slack.messages] == chunks
    assert len(slack.calls_to("chat.postMessage")) == 1  # only the overflow, once


async def test_a_429_during_update_raises_rate_limited_and_nothing_is_lost(setup):
    slack = setup.slack
    live = await in_dm_thread(setup)
    await live.update("one")
    slack.fail("chat.appendStream", status=429, retry_after=7)
    with pytest.raises(RateLimited) as caught:
        await live.update("one two")
    assert caught.value.retry_after == 7.0
    assert setup.clock.waits == []  # update does not sleep
    await live.update("one two three")
    assert slack.messages[0]["deltas"] == ["one", " two three"]

    await live.close()
    slack.fail("chat.update", status=429, retry_after=2)  # the final edit waits it out
    await setup.adapter.send(final("one two three four", DM_THREAD, live.drafts()))
    assert setup.clock.waits == [2.0]
    assert [m["text"] for m in slack.messages] == ["one two three four"]


async def test_a_429_on_edits_and_posts_raises_rate_limited(setup):
    slack = setup.slack
    live = setup.adapter.open_stream(DM_TOP)
    slack.fail("chat.postMessage", status=429, retry_after=3)
    with pytest.raises(RateLimited):
        await live.update("first")
    assert live.drafts() == ()
    await live.update("first")
    slack.fail("chat.update", status=429, retry_after=3)
    with pytest.raises(RateLimited):
        await live.update("first second")
    await live.update("first second")
    assert [m["text"] for m in slack.messages] == ["first second"]


async def test_discard_stops_and_deletes_what_was_posted(setup):
    slack = setup.slack
    live = await in_dm_thread(setup)
    await live.update("maybe")
    await live.discard()
    assert setup.calls()[-2:] == ["chat.stopStream", "chat.delete"]
    assert slack.messages == [] and len(slack.deleted) == 1

    long = setup.adapter.open_stream(DM_TOP)
    await long.update(LONG)
    assert len(slack.messages) == 2
    await long.discard()
    assert slack.messages == []


async def test_discard_and_close_never_raise(setup):
    slack = setup.slack
    live = await in_dm_thread(setup)
    await live.update("x")
    slack.fail("chat.stopStream", error="internal_error")
    slack.fail("chat.delete", error="cant_delete_message")
    await live.discard()  # logged, not raised
    assert [c.error for c in slack.calls_to("chat.delete")] == ["cant_delete_message"]

    live = await in_dm_thread(setup)
    await live.update("y")
    slack.fail("chat.stopStream", status=429, retry_after=1, times=2)
    await live.close()  # one wait, one more try, then given up: logged
    assert len(slack.calls_to("chat.stopStream")) == 3


async def test_close_waits_out_one_429_on_stop(setup):
    slack = setup.slack
    live = await in_dm_thread(setup)
    await live.update("x")
    slack.fail("chat.stopStream", status=429, retry_after=2)
    await live.close()
    assert setup.clock.waits == [2.0]
    assert slack.messages[0]["streaming"] is False


async def test_send_edits_drafts_posts_further_parts_and_deletes_leftovers(setup):
    slack = setup.slack
    live = setup.adapter.open_stream(DM_TOP)
    await live.update(LONG)  # two messages
    drafts = live.drafts()
    await live.close()

    ids = await setup.adapter.send(final("Short after all.", DM_TOP, drafts))
    assert ids == [drafts[0]]
    assert [m["text"] for m in slack.messages] == ["Short after all."]
    assert [m["ts"] for m in slack.deleted] == [drafts[1]]

    ids = await setup.adapter.send(final(LONG, DM_TOP, ids))  # one draft, two parts
    assert ids[0] == drafts[0] and len(ids) == 2
    assert [m["text"] for m in slack.messages] == render(LONG)


async def test_buttons_go_on_the_last_part_when_it_is_an_edited_draft(setup):
    slack = setup.slack
    live = setup.adapter.open_stream(DM_TOP)
    await live.update("Delete everything?")
    buttons = (Button("Confirm", "/forget confirm"), Button("Cancel", "/forget cancel"))
    await setup.adapter.send(final("Delete everything?", DM_TOP, live.drafts(), buttons=buttons))
    (message,) = slack.messages
    assert [b["type"] for b in message["blocks"]] == ["section", "actions"]
    assert slack.block_problems == []


async def test_a_resumed_send_edits_only_what_is_not_done(setup):
    slack = setup.slack
    live = setup.adapter.open_stream(DM_TOP)
    await live.update(LONG)
    drafts = live.drafts()
    await live.close()
    progress = Progress([drafts[0]], resumed=True)  # died after part 1 was recorded
    before = len(slack.calls_to("chat.update"))
    ids = await setup.adapter.send(final(LONG, DM_TOP, drafts), progress)
    assert ids == list(drafts) == progress.parts
    assert len(slack.calls_to("chat.update")) == before + 1
    assert slack.calls_to("conversations.history") == []  # edits need no history check
    assert len(slack.messages) == 2


async def test_a_crash_between_edits_is_repaired_by_editing_again(setup):
    slack = setup.slack
    live = setup.adapter.open_stream(DM_TOP)
    await live.update(LONG)
    drafts = live.drafts()
    slack.fail("chat.update", error="fatal_error", after=1)  # part 2 fails
    with pytest.raises(DeliveryFailed, match=r"part 2 of 2; 1 sent"):
        await setup.adapter.send(final(LONG, DM_TOP, drafts), progress := Progress())
    ids = await setup.adapter.send(final(LONG, DM_TOP, drafts), Progress(progress.parts, True))
    assert ids == list(drafts)
    assert [m["text"] for m in slack.messages] == render(LONG)  # nothing doubled


async def test_a_draft_deleted_meanwhile_is_posted_anew(setup):
    slack = setup.slack
    live = setup.adapter.open_stream(DM_TOP)
    await live.update("draft")
    slack.messages.clear()  # someone deleted it
    ids = await setup.adapter.send(final("the answer", DM_TOP, live.drafts()))
    assert [m["text"] for m in slack.messages] == ["the answer"]
    assert ids == [slack.messages[0]["ts"]] != list(live.drafts())


async def test_a_refused_stream_falls_back_in_the_same_update(setup):
    slack = setup.slack
    slack.no_streams.add("D0ALICE")
    live = await in_dm_thread(setup)
    await live.update("Hello")
    assert setup.calls() == ["chat.startStream", "chat.postMessage"]
    assert [m["text"] for m in slack.messages] == ["Hello"]
    again = setup.adapter.open_stream(DM_THREAD)
    assert isinstance(again, SlackLiveMessage) and not again.native  # not asked again


async def test_an_expired_stream_continues_as_edits(setup):
    slack = setup.slack
    live = await in_dm_thread(setup)
    await live.update("one")
    slack.expire_stream(live.drafts()[0])
    await live.update("one two")
    assert setup.calls()[-2:] == ["chat.appendStream", "chat.update"]
    assert "chat.stopStream" not in setup.calls()  # nothing left to stop
    assert [m["text"] for m in slack.messages] == ["one two"]


async def test_broadcasts_in_a_native_stream_stay_inert(setup):
    live = await in_dm_thread(setup)
    await live.update("Tell @channel and <!here> about <@U0BOB>")
    text = setup.slack.messages[0]["text"]
    assert "@channel" not in text and "<!here>" not in text and "<@U0BOB>" not in text
    assert text.replace("\u200d", "") == "Tell @channel and <!here> about <@U0BOB>"


async def test_an_empty_final_reply_deletes_the_drafts(setup):
    live = setup.adapter.open_stream(DM_TOP)
    await live.update("something")
    assert await setup.adapter.send(final("  ", DM_TOP, live.drafts())) == []
    assert setup.slack.messages == [] and len(setup.slack.deleted) == 1


async def test_a_channel_the_bot_left_is_not_marked_as_refusing_streams(setup):
    slack = setup.slack
    await setup.hear(channel_message(mention("hi"), ts=CHANNEL_THREAD.thread_id))
    slack.fail("chat.startStream", error="not_in_channel")
    slack.fail("chat.postMessage", error="not_in_channel")
    live = setup.adapter.open_stream(CHANNEL_THREAD)
    with pytest.raises(DeliveryFailed, match="not_in_channel"):
        await live.update("hello")
    again = setup.adapter.open_stream(CHANNEL_THREAD)
    assert isinstance(again, SlackLiveMessage) and again.native


async def test_a_stream_left_open_by_a_dead_process_is_stopped_then_edited(setup):
    slack = setup.slack
    live = await in_dm_thread(setup)
    await live.update("half of an ans")  # the process dies here: no close
    note = "_(This answer was interrupted; it is being written again.)_"
    ids = await setup.adapter.send(final(note, DM_THREAD, live.drafts()))

    assert ids == list(live.drafts())
    assert [c.error for c in slack.calls_to("chat.update")] == ["streaming_state_conflict", None]
    (message,) = slack.messages
    assert message["streaming"] is False and message["text"] == render(note)[0]


async def test_an_edit_refused_for_another_reason_is_not_retried(setup):
    slack = setup.slack
    live = setup.adapter.open_stream(DM_TOP)
    await live.update("draft")
    slack.fail("chat.update", error="is_archived")
    with pytest.raises(DeliveryFailed, match="is_archived"):
        await setup.adapter.send(final("final", DM_TOP, live.drafts()))
    assert len(slack.calls_to("chat.update")) == 1  # the stop found no stream: no retry
    assert slack.calls_to("chat.stopStream")[0].error == "message_not_in_streaming_state"
