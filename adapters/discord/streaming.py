"""Replies shown on Discord while the model writes them: post, then edit.

The first update that has text posts a message (in guilds a reply to the author's
message, as `send` would post the first part); each later update edits the messages
whose rendered text changed, and past 2000 characters continues in a new message
(`render` splits exactly as `send` does). The core calls `update` at most once per
`[streaming] interval_seconds`; when the run is over, `send` edits these messages
(`LiveMessage.drafts`) into the final reply, or `discard` deletes them.

A live update must never hold up the run for long: discord.py waits out a 429 itself
for up to `max_ratelimit_timeout` (at least 30 s when set through its constructor).
Updates therefore go through their own discord.py `HTTPClient` (`StreamRest`, logged
in with the bot token at start) whose limit is set to `UPDATE_MAX_WAIT_S` afterwards:
discord.py then raises `discord.RateLimited` instead of waiting longer, both for a 429
and for a bucket it already knows to be exhausted, and `update` raises
`bot.errors.RateLimited` with Discord's `retry_after` (the core pauses the updates;
the final reply goes out through the adapter's own client, which waits up to
`discord.max_ratelimit_wait`). `discard` also uses the adapter's client: it is the
last word on what stays visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets

import discord
from discord.http import HTTPClient, handle_message_parameters
from discord.utils import MISSING

from adapters.discord.delivery import (
    SEND_ERRORS,
    delete_quietly,
    describe,
    mentions,
    reply_reference,
)
from adapters.discord.render import render
from bot.errors import DeliveryFailed, RateLimited
from bot.types import Target

log = logging.getLogger("switchboard.discord")

UPDATE_MAX_WAIT_S = 1.0
"""The longest a live update waits for Discord's rate limit before giving up."""
DEFAULT_RETRY_AFTER_S = 1.0
"""A 429 without a usable `Retry-After` (e.g. from Cloudflare)."""


class StreamRest:
    """discord.py's REST calls for live messages, with a short rate-limit wait."""

    def __init__(self) -> None:
        self._http: HTTPClient | None = None

    @property
    def ready(self) -> bool:
        return self._http is not None

    async def open(self, token: str) -> None:
        http = HTTPClient(asyncio.get_running_loop())
        http.max_ratelimit_timeout = UPDATE_MAX_WAIT_S  # the constructor allows no less than 30
        try:
            await http.static_login(token)
        except BaseException:
            await http.close()
            raise
        self._http = http

    async def close(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    def _client(self) -> HTTPClient:
        if self._http is None:
            raise DeliveryFailed("the Discord adapter is not running")
        return self._http

    async def post(self, target: Target, index: int, content: str) -> str:
        """Post part `index` of a reply to `target`; returns the message id."""
        reference = reply_reference(target, index)
        params = handle_message_parameters(
            content=content,
            # enforced by Discord: discord.py's own retry after a 5xx posts nothing twice
            nonce=secrets.token_hex(10),
            allowed_mentions=mentions(target, index),
            message_reference=(
                reference.to_message_reference_dict() if reference is not None else MISSING
            ),
        )
        with params:
            data = await self._client().send_message(int(target.channel_id), params=params)
        return str(data["id"])

    async def edit(self, target: Target, index: int, message_id: str, content: str) -> None:
        params = handle_message_parameters(
            content=content, allowed_mentions=mentions(target, index)
        )
        with params:
            await self._client().edit_message(
                int(target.channel_id), int(message_id), params=params
            )

    async def delete(self, target: Target, message_id: str) -> None:
        with contextlib.suppress(discord.NotFound):  # already gone
            await self._client().delete_message(int(target.channel_id), int(message_id))


class LiveDiscordMessage:
    """One reply shown while it is written (`bot.ports.LiveMessage`)."""

    def __init__(
        self, rest: StreamRest, target: Target, channel: discord.PartialMessageable
    ) -> None:
        self._rest = rest
        self._target = target
        self._channel = channel
        self._ids: list[str] = []
        self._shown: list[str] = []
        """What each posted message shows now."""

    async def update(self, text: str) -> None:
        chunks = render(text)
        if not chunks:
            return  # a message cannot be empty: what is shown stays
        try:
            await self._show(chunks)
        except discord.RateLimited as exc:
            raise RateLimited(
                f"Discord rate limit on live updates ({exc.retry_after:.1f}s)", exc.retry_after
            ) from None
        except discord.HTTPException as exc:
            if exc.status != 429:
                raise DeliveryFailed(f"Discord refused a live update: {describe(exc)}") from exc
            retry_after = _retry_after(exc)
            raise RateLimited(
                f"Discord answered 429 to a live update ({retry_after:.1f}s)", retry_after
            ) from None
        except SEND_ERRORS as exc:
            raise DeliveryFailed(f"Discord did not take a live update: {describe(exc)}") from exc

    async def _show(self, chunks: list[str]) -> None:
        """Edit the messages whose text changed, post the parts that are new, delete
        messages beyond the last part (the text got shorter). `_ids`/`_shown` always
        say what Discord shows, whichever call fails."""
        for index, chunk in enumerate(chunks):
            if index >= len(self._ids):
                self._ids.append(await self._rest.post(self._target, index, chunk))
                self._shown.append(chunk)
            elif self._shown[index] != chunk:
                await self._rest.edit(self._target, index, self._ids[index], chunk)
                self._shown[index] = chunk
        while len(self._ids) > len(chunks):
            await self._rest.delete(self._target, self._ids[-1])
            self._ids.pop()
            self._shown.pop()

    def drafts(self) -> tuple[str, ...]:
        return tuple(self._ids)

    async def close(self) -> None:
        """Nothing to end on Discord: the messages stay until `send` edits them."""

    async def discard(self) -> None:
        kept = [m for m in self._ids if not await delete_quietly(self._channel, m)]
        if kept:
            log.warning("discord.discard_incomplete channel=%s left=%s", self._channel.id, kept)
        self._shown = [self._shown[self._ids.index(m)] for m in kept]
        self._ids = kept


def _retry_after(exc: discord.HTTPException) -> float:
    headers = getattr(exc.response, "headers", None) or {}
    try:
        return max(float(headers.get("Retry-After", DEFAULT_RETRY_AFTER_S)), 0.0)
    except (TypeError, ValueError):
        return DEFAULT_RETRY_AFTER_S
