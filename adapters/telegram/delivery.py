"""Sending rendered chunks: per-chat order, rate limits, flood waits and retries.

- The chunks of one reply go out together and in order: one lock per chat.
- At most one message per `chat_interval` seconds in a chat, and at most
  `global_per_second` messages in any one-second window overall (Telegram's limits).
- A 429 `retry_after` blocks *that chat* until it passes (other chats keep going);
  the same chunk is then sent once. A wait longer than `max_flood_wait`
  (`[telegram] max_retry_after_seconds`) is not waited out: the send fails at once.
- Network errors (timeouts, 5xx, connection) are retried with exponential backoff.
- A 400 "can't parse entities" resends that chunk as plain text, once.
- Anything that still fails raises `DeliveryFailed` (the pipeline records it).
- A reply that was streamed (`Reply.drafts`) edits those messages into its parts
  (editMessageText; "message is not modified" is success, a draft deleted
  meanwhile is posted anew), posts further parts, deletes drafts left over.

Time comes from a `Clock`, so tests can run the limits on a controllable clock.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from adapters.telegram.render import to_plain_text
from adapters.telegram.transport import (
    BadRequest,
    NetworkError,
    RateLimited,
    Transport,
)
from bot.errors import AdapterError, DeliveryFailed
from bot.ports import SendProgress
from bot.types import Target

log = logging.getLogger("switchboard.telegram.delivery")


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass(frozen=True, slots=True)
class Limits:
    chat_interval: float = 1.0
    global_per_second: int = 30
    network_attempts: int = 4
    backoff_initial: float = 1.0
    backoff_max: float = 30.0
    max_flood_wait: float = 60.0

    def backoff(self, failures: int) -> float:
        """Seconds to wait after the `failures`-th consecutive failure (1, 2, 4, ...)."""
        return float(min(self.backoff_max, self.backoff_initial * 2 ** max(0, failures - 1)))


class Sender:
    def __init__(self, transport: Transport, clock: Clock, limits: Limits) -> None:
        self._transport = transport
        self._clock = clock
        self._limits = limits
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._last_sent: dict[str, float] = {}
        self._blocked_until: dict[str, float] = {}
        self._window: deque[float] = deque()

    def blocked(self, chat_id: str) -> bool:
        """Whether the chat is in a flood wait (a 429 told us to hold off)."""
        return self._blocked_until.get(chat_id, 0.0) > self._clock.now()

    def block(self, chat_id: str, seconds: float) -> None:
        until = self._clock.now() + seconds
        self._blocked_until[chat_id] = max(until, self._blocked_until.get(chat_id, 0.0))

    def blocked_for(self, chat_id: str) -> float:
        """Seconds left of the chat's flood wait (0 when it may send)."""
        return max(0.0, self._blocked_until.get(chat_id, 0.0) - self._clock.now())

    async def send(
        self,
        target: Target,
        chunks: Sequence[str],
        progress: SendProgress | None = None,
        buttons: Sequence[tuple[str, str]] = (),
        drafts: Sequence[str] = (),
    ) -> list[str]:
        """Send `chunks` (Telegram HTML) in order, after those `progress` says are
        done; the first one as a reply when the target says so, the last one with
        `buttons` (an inline keyboard). Part i of `drafts` (messages that showed the
        reply while it was written) is edited into chunk i instead of posting it;
        drafts left over are deleted. Returns the message ids of all parts."""
        chat = target.channel_id
        lock = self._locks.get(chat)
        if lock is None:
            lock = self._locks[chat] = asyncio.Lock()
        ids: list[str] = list(progress.done) if progress else []
        async with lock:
            for index, chunk in enumerate(chunks):
                if index < len(ids):
                    continue
                reply_to = target.reply_to_message_id if index == 0 else None
                keyboard = buttons if index == len(chunks) - 1 else ()
                post = _Post(self._transport, chat, target.thread_id, reply_to, keyboard)
                call = _Edit(post, drafts[index]) if index < len(drafts) else post
                try:
                    ids.append(await self._deliver(chat, chunk, call))
                    if progress is not None:
                        await progress.sent(index, ids[-1], last=index == len(chunks) - 1)
                except DeliveryFailed as exc:
                    sent = f" after {len(ids)} of {len(chunks)} parts" if ids else ""
                    raise DeliveryFailed(f"{exc}{sent}") from None
            for message_id in drafts[len(chunks) :]:
                await self.delete(chat, message_id)
        self._forget_idle()
        return ids

    async def delete(self, chat: str, message_id: str) -> bool:
        """Delete one of the bot's messages (with the usual flood waits and retries);
        a message already gone counts as deleted. False (logged) when it stays."""
        try:
            await self._deliver(chat, "", _Delete(self._transport, chat, message_id))
        except DeliveryFailed as exc:
            log.warning("telegram.delete_failed chat=%s message=%s: %s", chat, message_id, exc)
            return False
        return True

    async def _deliver(self, chat: str, chunk: str, call: _Call) -> str:
        """One call for one chunk, retried as the rules in the module docstring say."""
        html = True
        failures = 0
        while True:
            await self.wait_turn(chat)
            try:
                return await call(chunk, html)
            except RateLimited as exc:
                if exc.retry_after > self._limits.max_flood_wait:
                    log.warning(
                        "telegram.flood_wait_too_long chat=%s retry_after=%gs "
                        "max_retry_after_seconds=%g: not waiting, the send fails",
                        chat,
                        exc.retry_after,
                        self._limits.max_flood_wait,
                    )
                    raise DeliveryFailed(
                        f"chat {chat}: Telegram asked to wait {exc.retry_after:g} s (429), "
                        f"longer than [telegram] max_retry_after_seconds = "
                        f"{self._limits.max_flood_wait:g}"
                    ) from None
                log.warning("telegram.flood_wait chat=%s retry_after=%ss", chat, exc.retry_after)
                self.block(chat, exc.retry_after)
            except BadRequest as exc:
                if html and exc.cannot_parse_entities:
                    log.warning(
                        "telegram.html_rejected chat=%s: %s; resending as plain text", chat, exc
                    )
                    html, chunk = False, to_plain_text(chunk)
                    continue
                raise DeliveryFailed(f"chat {chat}: {exc}") from None
            except NetworkError as exc:
                failures += 1
                if failures >= self._limits.network_attempts:
                    raise DeliveryFailed(
                        f"chat {chat}: {exc} (gave up after {failures} attempts)"
                    ) from None
                delay = self._limits.backoff(failures)
                log.warning("telegram.send_retry chat=%s in=%ss: %s", chat, delay, exc)
                await self._clock.sleep(delay)
            except AdapterError as exc:
                raise DeliveryFailed(f"chat {chat}: {exc}") from None

    async def wait_turn(self, chat: str) -> None:
        """Sleep until this chat may send (flood wait, per-chat interval), then take a
        place in the global one-second window."""
        while True:
            now = self._clock.now()
            ready = max(
                self._blocked_until.get(chat, 0.0),
                self._last_sent.get(chat, float("-inf")) + self._limits.chat_interval,
            )
            if now < ready:
                await self._clock.sleep(ready - now)
                continue
            window = self._window
            while window and window[0] <= now - 1.0:
                window.popleft()
            if len(window) >= self._limits.global_per_second:
                await self._clock.sleep(window[0] + 1.0 - now)
                continue
            window.append(now)
            self._last_sent[chat] = now
            return

    def _forget_idle(self) -> None:
        """Drop timing state of chats that are past every limit (bounded memory)."""
        if len(self._last_sent) < 10_000:
            return
        now = self._clock.now()
        horizon = now - self._limits.chat_interval
        for chat in [c for c, t in self._last_sent.items() if t < horizon]:
            if self._blocked_until.get(chat, 0.0) <= now:
                self._last_sent.pop(chat, None)
                self._blocked_until.pop(chat, None)


