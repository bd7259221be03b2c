"""parse_event / parse_command over payloads from Slack's documentation
(tests/data/slack/*.json: the payload, the bot's user id, the expected fields)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapters.slack import parse_command, parse_event
from adapters.slack.parse import to_plain
from bot.types import Attachment, BotIdentity, IncomingMessage
from tests.paths import DATA_DIR

DATA = DATA_DIR / "slack"
EVENT_FILES = sorted(p for p in DATA.glob("*.json") if p.name != "slash_commands.json")
COMMANDS = json.loads((DATA / "slash_commands.json").read_text())
BOT = BotIdentity("slack", "UBOT0001", "switchboard")


def fields(msg: IncomingMessage, expected: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in expected:
        value = getattr(msg, key)
        if key == "attachments":
            value = [attachment_fields(a) for a in value]
        elif isinstance(value, tuple):
            value = list(value)
        out[key] = value
    return out


def attachment_fields(a: Attachment) -> dict[str, Any]:
    return {
        "kind": a.kind,
        "file_id": a.file_id,
        "name": a.name,
        "mime_type": a.mime_type,
        "size": a.size,
        "url": a.url,
        "problem": a.problem,
    }


@pytest.mark.parametrize("path", EVENT_FILES, ids=[p.stem for p in EVENT_FILES])
def test_documented_payloads(path: Path):
    case = json.loads(path.read_text())
    bot = BotIdentity("slack", case["bot_user_id"])
    msg = parse_event(case["body"], bot)
    if case["expected"] is None:
        assert msg is None
        return
    assert msg is not None
    assert msg.platform == "slack"
    assert fields(msg, case["expected"]) == case["expected"]
    assert msg.raw == case["body"]


def test_there_are_documented_payloads_of_each_kind():
    names = {p.stem for p in EVENT_FILES}
    assert {"message_im", "app_mention", "thread_reply", "file_share_im"} <= names
    assert {"message_changed", "message_deleted", "bot_message", "message_channels_own"} <= names


@pytest.mark.parametrize("case", COMMANDS["cases"], ids=[c["name"] for c in COMMANDS["cases"]])
def test_slash_commands(case: dict[str, Any]):
    msg = parse_command(case["payload"], COMMANDS["command"])
    assert msg is not None
    assert fields(msg, case["expected"]) == case["expected"]
    assert msg.is_command


def event(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "event_callback",
        "team_id": "T1",
        "event_id": "Ev1",
        "event": {
            "type": "message",
            "user": "U1",
            "channel": "C1",
            "channel_type": "channel",
            "ts": "10.1",
            "text": text,
            **extra,
        },
    }


def test_the_bots_mention_is_stripped_and_other_mentions_kept():
    msg = parse_event(event("<@UBOT0001> ask <@U024BE7LH> and <@W0ABC|ann>, not <@UBOT0001>"), BOT)
    assert msg is not None
    assert msg.mentions_bot
    assert msg.text == "ask <@U024BE7LH> and <@W0ABC>, not"
    assert msg.mentioned_user_ids == ("U024BE7LH", "W0ABC")


def test_a_message_and_its_app_mention_share_one_dedupe_key():
    body = event("<@UBOT0001> hi")
    mention = {**body, "event_id": "Ev2", "event": {**body["event"], "type": "app_mention"}}
    del mention["event"]["channel_type"]
    as_message, as_mention = parse_event(body, BOT), parse_event(mention, BOT)
    assert as_message is not None and as_mention is not None
    assert as_message.dedupe_key == as_mention.dedupe_key == "C1:10.1"
    assert as_mention.chat_type == "group" and as_mention.mentions_bot


@pytest.mark.parametrize(
    "extra",
    [
        {"bot_id": "B999", "bot_profile": {"name": "other"}},  # another app's bot
        {"user": "UBOT0001"},  # ourselves
        {"subtype": "message_changed"},
        {"subtype": "channel_join"},
        {"subtype": "me_message"},
        {"hidden": True},
    ],
)
def test_ignored(extra: dict[str, Any]):
    assert parse_event(event("hello", **extra), BOT) is None


def test_broadcast_in_a_thread_is_a_thread_reply():
    msg = parse_event(event("see", subtype="thread_broadcast", thread_ts="9.9"), BOT)
    assert msg is not None and msg.platform_thread_id == "9.9"


def test_dm_thread_reply_stays_in_its_thread():
    body = event("more", thread_ts="9.9", channel="D1", channel_type="im")
    msg = parse_event(body, BOT)
    assert msg is not None and msg.chat_type == "direct" and msg.platform_thread_id == "9.9"


def test_display_name_from_the_user_profile():
    profile = {"display_name": "", "real_name": "Ann Example", "name": "ann"}
    msg = parse_event(event("hi", user_profile=profile), BOT)
    assert msg is not None and msg.user_display_name == "Ann Example"


def test_file_shapes():
    files = [
        {"id": "F1", "mode": "file_access"},  # details only through files.info
        {"id": "F2", "mode": "tombstone"},  # deleted
        {"id": "F3", "mode": "external", "name": "doc", "is_external": True},
        {"id": "F4", "name": "notes.txt", "mimetype": "text/plain", "url_private": "https://x/y"},
    ]
    msg = parse_event(event("", subtype="file_share", files=files), BOT)
    assert msg is not None
    assert [a.file_id for a in msg.attachments] == ["F1", "F3", "F4"]
    f1, f3, f4 = msg.attachments
    assert f1.url is None and f1.problem is None
    assert f3.problem and "external" in f3.problem
    assert (f4.kind, f4.url) == ("document", "https://x/y")


@pytest.mark.parametrize(
    ("wire", "plain"),
    [
        ("a &lt;b&gt; &amp;amp; c", "a <b> &amp; c"),
        ("<https://example.com|the docs>", "the docs (https://example.com)"),
        ("<https://example.com>", "https://example.com"),
        ("<https://example.com|example.com>", "https://example.com"),
        ("<mailto:ann@example.com|ann@example.com>", "ann@example.com"),
        ("in <#C024BE7LR|general> or <#C0>", "in #general or #C0"),
        ("<!here> <!channel> <!everyone>", "@here @channel @everyone"),
        ("<!subteam^S0614TZR7|@team>", "@team"),
        ("<!date^1392734382^{date_num}|2014-02-18>", "2014-02-18"),
        ("<@U123> <@U456|bob>", "<@U123> <@U456>"),
    ],
)
def test_to_plain(wire: str, plain: str):
    assert to_plain(wire) == plain
