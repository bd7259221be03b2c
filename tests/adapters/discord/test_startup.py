"""Startup and configuration: where Discord is, tokens, intents, reconnects."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from discord.gateway import DiscordWebSocket
from discord.http import Route

from adapters.discord import DiscordAdapter, create_adapter
from bot.app import load_adapter
from bot.config import DiscordSettings, Secrets, Settings, load_settings
from bot.errors import ConfigError, StartupError
from bot.ports import CommandInfo
from bot.types import IncomingMessage, Outcome, Reply
from tests.adapters.discord.helpers import SECRETS, settle
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import (
    BOT_ID,
    TOKEN,
)
from tests.harness import SoleLeader


async def test_rest_and_gateway_point_at_the_configured_server(
    start_discord, fake_discord: FakeDiscord
):
    default_rest, default_gateway = Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    _, adapter = await start_discord()
    assert fake_discord.api_base_url == Route.BASE
    assert str(DiscordWebSocket.DEFAULT_GATEWAY) == fake_discord.gateway_url
    assert adapter.identity.user_id == BOT_ID
    [identify] = fake_discord.identified
    assert identify["intents"] == 1 | 1 << 9 | 1 << 12 | 1 << 15  # guilds, messages, DMs, content
    await adapter.stop()
    assert (default_rest, default_gateway) == (Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)


def test_a_missing_token_is_a_one_line_config_error():
    settings = Settings.model_validate({"discord": {"enabled": True}})
    with pytest.raises(ConfigError) as caught:
        load_adapter("discord", settings, Secrets())  # what App.start_adapters does
    assert str(caught.value) == "DISCORD_BOT_TOKEN is not set (secrets come only from env vars)"


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("API_BASE_URL", "discord.com/api", "must be an http:// or https:// URL"),
        ("MAX_RATELIMIT_WAIT", "5", "greater than or equal to 30"),
    ],
)
def test_discord_settings_are_checked(key: str, value: str, problem: str):
    environ = {f"SWITCHBOARD__DISCORD__{key}": value}
    with pytest.raises(ConfigError, match=problem):
        load_settings(environ=environ)


async def test_a_rejected_token_stops_startup(make_app):
    default_rest = Route.BASE
    async with FakeDiscord(token="another-token") as fake:
        app = await make_app(discord={"enabled": True, "api_base_url": fake.api_base_url})
        adapter = create_adapter(app.settings, SECRETS)
        with pytest.raises(StartupError, match=r"rejected the bot token.*DISCORD_BOT_TOKEN"):
            await adapter.start(app.pipeline)
    assert default_rest == Route.BASE


async def test_a_missing_message_content_intent_is_explained(make_app):
    async with FakeDiscord(message_content_enabled=False) as fake:
        app = await make_app(discord={"enabled": True, "api_base_url": fake.api_base_url})
        adapter = create_adapter(app.settings, SECRETS)
        with pytest.raises(ConfigError, match=r"Message Content intent.*developer portal"):
            await adapter.start(app.pipeline)


async def test_an_unreachable_discord_is_a_startup_error(make_app):
    async with FakeDiscord() as fake:
        api_base_url = fake.api_base_url
    app = await make_app(discord={"enabled": True, "api_base_url": api_base_url})
    with pytest.raises(StartupError, match=r"cannot log in to Discord at http://127\.0\.0\.1"):
        await create_adapter(app.settings, SECRETS).start(app.pipeline)


class StubCore:
    """Records what the adapter hands over (once per message, as the inbox
    does: the catch-up may read one the gateway delivered); answers nothing."""

    def __init__(self) -> None:
        self.messages: list[IncomingMessage] = []

    async def handle(
        self,
        msg: IncomingMessage,
        *,
        deliver: bool = True,
        on_accepted: Callable[[], None] | None = None,
    ) -> Outcome:
        if any(m.dedupe_key == msg.dedupe_key for m in self.messages):
            return Outcome("duplicate")
        self.messages.append(msg)
        return Outcome("ignored")

    async def recent_channels(self, platform: str, within: Any, limit: int) -> list[Any]:
        return []

    def leadership(self, name: str) -> SoleLeader:
        return SoleLeader()

    def command_infos(self) -> list[CommandInfo]:
        return []

    async def record_delivery_failure(self, reply: Reply, error: BaseException) -> None:
        raise AssertionError("nothing is sent here")


async def test_a_new_session_reconnects_to_the_configured_gateway(fake_discord: FakeDiscord):
    """discord.py opens every non-resumed session on DiscordWebSocket.DEFAULT_GATEWAY:
    after an INVALID_SESSION the adapter must land on the configured server again.
    (discord.py waits 5 s before re-identifying; no assertion depends on it.)"""
    settings = DiscordSettings(enabled=True, api_base_url=fake_discord.api_base_url)
    adapter, core = DiscordAdapter(settings, TOKEN), StubCore()
    await adapter.start(core)
    try:
        await fake_discord.gateway.invalidate_sessions()
        await fake_discord.wait_until(
            lambda: (
                len(fake_discord.identified) == 2
                and any(s.identified for s in fake_discord.gateway.sessions)
            )
        )
        await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message("after"))
        await settle(fake_discord, adapter)
        assert [m.text for m in core.messages] == ["after"]
    finally:
        await adapter.stop()
