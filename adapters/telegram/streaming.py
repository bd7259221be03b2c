"""A reply shown on Telegram while the model writes it (`bot.ports.LiveMessage`).

- Private chats: `sendMessageDraft` shows the part being written as the message
  the bot is typing (an ephemeral preview; the reply itself is the final
  `sendMessage`, so `drafts()` stays empty). Past 4,096 characters the parts
  before the one being written are posted as messages (then edited when they
  change); the final `send` edits those and posts the rest. A server that
  refuses drafts (an older Bot API) gets the group behaviour instead.
- Groups and topics: `sendMessage` once there is some text (a reply to the
  message that triggered the run, in its topic), then `editMessageText` of that
  message when its part changed (the same text is not sent again; "message is
  not modified" counts as done); past 4,096 characters the next part starts a
  new message. `drafts()` lists those messages for the final `send`.

Text is rendered and split exactly as `send` does (`render.render`). Each update
makes one attempt per call: a 429 blocks the chat in the shared `Sender` (the
final reply waits the flood wait out there) and raises `RateLimited`; the core
pauses the updates. Calls take their turn in the `Sender`'s per-chat and global
limits, so streamed edits and replies never exceed Telegram's rates together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from adapters.telegram.delivery import Clock, Sender
from adapters.telegram.render import render, to_plain_text
from adapters.telegram.transport import BadRequest, RateLimited, TelegramApiError, Transport
from bot.types import Target

log = logging.getLogger("switchboard.telegram.streaming")

DRAFT_REFRESH_SECONDS = 20.0
"""Telegram shows a draft for about 30 s: one that did not change for this long
is sent again (by a task of its own: the core updates only on changes), so the
draft does not vanish while a tool runs."""
MAX_REFRESHES = 45
"""A draft is kept up for at most this many refreshes (15 minutes)."""


def is_private(target: Target) -> bool:
    """Private chats have the user's (positive) id; groups and channels are negative."""
    return target.channel_id.lstrip().isdigit()


