"""The Telegram adapter: intake (long polling or webhook), files, typing, delivery.

One class for both libraries; the library only provides the `Transport`.

Intake guarantees exactly one answer per update without losing any:
- every message carries `event_id = "<bot_id>:<update_id>"`, which the pipeline
  claims durably before the agent runs (a redelivery is recognised and skipped);
- an update counts as taken once the pipeline has claimed it (`on_accepted`) or
  decided about it (ignored, kept as context, duplicate). Only then is the polling
  offset moved past it, or the webhook answered 200. The agent's run continues in
  the background, so the webhook answers quickly (one database write) and polling
  is not held up by slow runs. An update the pipeline could not take (database
  down) is asked for again with backoff (polling) or answered 500 so Telegram
  retries (webhook).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from aiohttp import web

from adapters.telegram.delivery import Clock, Limits, Sender, SystemClock
from adapters.telegram.parse import parse_press, parse_update
from adapters.telegram.render import render
from adapters.telegram.streaming import DRAFT_REFRESH_SECONDS, TelegramLiveMessage
from adapters.telegram.transport import (
    FileTooLarge,
    NetworkError,
    RateLimited,
    Transport,
    Unauthorized,
)
from bot.config import TelegramSettings
from bot.errors import AdapterError, StartupError
from bot.ports import Core, LiveMessage, Route, SendProgress, hand_over
from bot.types import Attachment, BotIdentity, Button, IncomingMessage, Reply, Role, Target

log = logging.getLogger("switchboard.telegram")

PLATFORM = "telegram"
WEBHOOK_PATH = "/telegram/webhook"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_COMMAND_NAME = re.compile(r"[a-z0-9_]{1,32}")
MAX_CALLBACK_DATA = 64
"""Bytes of `callback_data` Telegram accepts per inline keyboard button."""
_MENU_ROLES = (Role.GUEST, Role.USER)
_UNSUPPORTED = {
    "video": "videos are not supported",
    "other": "this kind of file is not supported",
}


class TelegramAdapter:
    platform = PLATFORM
    draft_refresh_seconds = DRAFT_REFRESH_SECONDS
    """How long a streamed draft may stay unchanged before it is sent again."""

    def __init__(
        self,
        settings: TelegramSettings,
        transport: Transport,
        *,
        webhook_secret: str | None = None,
        clock: Clock | None = None,
        limits: Limits | None = None,
        poll_timeout: int = 25,
        stop_grace: float = 10.0,
    ) -> None:
        if settings.mode == "webhook" and not webhook_secret:
            raise ValueError("webhook mode needs a secret")
        self.settings = settings
        self.transport = transport
        self.identity: BotIdentity | None = None
        self._secret = (webhook_secret or "").encode()
        self._clock: Clock = clock or SystemClock()
        self._limits = limits or Limits()
        self._sender = Sender(transport, self._clock, self._limits)
        self._poll_timeout = poll_timeout
        self._stop_grace = stop_grace
        self._core: Core | None = None
        self._poller: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._offset: int | None = None
        """The next update_id to ask for: every update below it was taken."""
        self._confirmed: int | None = None
        """The offset Telegram last received (updates below it are forgotten there)."""
        self._stopping = False
        self._poll_failing = False
        """The last getUpdates failed (`ready`)."""

    # -- lifecycle -----------------------------------------------------------

    def routes(self) -> Sequence[Route]:
        if self.settings.mode != "webhook":
            return []
        return [Route("POST", WEBHOOK_PATH, self._webhook)]

    async def start(self, core: Core) -> None:
        try:
            identity = await self._connect(core)
        except BaseException:
            await self.transport.close()
            raise
        self._core = core
        if self.settings.mode == "polling":
            self._poller = asyncio.create_task(self._poll(), name="telegram-polling")
        log.info(
            "telegram.started bot=@%s id=%s library=%s mode=%s",
            identity.username,
            identity.user_id,
            self.transport.library,
            self.settings.mode,
        )

    async def ready(self) -> bool:
        """Started (getMe done, webhook set or deleted) and, when polling, the
        poller alive with its last getUpdates answered."""
        if self._core is None or self.identity is None:
            return False
        if self.settings.mode == "webhook":
            return True
        return self._poller is not None and not self._poller.done() and not self._poll_failing

    async def stop(self) -> None:
        self._stopping = True
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=self._stop_grace)
            for task in pending:
                log.warning("telegram.stop_cancelled task=%s", task.get_name())
                task.cancel()
        if self._offset is not None and self._offset != self._confirmed:
            try:  # tell Telegram what was taken, so a restart does not fetch it again
                await self.transport.get_updates(self._offset, wait=0, limit=1)
            except AdapterError as exc:
                log.warning("telegram.confirm_failed offset=%s: %s", self._offset, exc)
        self._core = None
        await self.transport.close()

    async def _connect(self, core: Core) -> BotIdentity:
        """Who we are, the command menu, and how updates will come (webhook or not)."""
        try:
            self.identity = await self.transport.get_me()
        except Unauthorized:
            raise StartupError(
                "Telegram rejected the bot token (getMe: 401 Unauthorized)",
                "Check TELEGRAM_BOT_TOKEN: it must be the current token from @BotFather.",
            ) from None
        except NetworkError as exc:
            raise StartupError(
                f"cannot reach Telegram at {self.settings.api_base_url} (getMe failed: {exc})",
                "Check the network and [telegram] api_base_url.",
            ) from None
        except AdapterError as exc:
            raise StartupError(f"telegram: getMe failed: {exc}") from None
        await self._register_commands(core)
        try:
            if self.settings.mode == "webhook":
                assert self.settings.webhook_url is not None
                await self.transport.set_webhook(self.settings.webhook_url, self._secret.decode())
            else:
                await self.transport.delete_webhook()
        except AdapterError as exc:
            raise StartupError(f"telegram: {self.settings.mode} setup failed: {exc}") from None
        return self.identity

    async def _register_commands(self, core: Core) -> None:
        """The command menu: commands everyone may use (admin ones work, unlisted)."""
        commands = [
            (info.name, info.description[:256] or info.name)
            for info in core.command_infos()
            if _COMMAND_NAME.fullmatch(info.name) and info.min_role in _MENU_ROLES
        ]
        try:
            await self.transport.set_my_commands(commands)
        except AdapterError as exc:
            log.error("telegram.set_commands_failed: %s", exc)

    # -- outgoing ------------------------------------------------------------

    async def send(self, reply: Reply, progress: SendProgress | None = None) -> list[str]:
        chunks = render(reply.text)
        if not chunks and not reply.drafts:
            return []
        return await self._sender.send(
            reply.target, chunks, progress, _keyboard(reply.buttons), reply.drafts
        )

    def open_stream(self, target: Target) -> LiveMessage | None:
        """Drafts in private chats, a posted message then edits elsewhere
        (adapters/telegram/streaming.py). No I/O until the first update."""
        return TelegramLiveMessage(
            self.transport,
            self._sender,
            self._clock,
            target,
            refresh_seconds=self.draft_refresh_seconds,
        )

    async def show_typing(self, target: Target) -> None:
        if self._sender.blocked(target.channel_id):
            return
        try:
            await self.transport.send_chat_action(target.channel_id, target.thread_id)
        except RateLimited as exc:
            self._sender.block(target.channel_id, exc.retry_after)

    # -- intake --------------------------------------------------------------

    async def _poll(self) -> None:
        """Long polling until stopped, by one instance at a time: the leader of
        "telegram-polling:<bot id>" (several instances share the database; the
        others wait, and one takes over within seconds when the leader dies).
        Never dies of an error (it backs off instead)."""
        assert self._core is not None and self.identity is not None
        leader = self._core.leadership(f"telegram-polling:{self.identity.user_id}")
        while True:
            await leader.wait()
            log.info("telegram.polling bot=%s (this instance is the poller)", self.identity.user_id)
            polling = asyncio.create_task(self._poll_while_leader())
            lost = asyncio.create_task(leader.lost())
            try:
                await asyncio.wait({polling, lost}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (polling, lost):
                    task.cancel()
                await asyncio.gather(polling, lost, return_exceptions=True)
            log.warning("telegram.polling_stopped: leadership lost; waiting to be elected again")

    async def _poll_while_leader(self) -> None:
        failures = 0
        while True:
            try:
                try:
                    updates = await self.transport.get_updates(self._offset, self._poll_timeout)
                except Exception:
                    self._poll_failing = True
                    raise
                self._poll_failing = False
                self._confirmed = self._offset
                if await self._take_all(updates):
                    failures = 0
                    continue
                failures += 1
                delay = self._limits.backoff(failures)
            except RateLimited as exc:
                delay = exc.retry_after
                log.warning("telegram.poll_flood_wait retry_after=%ss", delay)
            except AdapterError as exc:
                failures += 1
                delay = self._limits.backoff(failures)
                log.warning("telegram.poll_failed retry_in=%ss: %s", delay, exc)
            except Exception:
                failures += 1
                delay = self._limits.backoff(failures)
                log.exception("telegram.poll_error retry_in=%ss", delay)
            await self._clock.sleep(delay)

    async def _take_all(self, updates: list[dict[str, Any]]) -> bool:
        """Hand updates over in order; False (and the offset stays) at the first one
        the pipeline could not take."""
        for update in sorted(updates, key=lambda u: int(u.get("update_id", 0))):
            update_id = update.get("update_id")
            if not isinstance(update_id, int):
                continue
            if self._offset is not None and update_id < self._offset:
                continue
            if not await self._hand_over(update):
                log.warning("telegram.update_not_taken update_id=%s; will ask again", update_id)
                return False
            self._offset = update_id + 1
        return True

    async def _webhook(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not hmac.compare_digest(given, self._secret):
            log.warning("telegram.webhook_forbidden remote=%s", request.remote)
            return web.Response(status=403, text="forbidden")
        if self._core is None or self._stopping:
            return web.Response(status=503, text="not ready")  # Telegram retries
        try:
            update = await request.json()
        except ValueError:
            update = None
        if not isinstance(update, dict) or not isinstance(update.get("update_id"), int):
            log.warning(
                "telegram.webhook_rejected status=400 remote=%s: not an Update", request.remote
            )
            return web.Response(status=400, text="not an Update")
        if await self._hand_over(update):
            return web.Response(status=200)
        return web.Response(status=500, text="not taken; retry")

    async def _hand_over(self, update: dict[str, Any]) -> bool:
        """Give one update to the pipeline. True once it is taken (claimed or decided),
        False if it must be delivered again."""
        core, identity = self._core, self.identity
        if core is None or identity is None:
            return False
        try:
            press = "callback_query" in update
            msg = (
                parse_press(update, identity)
                if press
                else parse_update(update, identity, handle_edited=self.settings.handle_edited)
            )
        except Exception as exc:  # a payload we cannot read would block the queue forever
            log.warning(
                "telegram.unreadable_update update_id=%s ignored: %s",
                update.get("update_id"),
                type(exc).__name__,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
            return True
        if press:
            return await self._take_press(core, msg, update)
        if msg is None:
            return True
        msg = await self._with_files(msg)
        return await hand_over(core, msg, self._tasks)

    async def _take_press(
        self, core: Core, msg: IncomingMessage | None, update: dict[str, Any]
    ) -> bool:
        """A button press: its command goes to the pipeline as the presser's message;
        once taken, the press is acknowledged (answerCallbackQuery)."""
        if msg is not None and not await hand_over(core, msg, self._tasks):
            return False
        query_id = str((update.get("callback_query") or {}).get("id", ""))
        if query_id:
            try:
                await self.transport.answer_callback_query(query_id)
            except AdapterError as exc:  # e.g. "query is too old" on a redelivery
                log.warning("telegram.press_not_answered query=%s: %s", query_id, exc)
        return True

    # -- files ---------------------------------------------------------------

    async def _with_files(self, msg: IncomingMessage) -> IncomingMessage:
        """Download what the agent may read (only for messages it will see)."""
        if not msg.attachments or not (msg.addressed or not self.settings.require_mention):
            return msg
        files = [await self._fetch(a) for a in msg.attachments]
        return replace(msg, attachments=tuple(files))

    async def _fetch(self, attachment: Attachment) -> Attachment:
        limit = self.settings.max_file_bytes
        if attachment.kind not in ("image", "document", "audio"):  # voice notes: transcribed
            return replace(attachment, problem=_UNSUPPORTED[attachment.kind])
        if attachment.size is not None and attachment.size > limit:
            return replace(attachment, problem=_too_large(attachment.size, limit))
        try:
            data = await self.transport.download(attachment.file_id, limit)
        except FileTooLarge as exc:
            return replace(attachment, problem=_too_large(exc.size, limit))
        except AdapterError as exc:
            log.warning("telegram.download_failed file=%s: %s", attachment.name, exc)
            return replace(attachment, problem="downloading it from Telegram failed")
        return replace(attachment, data=data, size=len(data))


def _keyboard(buttons: Sequence[Button]) -> tuple[tuple[str, str], ...]:
    """Inline keyboard buttons (label, callback_data): none at all when one command
    is too long for `callback_data` (the reply's text says how to type it)."""
    keyboard = tuple((b.label, b.command) for b in buttons)
    too_long = [c for _, c in keyboard if len(c.encode()) > MAX_CALLBACK_DATA]
    if too_long:
        log.warning(
            "telegram.buttons_dropped: a command is over %d bytes of callback_data",
            MAX_CALLBACK_DATA,
        )
        return ()
    return keyboard


def _too_large(size: int, limit: int) -> str:
    return f"it is too large ({_size(size)}; the limit is {_size(limit)})"


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / 1_048_576:.1f} MB"
