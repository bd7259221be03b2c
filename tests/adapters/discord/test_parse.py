"""adapters.discord.parse: raw gateway payloads → IncomingMessage, table-driven from
tests/data/discord/*.json (payloads from Discord's documentation; each file says
where it comes from and what it expects)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from adapters.discord import parse_interaction, parse_message
from adapters.discord.parse import option_text, strip_mentions, user_mentions
from bot.types import Attachment, BotIdentity, IncomingMessage
from tests.paths import DATA_DIR

DATA = DATA_DIR / "discord"
CASES = sorted(DATA.glob("*.json"))
BOT = BotIdentity("discord", "1100000000000000001", "switchboard")


def _parse(case: dict[str, Any]) -> IncomingMessage | None:
    bot = BotIdentity("discord", case["bot"]["user_id"], case["bot"].get("username"))
    if case["kind"] == "message":
        return parse_message(case["payload"], bot, bot_role_ids=case.get("bot_role_ids", ()))
    return parse_interaction(case["payload"], bot)


def _actual(msg: IncomingMessage, field: str) -> Any:
    value = getattr(msg, field)
    if field == "mentioned_user_ids":
        return list(value)
    if field == "attachments":
        return [_attachment(a) for a in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _attachment(attachment: Attachment) -> dict[str, Any]:
    return {
        "kind": attachment.kind,
        "file_id": attachment.file_id,
        "name": attachment.name,
        "mime_type": attachment.mime_type,
        "size": attachment.size,
        "url": attachment.url,
    }


def test_there_are_documented_cases():
    assert len(CASES) >= 15
    for path in CASES:
        assert json.loads(path.read_text())["source"], path.name


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_payload(path: Path):
    case = json.loads(path.read_text())
    msg = _parse(case)
    expected = case["expected"]
    if expected is None:
        assert msg is None
        return
    assert msg is not None
    assert msg.platform == "discord"
    assert msg.raw == case["payload"]
    actual = {field: _actual(msg, field) for field in expected}
    assert actual == expected


def test_the_dedupe_key_is_the_message_id():
    case = json.loads((DATA / "message_dm_docs_example.json").read_text())
    msg = parse_message(case["payload"], BOT)
    assert msg is not None and msg.dedupe_key == "334385199974967042"


def test_a_reply_to_a_deleted_message_is_not_a_reply_to_the_bot():
    case = json.loads((DATA / "message_reply_to_bot.json").read_text())
    payload = {**case["payload"], "referenced_message": None}  # null: the original was deleted
    msg = parse_message(payload, BOT)
    assert msg is not None and not msg.reply_to_bot and not msg.addressed


def test_role_mentions_count_only_for_the_bots_own_role():
    case = json.loads((DATA / "message_role_mention.json").read_text())
    other_role = parse_message(case["payload"], BOT, bot_role_ids=["1200000000000000008"])
    no_role = parse_message(case["payload"], BOT)
    assert other_role is not None and other_role.mentions_bot
    assert other_role.text == "<@&1200000000000000009> ask about it"
    assert no_role is not None and not no_role.mentions_bot and not no_role.addressed


def test_strip_mentions_keeps_other_mentions_and_layout():
    text = "<@42> hey <@!42>  <@7>\n```\n  code\n```"
    assert strip_mentions(text, "42") == "hey <@7>\n```\n  code\n```"
    assert strip_mentions("<@&9> <@420> hi", "42", ["9"]) == "<@420> hi"


def test_user_mentions_in_order_once_without_the_bot():
    assert user_mentions("<@3> <@!1> <@42> <@3> <@&5> <#6>", exclude="42") == ("3", "1")


def test_option_text_flattens_subcommands():
    options = [
        {"name": "set", "type": 1, "options": [{"name": "user", "type": 6, "value": "7"}]},
        {"name": "amount", "type": 4, "value": 500},
    ]
    assert option_text(options) == "set 7 500"
    assert option_text(None) == ""


def test_malformed_payloads_are_ignored():
    assert parse_message({}, BOT) is None
    assert parse_message({"author": {"id": "1"}, "content": "hi"}, BOT) is None  # no ids
    assert parse_interaction({"type": 2, "data": {"name": "x"}}, BOT) is None
