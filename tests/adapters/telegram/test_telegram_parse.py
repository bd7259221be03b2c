"""adapters.telegram.parse_update over real-shaped Update payloads (tests/data/telegram),
directly and after a round trip through aiogram's and python-telegram-bot's models
(what the polling transports hand to the adapter)."""

from __future__ import annotations

import copy
import json
from dataclasses import asdict
from typing import Any

import pytest

from adapters.telegram import parse_update
from bot.types import BotIdentity, IncomingMessage
from tests.paths import DATA_DIR

DATA = DATA_DIR / "telegram"
BOT = BotIdentity("telegram", "123456789", "switchboard_test_bot")
CASES = {path.stem: json.loads(path.read_text(encoding="utf-8")) for path in DATA.glob("*.json")}


def fields(msg: IncomingMessage | None, names: list[str]) -> dict[str, Any] | None:
    if msg is None:
        return None
    values: dict[str, Any] = {}
    for name in names:
        value = getattr(msg, name)
        if name == "attachments":
            value = [
                {
                    k: v
                    for k, v in asdict(a).items()
                    if k not in ("data", "problem", "url") and (k != "seconds" or v is not None)
                }
                for a in value
            ]
        elif name == "mentioned_user_ids":
            value = list(value)
        elif name == "received_at":
            value = value.isoformat()
        values[name] = value
    return values


def check(update: dict[str, Any], expected: dict[str, Any] | None, **options: Any) -> None:
    msg = parse_update(update, BOT, **options)
    if expected is None:
        assert msg is None
        return
    assert msg is not None
    assert fields(msg, list(expected)) == expected
    assert msg.platform == "telegram"
    assert msg.event_id == f"{BOT.user_id}:{update['update_id']}"
    assert msg.raw == update


def test_the_table_covers_every_case_the_issue_names():
    assert {
        "private_text",
        "group_mention",
        "group_reply_to_bot",
        "forum_topic",
        "photo_with_caption",
        "document",
        "edited_message",
        "channel_post",
        "service_new_members",
        "another_bot",
    } <= set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_update(name: str):
    case = CASES[name]
    check(case["update"], case["expected"])
    if "expected_when_handle_edited" in case:
        check(case["update"], case["expected_when_handle_edited"], handle_edited=True)


def _complete(update: dict[str, Any]) -> dict[str, Any]:
    """The guide's examples predate `User.is_bot` and `file_unique_id`, which both
    libraries require."""
    update = copy.deepcopy(update)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "first_name" in node and "type" not in node and "title" not in node:
                node.setdefault("is_bot", False)
            if "file_id" in node:
                node.setdefault("file_unique_id", "unique-" + node["file_id"][-6:])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(update)
    return update


def _aiogram(update: dict[str, Any]) -> dict[str, Any]:
    from aiogram.types import Update

    model = Update.model_validate(update)
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _ptb(update: dict[str, Any]) -> dict[str, Any]:
    from telegram import Update

    model = Update.de_json(update, None)
    assert model is not None
    return model.to_dict()


ROUND_TRIP = sorted(name for name in CASES if name != "callback_query")  # incomplete in the guide


@pytest.mark.parametrize("library", [_aiogram, _ptb], ids=["aiogram", "python-telegram-bot"])
@pytest.mark.parametrize("name", ROUND_TRIP)
def test_update_after_library_round_trip(name: str, library: Any):
    case = CASES[name]
    update = _complete(case["update"])
    through = library(update)
    for options in ({}, {"handle_edited": True}):
        direct = parse_update(update, BOT, **options)
        again = parse_update(through, BOT, **options)
        if direct is None:
            assert again is None
        else:
            assert again is not None
            assert asdict(again) | {"raw": None} == asdict(direct) | {"raw": None}


def test_ignores_what_is_not_a_message_update():
    assert parse_update({"message": {"text": "no update id"}}, BOT) is None
    assert parse_update({"update_id": 1}, BOT) is None
    assert parse_update({"update_id": 1, "message": "not an object"}, BOT) is None
    base = CASES["private_text"]["update"]
    without_sender = copy.deepcopy(base)
    del without_sender["message"]["from"]
    assert parse_update(without_sender, BOT) is None
    unknown_chat = copy.deepcopy(base)
    unknown_chat["message"]["chat"]["type"] = "sender"
    assert parse_update(unknown_chat, BOT) is None


def test_command_without_entity_and_a_bot_without_username():
    update = copy.deepcopy(CASES["command_for_this_bot"]["update"])
    del update["message"]["entities"]
    msg = parse_update(update, BOT)
    assert msg is not None and msg.text == "/budget please"
    anonymous = BotIdentity("telegram", BOT.user_id, None)
    assert parse_update(update, anonymous) is None  # cannot be ours
    assert parse_update(CASES["group_mention"]["update"], anonymous).mentions_bot is False  # type: ignore[union-attr]
