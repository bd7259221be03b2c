"""What the adapter needs from a Telegram client library, and the errors it sees.

A transport is a thin wrapper over one library's Bot API client (aiogram or
python-telegram-bot). It turns the library's exceptions into the ones below, with
messages that never contain the bot token (both libraries put it in URLs, and
python-telegram-bot quotes it when the server rejects it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from bot.errors import AdapterError, RateLimited
from bot.types import BotIdentity

Library = Literal["aiogram", "python-telegram-bot"]
TOKEN_RE = re.compile(r"^\d+:[A-Za-z0-9_-]+$")

__all__ = [
    "BadRequest",
    "FileTooLarge",
    "Library",
    "NetworkError",
    "RateLimited",
    "TelegramApiError",
    "Transport",
    "Unauthorized",
]


class TelegramApiError(AdapterError):
    """The Bot API refused a call (forbidden, not found, conflict, ...): retrying the
    same call will not help."""


class BadRequest(TelegramApiError):
    """HTTP 400, e.g. "Bad Request: can't parse entities: ..."."""

    @property
    def cannot_parse_entities(self) -> bool:
        return "can't parse entities" in str(self).lower()

    @property
    def not_modified(self) -> bool:
        """editMessageText with the text (and keyboard) the message already has:
        the message shows what was asked, so the edit counts as done."""
        return "message is not modified" in str(self).lower()

    @property
    def message_gone(self) -> bool:
        """The message to edit or delete no longer exists (deleted by someone)."""
        text = str(self).lower()
        return "message to edit not found" in text or "message to delete not found" in text


class Unauthorized(TelegramApiError):
    """HTTP 401 (and, for python-telegram-bot, 404 on getMe): the bot token was
    rejected."""


class NetworkError(AdapterError):
    """The call may not have reached Telegram, or Telegram failed (timeout, connection
    refused, HTTP 5xx, an unreadable answer): worth retrying with backoff."""


class FileTooLarge(AdapterError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size} bytes is over the {limit} byte limit")
        self.size = size
        self.limit = limit


class Transport(Protocol):
    """One library's Bot API client, reduced to the calls the adapter makes."""

    library: Library

    async def get_me(self) -> BotIdentity: ...

    async def get_updates(
        self, offset: int | None, wait: int, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Raw `Update` JSON objects (as the Bot API sent them), long-polling up to
        `wait` seconds."""
        ...

    async def set_webhook(self, url: str, secret: str) -> None: ...

    async def delete_webhook(self) -> None: ...

    async def set_my_commands(self, commands: Sequence[tuple[str, str]]) -> None: ...

    async def send_message(
        self,
        chat_id: str,
        text: str,
        *,
        html: bool,
        thread_id: str | None = None,
        reply_to: str | None = None,
        buttons: Sequence[tuple[str, str]] = (),
    ) -> str:
        """Send one message (parse_mode=HTML when `html`); returns its message_id.
        `buttons` (label, callback_data) become an inline keyboard, one row."""
        ...

    async def send_message_draft(
        self,
        chat_id: str,
        draft_id: int,
        text: str,
        *,
        html: bool,
        thread_id: str | None = None,
    ) -> None:
        """sendMessageDraft (Bot API 9.3): show `text` as the message being written
        in a private chat (an ephemeral preview; the reply itself is a sendMessage).
        Changes of one non-zero `draft_id` are animated."""
        ...

    async def edit_message_text(
        self,
        chat_id: str,
        message_id: str,
        text: str,
        *,
        html: bool,
        buttons: Sequence[tuple[str, str]] = (),
    ) -> None:
        """editMessageText of a message the bot sent (with `buttons` as its inline
        keyboard). Raises `BadRequest` ("message is not modified") when nothing
        would change."""
        ...

    async def delete_message(self, chat_id: str, message_id: str) -> None: ...

    async def answer_callback_query(self, query_id: str) -> None:
        """Acknowledge a button press (the client stops showing its spinner)."""
        ...

    async def send_chat_action(self, chat_id: str, thread_id: str | None = None) -> None: ...

    async def download(self, file_id: str, max_bytes: int) -> bytes:
        """getFile + download; raises `FileTooLarge` rather than read past `max_bytes`."""
        ...

    async def close(self) -> None: ...


def scrub(text: str, token: str) -> str:
    """`text` without the bot token (as in /bot<token>/ URLs)."""
    return text.replace(token, "<token>") if token else text
