"""Native buttons on Telegram, for both libraries: a reply's buttons become an inline
keyboard under its last part; pressing one (a `callback_query` update) hands the
pipeline the button's command as the presser's message and answers the query."""

from __future__ import annotations

from typing import Any

import pytest
from sqlmodel import select

from bot.store.models import InboxItem
from bot.types import Button, Reply, Target
from tests.adapters.telegram.rig import Rig
from tests.fakes.telegram_updates import GROUP_ID, person, press

CONFIRM = (Button("Confirm", "/confirm K7Q2MX"), Button("Cancel", "/cancel K7Q2MX"))
PRESSER = 6035227194


async def inbox(rig: Rig) -> list[InboxItem]:
    assert rig.app is not None
    async with rig.app.store.read() as session:
        return list((await session.exec(select(InboxItem))).all())


def keyboard(call: Any) -> Any:
    return (call.params.get("reply_markup") or {}).get("inline_keyboard")


async def test_buttons_are_an_inline_keyboard_under_the_last_part(rig, library):
    await rig.open(library)
    assert rig.adapter is not None
    text = ("Schedule 'daily digest' every day at 09:00? " * 120).strip()
    reply = Reply(text, Target("telegram", str(GROUP_ID), thread_id="77"), buttons=CONFIRM)
    ids = await rig.adapter.send(reply)

    first, last = rig.telegram.sent()
    assert len(ids) == 2
    assert keyboard(first) is None
    assert keyboard(last) == [
        [
            {"text": "Confirm", "callback_data": "/confirm K7Q2MX"},
            {"text": "Cancel", "callback_data": "/cancel K7Q2MX"},
        ]
    ]
    assert last.result["reply_markup"]["inline_keyboard"] == keyboard(last)
    assert last.params["message_thread_id"] == 77


async def test_a_command_too_long_for_callback_data_sends_no_buttons(rig, library):
    await rig.open(library)
    assert rig.adapter is not None
    long = (Button("Confirm", "/confirm " + "K" * 60), Button("Cancel", "/cancel K7Q2MX"))
    await rig.adapter.send(Reply("Confirm?", Target("telegram", str(GROUP_ID)), buttons=long))

    [sent] = rig.telegram.sent()
    assert sent.visible_text == "Confirm?"
    assert "reply_markup" not in sent.params


@pytest.mark.parametrize("mode", ["polling", "webhook"])
async def test_a_press_is_the_pressers_command_and_is_answered(rig, library, mode):
    await rig.open(library, mode=mode)
    presser = dict(person(PRESSER, "Ada"), last_name="King", username="ada_k")
    update_id = await rig.deliver(press("/help", user=presser, topic=77, query_id="cb-1"))

    [item] = await inbox(rig)
    assert item.event_id == "123456789:press:cb-1"
    assert item.payload is not None
    assert {k: item.payload[k] for k in ("text", "platform_user_id", "user_display_name")} == {
        "text": "/help",
        "platform_user_id": str(PRESSER),
        "user_display_name": "Ada King",
    }
    assert item.payload["platform_channel_id"] == str(GROUP_ID)
    assert item.payload["platform_thread_id"] == "77"
    assert item.payload["chat_type"] == "group"
    assert item.payload["mentions_bot"] is True
    [answer] = rig.telegram.calls_to("answerCallbackQuery")
    assert answer.params["callback_query_id"] == "cb-1" and answer.ok
    [help_text] = rig.telegram.sent(GROUP_ID)  # the core answered the command in the topic
    assert help_text.params["message_thread_id"] == 77
    assert "/help" in (help_text.visible_text or "")
    assert rig.telegram.taken(update_id)
    allowed = (
        rig.telegram.calls_to("setWebhook")[0].params["allowed_updates"]
        if mode == "webhook"
        else rig.telegram.calls_to("getUpdates")[0].params["allowed_updates"]
    )
    assert "callback_query" in allowed


async def test_a_redelivered_press_is_handed_over_once(rig, library):
    await rig.open(library)
    update = press("/help", user=person(PRESSER, "Ada"), chat_id=PRESSER, query_id="cb-2")
    update_id = await rig.deliver(update)
    await rig.restart_adapter()
    rig.telegram.push_update({**update, "update_id": update_id})
    await rig.telegram.wait_for_calls("answerCallbackQuery", 2)  # each delivery is acked
    assert rig.app is not None
    await rig.app.pipeline.drain(60)

    [item] = await inbox(rig)
    assert item.event_id == "123456789:press:cb-2"
    assert item.payload is not None and item.payload["chat_type"] == "direct"
    assert len(rig.telegram.sent(PRESSER)) == 1  # one answer to the command


async def test_a_press_whose_data_is_not_a_command_is_only_answered(rig, library):
    await rig.open(library)
    await rig.deliver(press("hello", user=person(PRESSER, "Ada"), query_id="cb-3"))

    assert await inbox(rig) == []
    assert rig.telegram.sent() == []
    [answer] = rig.telegram.calls_to("answerCallbackQuery")
    assert answer.params["callback_query_id"] == "cb-3"
