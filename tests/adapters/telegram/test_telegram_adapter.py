"""The Telegram adapter's configuration, start-up and edges: create_adapter's checks,
start-up failures without the token in them, the command menu, typing."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.telegram import WEBHOOK_PATH, TelegramAdapter, create_adapter
from adapters.telegram.aiogram_transport import AiogramTransport
from adapters.telegram.factory import make_transport
from adapters.telegram.ptb_transport import PTBTransport
from bot.commands.registry import CommandSpec
from bot.config import Secrets, Settings
from bot.errors import ConfigError, StartupError
from bot.types import Role, Target
from tests.adapters.telegram.rig import LIBRARIES
from tests.fakes.telegram import TOKEN, flood


def settings(**telegram: Any) -> Settings:
    return Settings.model_validate({"telegram": {"enabled": True, **telegram}})


def secrets(**values: str) -> Secrets:
    return Secrets.model_validate(values)


@pytest.mark.parametrize(
    ("library", "kind"), [("aiogram", AiogramTransport), ("python-telegram-bot", PTBTransport)]
)
def test_create_adapter_uses_the_configured_library(library: str, kind: type):
    adapter = create_adapter(settings(library=library), secrets(telegram_bot_token=TOKEN))
    assert isinstance(adapter, TelegramAdapter) and isinstance(adapter.transport, kind)
    assert adapter.routes() == []  # polling: no webhook route


def test_webhook_mode_serves_the_webhook_route():
    adapter = create_adapter(
        settings(mode="webhook", webhook_url="https://bot.example.com/telegram/webhook"),
        secrets(telegram_bot_token=TOKEN, telegram_webhook_secret="abc_DEF-123"),
    )
    [route] = adapter.routes()
    assert (route.method, route.path) == ("POST", WEBHOOK_PATH)


@pytest.mark.parametrize(
    ("config", "env", "error"),
    [
        ({}, {}, "TELEGRAM_BOT_TOKEN is not set"),
        ({}, {"telegram_bot_token": "not-a-token"}, "TELEGRAM_BOT_TOKEN is not a bot token"),
        ({"api_base_url": "ftp://x"}, {"telegram_bot_token": TOKEN}, "telegram.api_base_url"),
        ({"mode": "webhook"}, {"telegram_bot_token": TOKEN}, "telegram.webhook_url"),
        (
            {"mode": "webhook", "webhook_url": "https://b.example/telegram/webhook"},
            {"telegram_bot_token": TOKEN},
            "TELEGRAM_WEBHOOK_SECRET is not set",
        ),
        (
            {"mode": "webhook", "webhook_url": "https://b.example/telegram/webhook"},
            {"telegram_bot_token": TOKEN, "telegram_webhook_secret": "has spaces"},
            "TELEGRAM_WEBHOOK_SECRET: 1-256 characters",
        ),
    ],
)
def test_create_adapter_refuses_bad_configuration(config: dict, env: dict, error: str):
    with pytest.raises(ConfigError, match=error):
        create_adapter(settings(**config), secrets(**env))


@pytest.mark.parametrize("library", LIBRARIES)
async def test_a_rejected_token_stops_the_start_without_showing_it(rig, library):
    rig.telegram.token = "987654321:AAAAotherOTHERotherOTHERother_other1"  # ours is refused
    with pytest.raises(StartupError) as caught:
        await rig.open(library)
    assert "Telegram rejected the bot token" in str(caught.value)
    assert "Check TELEGRAM_BOT_TOKEN" in str(caught.value)
    assert TOKEN not in str(caught.value) and TOKEN.split(":")[1] not in str(caught.value)


@pytest.mark.parametrize("library", LIBRARIES)
async def test_the_command_menu_lists_what_everyone_may_use(rig, library, make_app):
    app = await make_app()
    commands = app.pipeline.s.commands

    async def nothing(call: object) -> str:
        return "ok"

    commands.add(CommandSpec("superpower", "Owners only", nothing, min_role=Role.OWNER))
    commands.add(CommandSpec("dry-run", "Not a Telegram command name", nothing))
    rig.app = app
    adapter = rig.adapter = TelegramAdapter(
        settings(library=library, api_base_url=rig.telegram.base_url).telegram,
        make_transport(library, TOKEN, rig.telegram.base_url),
        clock=rig.clock,
    )
    await adapter.start(app.pipeline)
    try:
        menu = [c["command"] for c in rig.telegram.commands or []]
        assert menu == [
            i.name
            for i in app.pipeline.command_infos()
            if i.min_role in (Role.GUEST, Role.USER) and i.name != "dry-run"
        ]
        assert {"help", "budget", "new"} <= set(menu)
        assert "superpower" not in menu and "setbudget" not in menu
        rig.telegram.fail_next("sendChatAction", flood(7))
        await adapter.show_typing(Target("telegram", "42"))
        await adapter.show_typing(Target("telegram", "42"))  # held back by the flood wait
        await adapter.show_typing(Target("telegram", "43"))
        actions = rig.telegram.calls_to("sendChatAction")
        assert [(c.chat_id, c.status) for c in actions] == [("42", 429), ("43", 200)]
    finally:
        await adapter.stop()
