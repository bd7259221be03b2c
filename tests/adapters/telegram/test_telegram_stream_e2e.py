"""Streamed replies end to end, for both libraries: the real App (pipeline, streaming
core, store) and the anthropic SDK against a fake model that writes slowly, the
Telegram adapter against the fake Bot API. What reaches Telegram while the model
writes (drafts in private chats; a message and its edits in groups), and the final
reply, which must be exactly the non-streamed rendering."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from adapters.telegram.render import render
from tests.adapters.telegram.rig import Rig
from tests.fakes.anthropic import text_reply, tool_call, tool_use_reply
from tests.fakes.telegram import flood
from tests.fakes.telegram_html import parse_html
from tests.fakes.telegram_updates import GROUP_ID, group, message_id, private

pytestmark = pytest.mark.slow  # seconds a test (tests/tiers.py)

USER = 5120348871
STREAMING = {"streaming": {"interval_seconds": 0.05}}
LIVE_CALLS = ("sendMessage", "sendMessageDraft", "editMessageText", "deleteMessage")
ANSWER = (
    "Here is **the plan**:\n\n"
    + "\n".join(f"{n}. Step {n}: check the `service {n}` and note what it says." for n in range(8))
    + "\n\nThat is all."
)


def visible(markdown: str) -> list[str]:
    """The non-streamed rendering of a reply, as Telegram shows it."""
    return [parse_html(chunk) for chunk in render(markdown)]


def live_calls(rig: Rig) -> list[Any]:
    return [c for c in rig.telegram.calls if c.method in LIVE_CALLS]


async def test_private_reply_grows_as_drafts_then_one_message(rig, library, fake_anthropic):
    await rig.open(library, sections=STREAMING)
    fake_anthropic.script(text_reply(ANSWER, chunk_size=12, chunk_delay=0.05))
    await rig.deliver(private("plan my day"))

    calls = live_calls(rig)
    *drafts, final = calls
    assert len(drafts) >= 2, [c.method for c in calls]  # it grew visibly
    assert {c.method for c in drafts} == {"sendMessageDraft"}
    assert len({c.params["draft_id"] for c in drafts}) == 1
    assert final.method == "sendMessage" and final.ok
    assert [final.visible_text] == visible(ANSWER)
    prefixes = {parse_html(render(ANSWER[:n])[0]) for n in range(1, len(ANSWER) + 1)}
    assert all(d.visible_text in prefixes for d in drafts)  # each the reply so far, rendered
    assert rig.telegram.shown(USER) == {final.result["message_id"]: visible(ANSWER)[0]}


async def test_group_topic_reply_is_posted_once_then_edited(rig, library, fake_anthropic):
    await rig.open(library, sections=STREAMING)
    fake_anthropic.script(text_reply(ANSWER, chunk_size=12, chunk_delay=0.05))
    update = group("plan my day", mention=True, topic=77)
    await rig.deliver(update)

    first, *edits = live_calls(rig)
    assert first.method == "sendMessage"
    assert first.params["message_thread_id"] == 77
    assert first.params["reply_parameters"]["message_id"] == message_id(update)
    assert len(edits) >= 2 and {c.method for c in edits} == {"editMessageText"}
    assert {c.params["message_id"] for c in edits} == {first.result["message_id"]}
    assert rig.telegram.calls_to("sendMessageDraft") == []
    assert rig.telegram.shown(GROUP_ID) == {first.result["message_id"]: visible(ANSWER)[0]}


async def test_group_reply_past_4096_continues_in_a_new_message(rig, library, fake_anthropic):
    await rig.open(library, sections=STREAMING)
    text = "\n\n".join(f"Section {n}. " + "lorem ipsum " * 70 for n in range(7))
    parts = visible(text)
    assert len(parts) == 2
    fake_anthropic.script(text_reply(text, chunk_size=300, chunk_delay=0.1))
    await rig.deliver(group("write it all", mention=True))

    posts = rig.telegram.sent(GROUP_ID)
    assert len(posts) == 2
    last_edit = max(i for i, c in enumerate(rig.telegram.calls) if c.method == "editMessageText")
    assert rig.telegram.calls.index(posts[1]) < last_edit  # the 2nd part appeared while written
    ids = [c.result["message_id"] for c in posts]
    assert [rig.telegram.shown(GROUP_ID)[i] for i in ids] == parts
    assert len(rig.telegram.shown(GROUP_ID)) == 2


async def test_429_while_streaming_pauses_updates_and_the_final_lands(
    rig, library, fake_anthropic, caplog
):
    caplog.set_level(logging.INFO, "switchboard.streaming")
    await rig.open(library, sections=STREAMING)
    rig.telegram.fail_next("editMessageText", flood(1))
    fake_anthropic.script(text_reply(ANSWER, chunk_size=12, chunk_delay=0.05))
    await rig.deliver(group("plan my day", mention=True))

    edits = rig.telegram.calls_to("editMessageText")
    assert edits[0].status == 429 and edits[-1].ok
    [post] = rig.telegram.sent(GROUP_ID)
    assert rig.telegram.shown(GROUP_ID) == {post.result["message_id"]: visible(ANSWER)[0]}
    assert "stream.rate_limited" in caplog.text


async def test_streamed_no_reply_and_reasoning_never_reach_telegram(rig, library, fake_anthropic):
    await rig.open(library, sections=STREAMING)
    fake_anthropic.script(
        text_reply("NO_REPLY", chunk_size=1, chunk_delay=0.03),
        text_reply(
            "<think>the secret plan</think>Here is the answer, slowly written.",
            chunk_size=3,
            chunk_delay=0.02,
        ),
    )
    await rig.deliver(group("just chatting", mention=True))
    assert live_calls(rig) == []

    await rig.deliver(private("and you?"))
    calls = live_calls(rig)
    assert calls and calls[-1].visible_text == "Here is the answer, slowly written."
    shown = " ".join(str(c.params.get("text")) for c in calls)
    assert "secret" not in shown and "think" not in shown and "NO_REPLY" not in shown


async def test_stop_mid_stream_leaves_the_partial_text_marked(rig, library, fake_anthropic):
    await rig.open(library, sections=STREAMING)
    long = "The quick brown fox jumps over the lazy dog. " * 40
    fake_anthropic.script(text_reply(long.strip(), chunk_size=5, chunk_delay=0.05))
    rig.telegram.push_update(group("write an essay", mention=True))
    await rig.telegram.wait_for(lambda: bool(rig.telegram.calls_to("editMessageText")))
    await rig.deliver(group("/stop"))

    streamed = rig.telegram.sent(GROUP_ID)[0]
    texts = rig.telegram.shown(GROUP_ID)
    partial = texts[streamed.result["message_id"]]
    assert partial.endswith("(stopped)")
    assert long.startswith(partial.removesuffix("(stopped)").rstrip())
    assert "Stopped." in texts.values()


async def test_text_then_silence_deletes_what_was_posted(rig, library, fake_anthropic):
    await rig.open(library, sections=STREAMING)
    fake_anthropic.script(
        dataclasses.replace(  # written slowly: shown before the tool runs
            tool_use_reply(tool_call("current_time"), text="Let me check the clock first."),
            chunk_delay=0.05,
        ),
        text_reply("NO_REPLY", delay=0.5),  # the streamed text is up meanwhile
    )
    await rig.deliver(group("what time is it?", mention=True))

    [post] = rig.telegram.sent(GROUP_ID)
    assert "Let me check the clock first.".startswith(post.visible_text)
    deletes = rig.telegram.calls_to("deleteMessage")
    assert [c.params["message_id"] for c in deletes if c.ok] == [post.result["message_id"]]
    assert rig.telegram.shown(GROUP_ID) == {}