class TelegramLiveMessage:
    """One reply's live view in one chat (see the module docstring)."""

    def __init__(
        self,
        transport: Transport,
        sender: Sender,
        clock: Clock,
        target: Target,
        *,
        refresh_seconds: float = DRAFT_REFRESH_SECONDS,
    ) -> None:
        self._transport = transport
        self._sender = sender
        self._clock = clock
        self._target = target
        self._chat = target.channel_id
        self._draft_id: int | None = secrets.randbelow(2**30) + 1 if is_private(target) else None
        """Non-zero while drafts are used; part i's draft is `_draft_id + i`."""
        self._posted: list[str] = []
        """Message ids of the parts posted so far, in order."""
        self._shown: list[str] = []
        """The HTML each posted message shows."""
        self._draft: tuple[int, str] | None = None
        """(draft_id, HTML) of the draft shown last."""
        self._draft_sends = 0
        self._refresh_seconds = refresh_seconds
        self._refresher: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        """One call sequence at a time: the core's updates and the draft refresher."""
        self._closed = False

    def drafts(self) -> tuple[str, ...]:
        return tuple(self._posted)

    async def update(self, text: str) -> None:
        async with self._lock:
            await self._update(text)

    async def _update(self, text: str) -> None:
        chunks = render(text)
        if not chunks:
            return
        if self._draft_id is None:
            for index, chunk in enumerate(chunks):
                await self._show(index, chunk)
            return
        for index, chunk in enumerate(chunks[:-1]):
            await self._show(index, chunk)
        if not await self._show_draft(len(chunks) - 1, chunks[-1]):
            await self._show(len(chunks) - 1, chunks[-1])

    async def close(self) -> None:
        """Stop refreshing the draft. Posted parts stay for `send` to edit; a draft
        ends with the reply's sendMessage (or expires)."""
        self._closed = True
        refresher, self._refresher = self._refresher, None
        if refresher is not None:
            refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresher

    async def discard(self) -> None:
        """Delete the posted parts (a draft cannot be withdrawn; it expires)."""
        await self.close()
        posted, self._posted, self._shown = self._posted, [], []
        for message_id in posted:
            try:
                await self._sender.delete(self._chat, message_id)
            except Exception:  # must not raise
                log.exception("telegram.discard_failed chat=%s", self._chat)

    # -- calls ---------------------------------------------------------------------

    async def _show(self, index: int, chunk: str) -> None:
        """Part `index` shows `chunk`: posted if it is new, edited if it changed."""
        if index < len(self._posted):
            if self._shown[index] == chunk:
                return
            message_id = await self._edit(self._posted[index], chunk)
            self._posted[index], self._shown[index] = message_id, chunk
            return
        reply_to = self._target.reply_to_message_id if index == 0 else None
        html = True
        while True:
            await self._turn()
            try:
                with self._flood_wait():
                    message_id = await self._transport.send_message(
                        self._chat,
                        chunk if html else to_plain_text(chunk),
                        html=html,
                        thread_id=self._target.thread_id,
                        reply_to=reply_to,
                    )
                break
            except BadRequest as exc:
                if not (html and exc.cannot_parse_entities):
                    raise
                html = False
        self._posted.append(message_id)
        self._shown.append(chunk)

    async def _edit(self, message_id: str, chunk: str) -> str:
        html = True
        while True:
            await self._turn()
            try:
                with self._flood_wait():
                    await self._transport.edit_message_text(
                        self._chat, message_id, chunk if html else to_plain_text(chunk), html=html
                    )
                return message_id
            except BadRequest as exc:
                if exc.not_modified:
                    return message_id
                if not (html and exc.cannot_parse_entities):
                    raise
                html = False

    async def _show_draft(self, index: int, chunk: str) -> bool:
        """Part `index` as the draft; False when the server refuses drafts (the
        stream goes on with posted messages)."""
        assert self._draft_id is not None
        draft_id = self._draft_id + index
        if self._draft == (draft_id, chunk):
            return True
        html = True
        while True:
            await self._turn()
            try:
                with self._flood_wait():
                    await self._transport.send_message_draft(
                        self._chat,
                        draft_id,
                        chunk if html else to_plain_text(chunk),
                        html=html,
                        thread_id=self._target.thread_id,
                    )
                break
            except BadRequest as exc:
                if html and exc.cannot_parse_entities:
                    html = False
                    continue
                return self._no_drafts(exc)
            except TelegramApiError as exc:
                return self._no_drafts(exc)
        self._draft = (draft_id, chunk)
        self._draft_sends += 1
        if self._refresher is None and not self._closed:
            self._refresher = asyncio.create_task(self._refresh(), name="telegram-draft-refresh")
        return True

    async def _refresh(self) -> None:
        """Send the draft again whenever it stayed the same for `refresh_seconds`."""
        seen = self._draft_sends
        for _ in range(MAX_REFRESHES):
            await asyncio.sleep(self._refresh_seconds)
            async with self._lock:
                if self._closed or self._draft is None or self._draft_id is None:
                    return
                if self._draft_sends != seen:  # updated meanwhile: still fresh
                    seen = self._draft_sends
                    continue
                draft_id, chunk = self._draft
                self._draft = None
                try:
                    await self._show_draft(draft_id - self._draft_id, chunk)
                except RateLimited:  # the flood wait is in the sender; try again later
                    self._draft = (draft_id, chunk)
                except Exception as exc:  # a later update or the final reply will do
                    self._draft = (draft_id, chunk)
                    log.warning("telegram.draft_refresh_failed chat=%s: %s", self._chat, exc)
                seen = self._draft_sends

    def _no_drafts(self, exc: Exception) -> bool:
        log.warning(
            "telegram.drafts_refused chat=%s: %s; streaming by posting and editing instead",
            self._chat,
            exc,
        )
        self._draft_id = None
        return False

    async def _turn(self) -> None:
        """Wait for this chat's turn, unless a flood wait holds it: then the core
        should pause (RateLimited), not this update."""
        left = self._sender.blocked_for(self._chat)
        if left > 0:
            raise RateLimited(f"chat {self._chat}: flood wait ({left:g} s left)", left)
        await self._sender.wait_turn(self._chat)

    @contextmanager
    def _flood_wait(self) -> Iterator[None]:
        """A 429 blocks the chat in the shared sender (so the final reply waits it
        out) on its way to the core."""
        try:
            yield
        except RateLimited as exc:
            log.warning(
                "telegram.stream_flood_wait chat=%s retry_after=%ss", self._chat, exc.retry_after
            )
            self._sender.block(self._chat, exc.retry_after)
            raise
