"""Native buttons on Slack: a reply's buttons are an actions block under its last
part; a press (a signed `block_actions` POST to /slack/interactivity, or a Socket
Mode `interactive` envelope) hands the pipeline the button's command as the
presser's message, and is acknowledged once stored."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlencode

import aiohttp
from sqlmodel import select

from adapters.slack import SlackAdapter
from bot.config import SlackSettings
from bot.ports import CommandInfo
from bot.store.models import InboxItem
from bot.types import Button, IncomingMessage, Outcome, Reply, Target
from bot.web.server import WebServer
from tests.adapters.slack.support import Rig, command_payload
from tests.fakes.slack import BOT_TOKEN, SIGNING_SECRET, signed_headers, socket_envelope
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


class PromptingCore:
    """A core that answers every command with a confirmation prompt with buttons."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    async def handle(
        self,
        msg: IncomingMessage,
        *,
        deliver: bool = True,
        on_accepted: Callable[[], None] | None = None,
    ) -> Outcome:
        if on_accepted is not None:
            on_accepted()
        return Outcome("command", (Reply("Confirm?", msg.target(), buttons=CONFIRM),))

    def command_infos(self) -> Sequence[CommandInfo]:
        return []

    async def record_delivery_failure(self, reply: Reply, error: BaseException) -> None:
        self.errors.append(error)


async def test_a_slash_command_answer_carries_its_buttons(slack):
    config = SlackSettings.model_validate(
        {"enabled": True, "mode": "http", "api_base_url": slack.api_url}
    )
    adapter = SlackAdapter(config, bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET)
    web = WebServer("127.0.0.1", 0)
    web.add_routes(adapter.routes())
    await web.start()
    core = PromptingCore()
    await adapter.start(core)  # type: ignore[arg-type]
    try:
        form = urlencode(command_payload(slack, "pending"))
        headers = {"Content-Type": "application/x-www-form-urlencoded", **signed_headers(form)}
        url = f"{web.url}/slack/commands"
        async with aiohttp.ClientSession() as http, http.post(url, data=form, headers=headers) as r:
            assert r.status == 200
        await adapter.idle()
    finally:
        await adapter.stop()
        await web.stop()

    assert core.errors == []
    [response] = slack.responses
    section, actions = response["blocks"]
    assert section["text"]["text"] == response["text"] == "Confirm?"
    assert [e["value"] for e in actions["elements"]] == ["/confirm K7Q2MX", "/cancel K7Q2MX"]
