"""The aiogram (3.x) transport: `aiogram.Bot` with an aiohttp session whose API server
is `telegram.api_base_url` (`TelegramAPIServer.from_base`: `{base}/bot<token>/<method>`
and `{base}/file/bot<token>/<path>`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import aiohttp
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    AiogramError,
    ClientDecodeError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.types import (
    BotCommand,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    ReplyParameters,
)

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

REQUEST_TIMEOUT = 30
DOWNLOAD_TIMEOUT = 120


class AiogramTransport:
    library: Library = "aiogram"

    def __init__(self, token: str, api_base_url: str) -> None:
        self._token = token
        session = AiohttpSession(
            api=TelegramAPIServer.from_base(api_base_url), timeout=REQUEST_TIMEOUT
        )
        self.bot = Bot(token, session=session)

    async def get_me(self) -> BotIdentity:
        with self._translated():
            me = await self.bot.get_me()
        return BotIdentity("telegram", str(me.id), me.username)

    async def get_updates(
        self, offset: int | None, wait: int, limit: int = 100
    ) -> list[dict[str, Any]]:
        with self._translated():
            updates = await self.bot.get_updates(
                offset=offset,
                limit=limit,
                timeout=wait,
                allowed_updates=list(ALLOWED_UPDATES),
                request_timeout=wait + REQUEST_TIMEOUT,
            )
        return [u.model_dump(mode="json", by_alias=True, exclude_none=True) for u in updates]

    async def set_webhook(self, url: str, secret: str) -> None:
        with self._translated():
            await self.bot.set_webhook(
                url=url,
                secret_token=secret,
                allowed_updates=list(ALLOWED_UPDATES),
                drop_pending_updates=False,
            )

    async def delete_webhook(self) -> None:
        with self._translated():
            await self.bot.delete_webhook(drop_pending_updates=False)

    async def set_my_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        with self._translated():
            await self.bot.set_my_commands(
                [BotCommand(command=name, description=text) for name, text in commands]
            )

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
                chat_id=int(chat_id),
                message_id=int(message_id),
                text=text,
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
            if not file.file_path:
                raise TelegramApiError("getFile returned no file_path")
            url = self.bot.session.api.file_url(self.bot.token, file.file_path)
            data = bytearray()
            async for chunk in self.bot.session.stream_content(url, timeout=DOWNLOAD_TIMEOUT):
                data += chunk
                if len(data) > max_bytes:
                    raise FileTooLarge(len(data), max_bytes)
        return bytes(data)

    async def close(self) -> None:
        await self.bot.session.close()

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """aiogram's and aiohttp's exceptions → ours, without the token or the chain
        (aiohttp errors quote URLs, and URLs hold the token)."""
        try:
            yield
        except AdapterError:
            raise
        except TelegramRetryAfter as exc:
            raise RateLimited(self._text(exc.message), exc.retry_after) from None
        except TelegramBadRequest as exc:
            raise BadRequest(self._text(exc.message)) from None
        except TelegramUnauthorizedError as exc:
            raise Unauthorized(self._text(exc.message)) from None
        except (TelegramNetworkError, TelegramServerError, ClientDecodeError) as exc:
            raise NetworkError(self._text(f"{type(exc).__name__}: {exc}")) from None
        except TelegramAPIError as exc:
            raise TelegramApiError(self._text(f"{type(exc).__name__}: {exc.message}")) from None
        except aiohttp.ClientResponseError as exc:  # a file download
            error = NetworkError if exc.status >= 500 else TelegramApiError
            raise error(f"file download failed: HTTP {exc.status} {exc.message}") from None
        except (TimeoutError, aiohttp.ClientError, AiogramError) as exc:
            raise NetworkError(self._text(f"{type(exc).__name__}: {exc}")) from None

    def _text(self, message: str) -> str:
        return scrub(message, self._token)


def _keyboard(buttons: Sequence[tuple[str, str]]) -> InlineKeyboardMarkup | None:
    if not buttons:
        return None
    row = [InlineKeyboardButton(text=label, callback_data=data) for label, data in buttons]
    return InlineKeyboardMarkup(inline_keyboard=[row])