class _Call(Protocol):
    async def __call__(self, chunk: str, html: bool) -> str:
        """Make the call for `chunk` (HTML or plain text); the message id it is in."""
        ...


@dataclass(frozen=True, slots=True)
class _Post:
    transport: Transport
    chat: str
    thread_id: str | None
    reply_to: str | None
    buttons: Sequence[tuple[str, str]]

    async def __call__(self, chunk: str, html: bool) -> str:
        return await self.transport.send_message(
            self.chat,
            chunk,
            html=html,
            thread_id=self.thread_id,
            reply_to=self.reply_to,
            buttons=self.buttons,
        )


@dataclass(frozen=True, slots=True)
class _Edit:
    """Edit a draft into the part; "not modified" is done, a draft someone deleted
    is replaced by a new message."""

    post: _Post
    message_id: str

    async def __call__(self, chunk: str, html: bool) -> str:
        post = self.post
        try:
            await post.transport.edit_message_text(
                post.chat, self.message_id, chunk, html=html, buttons=post.buttons
            )
        except BadRequest as exc:
            if exc.not_modified:
                return self.message_id
            if not exc.message_gone:
                raise
            log.warning(
                "telegram.draft_gone chat=%s message=%s: posting", post.chat, self.message_id
            )
            return await post(chunk, html)
        return self.message_id


@dataclass(frozen=True, slots=True)
class _Delete:
    transport: Transport
    chat: str
    message_id: str

    async def __call__(self, chunk: str, html: bool) -> str:
        try:
            await self.transport.delete_message(self.chat, self.message_id)
        except BadRequest as exc:
            if not exc.message_gone:
                raise
        return self.message_id
