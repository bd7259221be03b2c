"""Slack end to end over HTTP: signed requests into the real bolt app on the
service's web server, the real pipeline and store, the anthropic SDK against
the fake Messages API, replies through slack_sdk to the fake Slack Web API."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from sqlmodel import select

from bot.store.models import DeliveryFailure, InboxItem
from tests.adapters.slack.support import (
    channel_message,
    command_payload,
    dm,
    mention,
)
from tests.fakes.anthropic import text_reply
from tests.fakes.slack import APP_TOKEN, BOT_USER_ID, socket_envelope

pytestmark = pytest.mark.slow  # seconds a test (tests/tiers.py)

pytest_plugins = ("tests.adapters.slack.fixtures",)


async def test_dm_is_answered_once_at_the_top_level(rig_factory, fake_anthropic):
    rig = await rig_factory()
    fake_anthropic.script(text_reply("Hello **Alice**."))

    status, body = await rig.event(dm("hello there"))
    assert (status, body) == (200, "")
    await rig.adapter.idle()

    assert [(m["channel"], m["thread_ts"], m["text"]) for m in rig.slack.messages] == [
        ("D0ALICE", None, "Hello *Alice*.")
    ]
    assert fake_anthropic.request_count == 1
    assert "hello there" in json.dumps(fake_anthropic.last_request.messages)
    assert rig.slack.calls_to("auth.test")  # the bot's identity came from auth.test


async def test_channel_mention_is_answered_in_a_thread_once(rig_factory, fake_anthropic):
    rig = await rig_factory()
    fake_anthropic.script(text_reply("On it."), text_reply("second answer"))
    ts = "1700000002.000200"

    # One message that mentions the bot arrives twice: as `message` and as `app_mention`.
    as_message = channel_message(mention("what is up?"), ts=ts)
    as_mention = channel_message(mention("what is up?"), ts=ts, kind="app_mention")
    assert as_message["event_id"] != as_mention["event_id"]
    statuses = await asyncio.gather(rig.event(as_message), rig.event(as_mention))
    assert [s for s, _ in statuses] == [200, 200]
    await rig.adapter.idle()

    assert [(m["channel"], m["thread_ts"], m["text"]) for m in rig.slack.messages] == [
        ("C0GENERAL", ts, "On it.")
    ]
    assert fake_anthropic.request_count == 1
    sent = json.dumps(fake_anthropic.last_request.messages)
    assert "what is up?" in sent and BOT_USER_ID not in sent

    # A follow-up in that thread continues the same conversation.
    reply = channel_message(mention("and now?"), ts="1700000003.000300", thread_ts=ts)
    await rig.event(reply)
    await rig.adapter.idle()
    assert rig.slack.messages[-1]["thread_ts"] == ts
    history = fake_anthropic.last_request.messages
    assert [m["role"] for m in history] == ["user", "assistant", "user"]


async def test_retries_and_simultaneous_deliveries_give_one_reply(rig_factory, fake_anthropic):
    rig = await rig_factory()
    fake_anthropic.script(text_reply("only once"))
    body = dm("are you there?")

    results = await asyncio.gather(*(rig.event(body) for _ in range(3)))
    assert {status for status, _ in results} == {200}
    await rig.adapter.idle()
    retry = {"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
    assert (await rig.event(body, headers=retry))[0] == 200
    await rig.adapter.idle()

    assert [m["text"] for m in rig.slack.messages] == ["only once"]
    assert fake_anthropic.request_count == 1


async def test_a_redelivery_after_a_restart_is_not_answered_again(rig_factory, fake_anthropic):
    first = await rig_factory()
    fake_anthropic.script(text_reply("answered before the restart"))
    body = dm("remember me?")
    await first.event(body)
    await first.adapter.idle()
    await first.close()

    second = await rig_factory()
    assert (await second.event(body, headers={"X-Slack-Retry-Num": "2"}))[0] == 200
    await second.adapter.idle()
    assert [m["text"] for m in second.slack.messages] == ["answered before the restart"]
    assert fake_anthropic.request_count == 1


async def test_long_replies_are_split_within_slack_limits(rig_factory, fake_anthropic):
    rig = await rig_factory()
    code = "\n".join(f"line_{i} = {i} * 2  # padding padding padding" for i in range(120))
    prose = "\n\n".join(f"Paragraph {i}: " + "word " * 150 for i in range(8))
    fake_anthropic.script(text_reply(f"{prose}\n\n```python\n{code}\n```\n\nDone."))

    await rig.event(channel_message(mention("write a lot")))
    await rig.adapter.idle()

    texts = [m["text"] for m in rig.slack.messages]
    assert len(texts) > 2
    assert all(len(t) <= 4000 for t in texts)
    assert all(t.count("```") % 2 == 0 for t in texts)  # no chunk splits a code block open
    assert {m["thread_ts"] for m in rig.slack.messages} == {"1700000002.000200"}
    joined = "".join(texts)
    assert "line_119 = 119" in joined and joined.rstrip().endswith("Done.")


async def test_mentions_written_by_the_llm_never_ping(rig_factory, fake_anthropic):
    rig = await rig_factory()
    fake_anthropic.script(
        text_reply("Hey <!channel> and <!here>, also @everyone, @here and <@U0BOSS>!")
    )
    await rig.event(dm("announce it"))
    await rig.adapter.idle()

    (text,) = [m["text"] for m in rig.slack.messages]
    for live in ("<!channel>", "<!here>", "<@U0BOSS>", "@everyone", "@here"):
        assert live not in text
    assert "&lt;!channel&gt;" in text and "&lt;@U0BOSS&gt;" in text


async def test_no_reply_is_silent(rig_factory, fake_anthropic):
    rig = await rig_factory(require_mention=False)
    fake_anthropic.script(text_reply("NO_REPLY"))
    await rig.event(channel_message("just chatting among ourselves"))
    await rig.adapter.idle()

    assert fake_anthropic.request_count == 1
    assert rig.slack.messages == []


async def test_unaddressed_channel_chatter_is_ignored(rig_factory, fake_anthropic):
    rig = await rig_factory()
    await rig.event(channel_message("nothing for the bot here"))
    await rig.adapter.idle()
    assert fake_anthropic.request_count == 0 and rig.slack.messages == []


async def test_bad_signatures_get_401_and_nothing_runs(rig_factory, fake_anthropic):
    rig = await rig_factory()
    body = dm("let me in")
    stale = int(time.time()) - 6 * 60
    assert (await rig.event(body, secret="not-the-signing-secret"))[0] == 401
    assert (await rig.event(body, timestamp=stale))[0] == 401
    assert (await rig.event(body, headers={"X-Slack-Signature": "v0=" + "0" * 64}))[0] == 401
    assert (await rig.command(command_payload(rig.slack, "budget"), secret="wrong"))[0] == 401
    await rig.adapter.idle()

    assert fake_anthropic.request_count == 0
    assert rig.slack.messages == [] and rig.slack.responses == []
    async with rig.app.store.read() as session:
        assert (await session.exec(select(InboxItem))).all() == []


async def test_url_verification_is_answered(rig_factory):
    rig = await rig_factory()
    challenge = {
        "token": "x",
        "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
        "type": "url_verification",
    }
    status, body = await rig.event(challenge)
    assert status == 200 and json.loads(body) == {"challenge": challenge["challenge"]}


async def test_slash_commands_are_answered_without_the_llm(rig_factory, fake_anthropic):
    rig = await rig_factory()

    status, body = await rig.command(command_payload(rig.slack, "budget"))
    assert (status, body) == (200, "")  # acknowledged at once, answered by response_url
    await rig.adapter.idle()
    (budget,) = rig.slack.responses
    assert budget["response_type"] == "ephemeral"
    assert "tokens this month" in budget["text"]

    await rig.command(command_payload(rig.slack, ""))  # bare /switchboard: help
    await rig.adapter.idle()
    help_ = rig.slack.responses[-1]
    assert help_["response_type"] == "in_channel"
    assert "/budget" in help_["text"] and "/new" in help_["text"]

    await rig.command(command_payload(rig.slack, "nonsense"))
    await rig.adapter.idle()
    assert rig.slack.responses[-1]["response_type"] == "ephemeral"
    assert "Unknown command /nonsense" in rig.slack.responses[-1]["text"]
    assert fake_anthropic.request_count == 0
    assert rig.slack.messages == []


async def test_an_undeliverable_command_answer_is_recorded(rig_factory, fake_anthropic):
    rig = await rig_factory()
    rig.slack.response_urls_expired = True

    await rig.command(command_payload(rig.slack, "budget"))
    await rig.adapter.idle()

    assert rig.slack.responses == []
    async with rig.app.store.read() as session:
        (failure,) = (await session.exec(select(DeliveryFailure))).all()
    assert failure.platform == "slack" and "tokens this month" in failure.text
    assert "HTTP 404" in failure.reason


async def test_files_are_downloaded_for_the_agent(rig_factory, fake_anthropic):
    rig = await rig_factory(max_file_bytes=1000)
    notes = rig.slack.add_file("notes.txt", b"The launch code is 0000.", "text/plain")
    huge = rig.slack.add_file("big.log", b"x" * 5000, "text/plain")
    fake_anthropic.script(text_reply("Read it."))

    await rig.event(dm("what do these say?", subtype="file_share", files=[notes, huge]))
    await rig.adapter.idle()

    sent = json.dumps(fake_anthropic.last_request.messages)
    assert "The launch code is 0000." in sent
    assert rig.slack.downloads == [(notes["id"], True)]  # the large one was never fetched
    texts = [m["text"] for m in rig.slack.messages]
    assert texts[0].startswith("I couldn't use big.log: it is too large")
    assert texts[-1] == "Read it."


async def test_a_reply_that_cannot_be_delivered_is_recorded(rig_factory, fake_anthropic):
    rig = await rig_factory()
    rig.slack.left_channels.add("C0GENERAL")  # not_in_channel, streamed or posted
    fake_anthropic.script(text_reply("you will never see this"))

    await rig.event(channel_message(mention("hi")))
    await rig.adapter.idle()

    assert rig.slack.messages == []
    async with rig.app.store.read() as session:
        (failure,) = (await session.exec(select(DeliveryFailure))).all()
    assert failure.platform == "slack" and failure.channel_id == "C0GENERAL"
    assert failure.thread_id == "1700000002.000200"
    assert "not_in_channel" in failure.reason and failure.text == "you will never see this"


async def test_a_rate_limited_reply_is_retried(rig_factory, fake_anthropic):
    rig = await rig_factory()
    rig.slack.fail("chat.postMessage", status=429, retry_after=0)
    fake_anthropic.script(text_reply("after the wait"))

    await rig.event(dm("hi"))
    await rig.adapter.idle()

    assert [c.status for c in rig.slack.calls_to("chat.postMessage")] == [429, 200]
    assert [m["text"] for m in rig.slack.messages] == ["after the wait"]


async def test_socket_mode_end_to_end(rig_factory, fake_anthropic):
    rig = await rig_factory(mode="socket")
    (opened,) = rig.slack.calls_to("apps.connections.open")
    assert opened.token == APP_TOKEN  # the app-level token, not the bot token
    fake_anthropic.script(text_reply("over the socket"))

    body = dm("hello via socket mode")
    first = socket_envelope("events_api", body)
    retry = socket_envelope("events_api", body, retry_attempt=1)
    assert (await rig.slack.push(first)) == {"envelope_id": first["envelope_id"]}
    assert (await rig.slack.push(retry)) == {"envelope_id": retry["envelope_id"]}
    await rig.adapter.idle()
    assert [(m["channel"], m["text"]) for m in rig.slack.messages] == [
        ("D0ALICE", "over the socket")
    ]
    assert fake_anthropic.request_count == 1

    command = socket_envelope("slash_commands", command_payload(rig.slack, "budget"))
    assert (await rig.slack.push(command))["envelope_id"] == command["envelope_id"]
    await rig.adapter.idle()
    (answer,) = rig.slack.responses
    assert answer["response_type"] == "ephemeral" and "tokens this month" in answer["text"]
    assert fake_anthropic.request_count == 1
