"""Native buttons on Discord: a reply's buttons are message components under its last
part (custom_id = the command); a press (INTERACTION_CREATE, a message component) hands
the pipeline the command as the presser's message and is acknowledged with a deferred
update."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlmodel import select

from adapters.discord import DiscordAdapter
from bot.app import App
from bot.config import DiscordSettings
from bot.ports import CommandInfo
from bot.store.models import InboxItem
from bot.types import Button, IncomingMessage, Outcome, Reply, Role, Target
from tests.adapters.discord.helpers import settle
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import BOB, CHANNEL_ID, GUILD_ID, TOKEN
from tests.harness import SoleLeader

CONFIRM = (Button("Confirm", "/confirm K7Q2MX"), Button("Cancel", "/cancel K7Q2MX"))


async def inbox(app: App) -> list[InboxItem]:
    async with app.store.read() as session:
        return list((await session.exec(select(InboxItem))).all())


def target() -> Target:
    return Target("discord", CHANNEL_ID, server_id=GUILD_ID)


async def test_buttons_are_components_under_the_last_part(start_discord, fake_discord):
    _, adapter = await start_discord()
    text = "\n\n".join(["Schedule 'daily digest' every day at 09:00?" * 10] * 6)
    ids = await adapter.send(Reply(text, target(), buttons=CONFIRM))

    *first, last = fake_discord.visible(CHANNEL_ID)
    assert len(ids) == len(first) + 1 >= 2
    assert all(p.components is None for p in first)
    assert last.components is not None
    [row] = last.components
    assert row["type"] == 1
    assert [(b["type"], b["label"], b["custom_id"]) for b in row["components"]] == [
        (2, "Confirm", "/confirm K7Q2MX"),
        (2, "Cancel", "/cancel K7Q2MX"),
    ]


async def test_a_command_too_long_for_a_custom_id_sends_no_buttons(start_discord, fake_discord):
    _, adapter = await start_discord()
    await adapter.send(Reply("Confirm?", target(), buttons=(Button("Go", "/confirm " + "K" * 95),)))
    [posted] = fake_discord.visible(CHANNEL_ID)
    assert posted.content == "Confirm?" and posted.components is None


async def test_a_press_is_the_pressers_command_once_and_acknowledged(
    start_discord, fake_discord: FakeDiscord
):
    app, adapter = await start_discord()
    await adapter.send(Reply("Need help?", target(), buttons=(Button("Help", "/help"),)))
    [prompt] = fake_discord.visible(CHANNEL_ID)
    press = fake_discord.button_press(prompt, "/help", user=BOB)

    await fake_discord.dispatch("INTERACTION_CREATE", press)
    await settle(fake_discord, adapter)
    await app.pipeline.drain(60)
    await fake_discord.dispatch("INTERACTION_CREATE", press)  # delivered twice
    await settle(fake_discord, adapter)
    await app.pipeline.drain(60)

    [item] = await inbox(app)
    assert item.event_id == press["id"]
    assert item.payload is not None
    assert {k: item.payload[k] for k in ("text", "platform_user_id", "platform_channel_id")} == {
        "text": "/help",
        "platform_user_id": BOB["id"],
        "platform_channel_id": CHANNEL_ID,
    }
    assert item.payload["chat_type"] == "group" and item.payload["mentions_bot"] is True
    assert item.payload["user_display_name"]
    callbacks = [c for c in fake_discord.calls if press["token"] in c.path]
    assert callbacks[0].body == {"type": 6}  # a deferred update: the prompt stays as it is
    assert fake_discord.interactions[press["token"]].acknowledged
    _, answer = fake_discord.visible(CHANNEL_ID)  # the core answered /help once
    assert "/budget" in answer.content


async def test_a_component_that_is_not_ours_is_only_acknowledged(start_discord, fake_discord):
    app, adapter = await start_discord()
    await adapter.send(Reply("Confirm?", target(), buttons=CONFIRM))
    [prompt] = fake_discord.visible(CHANNEL_ID)
    press = fake_discord.button_press(prompt, "someone-else:1")
    await fake_discord.dispatch("INTERACTION_CREATE", press)
    await settle(fake_discord, adapter)
    assert await inbox(app) == []
    assert fake_discord.interactions[press["token"]].acknowledged


class PromptingCore:
    """A core with one command, /pending, answered with a prompt with buttons."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    async def handle(
        self,
        msg: IncomingMessage,
        *,
        deliver: bool = True,
        on_accepted: Callable[[], None] | None = None,
    ) -> Outcome:
        return Outcome("command", (Reply("Confirm?", msg.target(), buttons=CONFIRM),))

    async def recent_channels(self, platform: str, within: Any, limit: int) -> list[Any]:
        return []

    def leadership(self, name: str) -> SoleLeader:
        return SoleLeader()

    def command_infos(self) -> list[CommandInfo]:
        return [CommandInfo("pending", "Your pending actions", "", Role.GUEST)]

    async def record_delivery_failure(self, reply: Reply, error: BaseException) -> None:
        self.errors.append(error)


async def test_a_slash_command_answer_carries_its_buttons(fake_discord: FakeDiscord):
    settings = DiscordSettings(enabled=True, api_base_url=fake_discord.api_base_url)
    adapter, core = DiscordAdapter(settings, TOKEN), PromptingCore()
    await adapter.start(core)  # type: ignore[arg-type]
    try:
        payload = fake_discord.slash_command("pending")
        await fake_discord.dispatch("INTERACTION_CREATE", payload)
        await settle(fake_discord, adapter)
    finally:
        await adapter.stop()

    assert core.errors == []
    [answer] = fake_discord.visible(CHANNEL_ID)
    assert answer.content == "Confirm?" and answer.interaction_id == payload["id"]
    assert answer.components is not None
    [row] = answer.components
    assert [b["custom_id"] for b in row["components"]] == ["/confirm K7Q2MX", "/cancel K7Q2MX"]
