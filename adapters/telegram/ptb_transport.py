"""The python-telegram-bot (22.x) transport: `telegram.Bot` with `base_url` /
`base_file_url` built from `telegram.api_base_url` (`{base}/bot<token>/<method>`,
`{base}/file/bot<token>/<path>`), over PTB's own httpx requests."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

# Durations as timedelta (PTB 22's documented opt-in; int durations are deprecated and
# warn even inside PTB's own RetryAfter).
os.environ.setdefault("PTB_TIMEDELTA", "true")

from telegram import (
    Bot,
    BotCommand,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    ReplyParameters,
)
from telegram.error import (
    BadRequest as PTBBadRequest,
)
from telegram.error import (
    InvalidToken,
    RetryAfter,
    TelegramError,
)
from telegram.error import (
    NetworkError as PTBNetworkError,
)
from telegram.request import HTTPXRequest

from adapters.telegram.parse import ALLOWED_UPDATES
from adapters.telegram.transport import (
    BadRequest,
    FileTooLarge,
    Library,
    NetworkError,
    RateLimited,
    TelegramApiError,
    Unauthorized,
    scrub,
)
from bot.errors import AdapterError
from bot.types import BotIdentity

REQUEST_TIMEOUT = 30.0
DOWNLOAD_TIMEOUT = 120.0


class PTBTransport:
    library: Library = "python-telegram-bot"

    def __init__(self, token: str, api_base_url: str) -> None:
        self._token = token
        base = api_base_url.rstrip("/")
        self.bot = Bot(
            token,
            base_url=f"{base}/bot",
            base_file_url=f"{base}/file/bot",
            request=HTTPXRequest(
                connection_pool_size=64,
                read_timeout=REQUEST_TIMEOUT,
                connect_timeout=10.0,
                pool_timeout=10.0,
            ),
            get_updates_request=HTTPXRequest(
                connection_pool_size=2, read_timeout=REQUEST_TIMEOUT, connect_timeout=10.0
            ),
        )

    async def get_me(self) -> BotIdentity:
        with self._translated():
            await self.bot.initialize()  # getMe, kept as `bot.bot`
            me = self.bot.bot
        return BotIdentity("telegram", str(me.id), me.username)

    async def get_updates(
        self, offset: int | None, wait: int, limit: int = 100
    ) -> list[dict[str, Any]]:
        with self._translated():
            updates = await self.bot.get_updates(
                offset=offset, limit=limit, timeout=wait, allowed_updates=ALLOWED_UPDATES
            )
        return [update.to_dict() for update in updates]

    async def set_webhook(self, url: str, secret: str) -> None:
        with self._translated():
            await self.bot.set_webhook(
                url=url,
                secret_token=secret,
                allowed_updates=ALLOWED_UPDATES,
                drop_pending_updates=False,
            )

    async def delete_webhook(self) -> None:
        with self._translated():
            await self.bot.delete_webhook(drop_pending_updates=False)

    async def set_my_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        with self._translated():
            await self.bot.set_my_commands([BotCommand(name, text) for name, text in commands])

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
        reply = (
            ReplyParameters(message_id=int(reply_to), allow_sending_without_reply=True)
            if reply_to
            else None
        )
        with self._translated():
            sent = await self.bot.send_message(
                chat_id=int(chat_id),
                text=text,
                parse_mode="HTML" if html else None,
                message_thread_id=int(thread_id) if thread_id else None,
                reply_parameters=reply,
                reply_markup=_keyboard(buttons),
            )
        return str(sent.message_id)

    async def send_message_draft(
        self,
        chat_id: str,
        draft_id: int,
        text: str,
        *,
        html: bool,
        thread_id: str | None = None,
    ) -> None:
        with self._translated():
            await self.bot.send_message_draft(
                chat_id=int(chat_id),
                draft_id=draft_id,
                text=text,
                parse_mode="HTML" if html else None,
                message_thread_id=int(thread_id) if thread_id else None,
            )

    async def edit_message_text(
        self,
        chat_id: str,
        message_id: str,
        text: str,
        *,
        html: bool,
        buttons: Sequence[tuple[str, str]] = (),
    ) -> None:
        with self._translated():
            await self.bot.edit_message_text(
                text,
                chat_id=int(chat_id),
                message_id=int(message_id),
                parse_mode="HTML" if html else None,
                reply_markup=_keyboard(buttons),
            )

    async def delete_message(self, chat_id: str, message_id: str) -> None:
        with self._translated():
            await self.bot.delete_message(chat_id=int(chat_id), message_id=int(message_id))

    async def answer_callback_query(self, query_id: str) -> None:
        with self._translated():
            await self.bot.answer_callback_query(query_id)

    async def send_chat_action(self, chat_id: str, thread_id: str | None = None) -> None:
        with self._translated():
            await self.bot.send_chat_action(
                chat_id=int(chat_id),
                action="typing",
                message_thread_id=int(thread_id) if thread_id else None,
            )

    async def download(self, file_id: str, max_bytes: int) -> bytes:
        with self._translated():
            file = await self.bot.get_file(file_id)
            if file.file_size is not None and file.file_size > max_bytes:
                raise FileTooLarge(file.file_size, max_bytes)
            data = await file.download_as_bytearray(read_timeout=DOWNLOAD_TIMEOUT)
        if len(data) > max_bytes:
            raise FileTooLarge(len(data), max_bytes)
        return bytes(data)

    async def close(self) -> None:
        await self.bot.shutdown()

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """PTB's exceptions → ours, without the token (PTB quotes it when it is rejected)."""
        try:
            yield
        except AdapterError:
            raise
        except RetryAfter as exc:
            raise RateLimited(self._text(exc.message), _seconds(exc)) from None
        except PTBBadRequest as exc:  # a subclass of PTB's NetworkError: first
            raise BadRequest(self._text(exc.message)) from None
        except InvalidToken as exc:
            raise Unauthorized(self._text(exc.message)) from None
        except PTBNetworkError as exc:
            raise NetworkError(self._text(f"{type(exc).__name__}: {exc.message}")) from None
        except TelegramError as exc:
            raise TelegramApiError(self._text(f"{type(exc).__name__}: {exc.message}")) from None
        except RuntimeError as exc:  # e.g. a File without file_path
            raise TelegramApiError(self._text(str(exc))) from None

    def _text(self, message: str) -> str:
        return scrub(message, self._token)


def _seconds(exc: RetryAfter) -> float:
    value = exc.retry_after
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


def _keyboard(buttons: Sequence[tuple[str, str]]) -> InlineKeyboardMarkup | None:
    if not buttons:
        return None
    row = [InlineKeyboardButton(label, callback_data=data) for label, data in buttons]
    return InlineKeyboardMarkup([row])
