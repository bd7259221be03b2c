"""Telegram adapter: aiogram or python-telegram-bot (`telegram.library`), long polling or
webhook (`telegram.mode`), replies rendered as Telegram HTML (parse_mode=HTML)."""

from __future__ import annotations

import re

from adapters.telegram.adapter import WEBHOOK_PATH, TelegramAdapter
from adapters.telegram.delivery import Limits
from adapters.telegram.factory import make_transport
from adapters.telegram.parse import parse_update
from adapters.telegram.render import render, to_plain_text
from adapters.telegram.transport import TOKEN_RE, Library, Transport
from bot.config import Secrets, Settings
from bot.errors import ConfigError

__all__ = [
    "WEBHOOK_PATH",
    "TelegramAdapter",
    "create_adapter",
    "parse_update",
    "render",
    "to_plain_text",
]

_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")
_LIBRARY_MODULE = {"aiogram": "aiogram", "python-telegram-bot": "telegram"}


def create_adapter(settings: Settings, secrets: Secrets) -> TelegramAdapter:
    """The adapter for `[telegram]`, with the configured library's transport."""
    config = settings.telegram
    token = secrets.require("telegram_bot_token")
    if not TOKEN_RE.fullmatch(token):
        raise ConfigError(
            "TELEGRAM_BOT_TOKEN is not a bot token (<digits>:<letters> from @BotFather)"
        )
    if not config.api_base_url.startswith(("http://", "https://")):
        raise ConfigError("telegram.api_base_url: must be an http:// or https:// URL")
    secret = None
    if config.mode == "webhook":
        if not config.webhook_url:
            raise ConfigError(
                'telegram.webhook_url: mode = "webhook" needs the public https:// URL '
                f"that reaches {WEBHOOK_PATH}"
            )
        secret = secrets.require("telegram_webhook_secret")
        if not _SECRET_TOKEN.fullmatch(secret):
            raise ConfigError(
                "TELEGRAM_WEBHOOK_SECRET: 1-256 characters of A-Z, a-z, 0-9, _ and - only"
            )
    transport = _transport(config.library, token, config.api_base_url)
    limits = Limits(max_flood_wait=config.max_retry_after_seconds)
    return TelegramAdapter(config, transport, webhook_secret=secret, limits=limits)


def _transport(library: Library, token: str, api_base_url: str) -> Transport:
    try:
        return make_transport(library, token, api_base_url)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == _LIBRARY_MODULE[library]:
            raise ConfigError(
                f'telegram.library = "{library}" is not installed; '
                "install it with: pip install 'switchboard[telegram]'"
            ) from None
        raise
