"""Streamed Slack replies end to end: signed events into the running service,
the real pipeline and its streaming core, a fake model that writes slowly, and
slack_sdk against the fake Slack. A reply grows while written (native streams
in threads and DMs, posts and edits elsewhere) and ends as exactly the
non-streamed rendering."""

from __future__ import annotations

import asyncio

import pytest

from adapters.slack import render
from bot.pipeline.live import STOPPED_MARK
from tests.adapters.slack.support import Rig, channel_message, dm, mention
from tests.fakes.anthropic import text_reply, tool_call, tool_use_reply
from tests.probes import ProbeTool

pytestmark = pytest.mark.slow  # seconds a test (tests/tiers.py)

pytest_plugins = ("tests.adapters.slack.fixtures",)

STREAMING = {"streaming": {"interval_seconds": 0.05}}
ANSWER = "Here is **the answer**, written slowly. " * 6
THREAD = "1700000001.000100"


def methods(rig: Rig) -> list[str]:
    return [c.method for c in rig.slack.calls if c.method.startswith("chat.")]


async def test_a_dm_thread_reply_streams_natively_and_ends_as_the_rendered_reply(
    rig_factory, fake_anthropic
):
    rig = await rig_factory(sections=STREAMING)
    slack = rig.slack
    fake_anthropic.script(text_reply(ANSWER.strip(), chunk_size=12, chunk_delay=0.03))

    await rig.event(dm("tell me", ts="1700000001.000200", thread_ts=THREAD))
    await slack.wait_for(lambda: len(slack.calls_to("chat.appendStream")) >= 2)
    assert slack.calls_to("chat.stopStream") == []  # grown while the model writes
    await rig.adapter.idle()

    calls = methods(rig)
    assert calls[0] == "chat.startStream" and calls[-2:] == ["chat.stopStream", "chat.update"]
    assert set(calls[1:-2]) == {"chat.appendStream"}
    (message,) = slack.messages
    assert ANSWER.strip().startswith("".join(message["deltas"]))  # deltas, never repeated
    assert message["thread_ts"] == THREAD
    assert message["text"] == render(ANSWER.strip())[0]  # the non-streamed rendering
    start = slack.calls_to("chat.startStream")[0].args
    assert (start["recipient_user_id"], start["recipient_team_id"]) == ("U0ALICE", "T0001")


async def test_a_channel_mention_streams_in_its_thread(rig_factory, fake_anthropic):
    rig = await rig_factory(sections=STREAMING)
    fake_anthropic.script(text_reply(ANSWER.strip(), chunk_size=12, chunk_delay=0.02))
    await rig.event(channel_message(mention("explain"), ts="1700000002.000200"))
    await rig.adapter.idle()

    (message,) = rig.slack.messages
    assert message["thread_ts"] == "1700000002.000200"
    assert message["deltas"] and message["text"] == render(ANSWER.strip())[0]
    assert rig.slack.calls_to("chat.postMessage") == []


async def test_a_top_level_dm_posts_then_edits(rig_factory, fake_anthropic):
    rig = await rig_factory(sections=STREAMING)
    slack = rig.slack
    fake_anthropic.script(text_reply(ANSWER.strip(), chunk_size=12, chunk_delay=0.03))

    await rig.event(dm("tell me"))
    await slack.wait_for(lambda: len(slack.calls_to("chat.update")) >= 1)
    await rig.adapter.idle()

    assert slack.calls_to("chat.startStream") == []
    assert len(slack.calls_to("chat.postMessage")) == 1
    (message,) = slack.messages
    assert message["thread_ts"] is None
    assert len(message["edits"]) >= 2  # edits while written, then the final one
    assert message["text"] == render(ANSWER.strip())[0]


