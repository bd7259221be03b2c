"""Native buttons on Slack: a reply's buttons are an actions block under its last
part; a press (a signed `block_actions` POST to /slack/interactivity, or a Socket
Mode `interactive` envelope) hands the pipeline the button's command as the
presser's message, and is acknowledged once stored."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from sqlmodel import select

from bot.store.models import InboxItem
from bot.types import Button, Reply, Target
from tests.adapters.slack.support import Rig
from tests.fakes.slack import socket_envelope
from tests.fakes.slack_blocks import block_actions

pytest_plugins = ("tests.adapters.slack.fixtures",)

THREAD = "1700000002.000200"
CONFIRM = (Button("Confirm", "/confirm K7Q2MX"), Button("Cancel", "/cancel K7Q2MX"))


async def inbox(rig: Rig) -> list[InboxItem]:
    async with rig.app.store.read() as session:
        return list((await session.exec(select(InboxItem))).all())


async def post_prompt(rig: Rig, buttons: tuple[Button, ...], text: str = "Confirm?") -> Any:
    target = Target("slack", "C0GENERAL", thread_id=THREAD)
    await rig.adapter.send(Reply(text, target, buttons=buttons))
    return rig.slack.messages[-1]


async def interact(rig: Rig, payload: dict[str, Any]) -> tuple[int, str]:
    form = urlencode({"payload": json.dumps(payload)})
    return await rig.post("/slack/interactivity", form, "application/x-www-form-urlencoded")


async def test_buttons_are_an_actions_block_under_the_last_part(rig_factory):
    rig = await rig_factory()
    paragraph = "Schedule 'daily digest' every day at 09:00? " * 20
    text = "\n\n".join([paragraph] * 8)  # over 4000 characters: two parts
    await post_prompt(rig, CONFIRM, text)

    first, last = rig.slack.messages
    assert first["blocks"] is None
    assert rig.slack.block_problems == []
    *sections, actions = last["blocks"]
    assert sections and all(s["type"] == "section" for s in sections)
    assert "\n\n".join(s["text"]["text"] for s in sections) == last["text"]
    assert actions["type"] == "actions"
    assert [(e["action_id"], e["text"]["text"], e["value"]) for e in actions["elements"]] == [
        ("switchboard.button.1", "Confirm", "/confirm K7Q2MX"),
        ("switchboard.button.2", "Cancel", "/cancel K7Q2MX"),
    ]
    assert last["thread_ts"] == THREAD


async def test_a_signed_press_is_the_pressers_command_once(rig_factory):
    rig = await rig_factory()
    message = await post_prompt(rig, (Button("Help", "/help"), Button("Cancel", "/cancel X")))
    button = message["blocks"][-1]["elements"][0]
    payload = block_actions(message, button, user="U0BOB", name="bob")

    assert await interact(rig, payload) == (200, "")
    await rig.adapter.idle()
    assert (await interact(rig, payload))[0] == 200  # Slack retries: handed over once
    await rig.adapter.idle()

    [item] = await inbox(rig)
    action_ts = payload["actions"][0]["action_ts"]
    assert item.event_id == f"C0GENERAL:press:{action_ts}"
    assert item.payload is not None
    assert {k: item.payload[k] for k in ("text", "platform_user_id", "user_display_name")} == {
        "text": "/help",
        "platform_user_id": "U0BOB",
        "user_display_name": "bob",
    }
    assert item.payload["platform_channel_id"] == "C0GENERAL"
    assert item.payload["platform_thread_id"] == THREAD
    assert item.payload["chat_type"] == "group"
    assert item.payload["mentions_bot"] is True
    [answer] = rig.slack.messages[1:]  # the core answered /help in the thread
    assert answer["thread_ts"] == THREAD and "/help" in answer["text"]


async def test_a_press_over_socket_mode_is_acknowledged_once_stored(rig_factory):
    rig = await rig_factory(mode="socket")
    message = await post_prompt(rig, (Button("Help", "/help"),))
    payload = block_actions(message, message["blocks"][-1]["elements"][0])

    envelope = socket_envelope("interactive", payload)
    assert (await rig.slack.push(envelope))["envelope_id"] == envelope["envelope_id"]
    await rig.adapter.idle()

    [item] = await inbox(rig)
    assert item.payload is not None
    assert (item.payload["text"], item.payload["platform_user_id"]) == ("/help", "U0ALICE")


async def test_other_actions_are_acknowledged_and_not_handed_over(rig_factory):
    rig = await rig_factory()
    message = await post_prompt(rig, CONFIRM)
    other = {"action_id": "someone.else", "text": {"type": "plain_text", "text": "x"}}
    assert (await interact(rig, block_actions(message, other)))[0] == 200
    await rig.adapter.idle()
    assert await inbox(rig) == []