async def test_a_long_reply_continues_in_new_messages(rig_factory, fake_anthropic):
    rig = await rig_factory(sections=STREAMING)
    text = "\n\n".join(f"Paragraph {i}: " + "word " * 300 for i in range(4))
    fake_anthropic.script(text_reply(text, chunk_size=400, chunk_delay=0.02))

    await rig.event(dm("write a lot", ts="1700000001.000200", thread_ts=THREAD))
    await rig.adapter.idle()

    chunks = render(text)
    assert len(chunks) == 2
    assert [m["text"] for m in rig.slack.messages] == chunks
    assert len(rig.slack.calls_to("chat.postMessage")) == 1  # the overflow, posted once
    assert all(m["thread_ts"] == THREAD for m in rig.slack.messages)


async def test_a_429_while_streaming_pauses_and_the_final_still_lands(rig_factory, fake_anthropic):
    rig = await rig_factory(sections=STREAMING)
    rig.slack.fail("chat.appendStream", status=429, retry_after=0.2)
    fake_anthropic.script(text_reply(ANSWER.strip(), chunk_size=12, chunk_delay=0.03))

    await rig.event(dm("tell me", ts="1700000001.000200", thread_ts=THREAD))
    await rig.adapter.idle()

    assert 429 in [c.status for c in rig.slack.calls_to("chat.appendStream")]
    (message,) = rig.slack.messages
    assert message["text"] == render(ANSWER.strip())[0]
    assert ANSWER.strip().startswith("".join(message["deltas"]))  # nothing lost or doubled


async def test_a_streamed_no_reply_never_reaches_slack(rig_factory, fake_anthropic):
    rig = await rig_factory(sections=STREAMING)
    fake_anthropic.script(text_reply("NO_REPLY", chunk_size=1, chunk_delay=0.03))
    await rig.event(channel_message(mention("hm"), ts="1700000003.000300"))
    await rig.adapter.idle()
    assert fake_anthropic.request_count == 1
    assert methods(rig) == []
    assert rig.slack.messages == [] and rig.slack.deleted == []


async def test_stop_mid_stream_leaves_the_partial_text_marked(rig_factory, fake_anthropic):
    rig = await rig_factory(sections=STREAMING)
    slack = rig.slack
    fake_anthropic.script(text_reply(ANSWER.strip(), chunk_size=4, chunk_delay=0.05))

    await rig.event(dm("write an essay", ts="1700000001.000200", thread_ts=THREAD))
    await slack.wait_for(lambda: bool(slack.calls_to("chat.startStream")))
    await rig.event(dm("/stop", ts="1700000001.000300", thread_ts=THREAD))
    await rig.adapter.idle()

    streamed = slack.messages[0]
    assert streamed["streaming"] is False  # stopped, not left dangling
    assert streamed["text"].endswith(STOPPED_MARK)
    assert streamed["text"].startswith("Here")  # the partial text, kept
    assert "Stopped." in [m["text"] for m in slack.messages]


async def test_a_tool_shows_as_a_status_line_the_final_text_replaces(rig_factory, fake_anthropic):
    gate = asyncio.Event()

    async def slow(tool: ProbeTool, args: object) -> str:
        await gate.wait()
        return "found it"

    rig = await rig_factory(sections=STREAMING, tools=[ProbeTool("lookup", slow)])
    slack = rig.slack
    fake_anthropic.script(
        tool_use_reply(tool_call("lookup"), text="Let me look that up."),
        text_reply("It is **42**.", chunk_size=4, chunk_delay=0.01),
    )
    await rig.event(dm("what is it?", ts="1700000001.000200", thread_ts=THREAD))
    await slack.wait_for(lambda: bool(slack.messages) and "lookup" in slack.messages[0]["text"])
    assert slack.messages[0]["text"] == "Let me look that up.\n\n_using lookup…_"  # streamed
    gate.set()
    await rig.adapter.idle()

    (message,) = slack.messages  # one message throughout: no extra one for the activity
    assert message["text"] == "It is *42*."
    assert message["streaming"] is False
    assert "chat.postMessage" not in methods(rig)
