"""Slack replies shown while the model writes them (`bot.ports.LiveMessage`).

Native streaming where Slack allows it: a reply in a thread (or a DM thread)
whose asker we know. `chat.startStream` opens the message with the first text,
`chat.appendStream` adds each DELTA (what was streamed is kept, so only the new
end is sent), and `chat.stopStream` ends it. Slack renders the streamed
`markdown_text` itself; the final `send` edits the message into the usual
mrkdwn rendering (`Reply.drafts`). Slack requires the recipient (user and
team) to stream; the asker of each conversation is remembered from its last
message (`Streams.asked`), so a reply whose asker this process did not see
(another instance took the event) is shown the other way.

The other way, everywhere else and whenever native streaming cannot go on
(the new text does not extend what was streamed, e.g. the next model call
after a tool, or an activity line replaced; the text outgrows one message;
Slack refused or ended the stream): `chat.postMessage` once there is text, then
`chat.update` of each part with `render`'s chunks, exactly as `send` renders
them, continuing in a new message past 4,000 characters. A native stream that
is taken over is stopped first and its message becomes the first part.

The core throttles: `update` makes the calls the new text needs and returns.
A 429 raises `bot.errors.RateLimited` (nothing is lost: the next update sends
what is still missing); Slack's other refusals raise `DeliveryFailed`, which
ends the live view. `close` and `discard` never raise.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.slack.delivery import Refused, Sleep, api_error, message_args, retry_after
from adapters.slack.render import render, stream_safe
from bot.errors import DeliveryFailed, RateLimited
from bot.types import IncomingMessage, Target

log = logging.getLogger("switchboard.slack.streaming")

NATIVE_LIMIT = 12_000
"""Slack's limit on `markdown_text` in one call."""
MAX_ASKERS = 10_000
CLOSE_WAIT_S = 3.0
"""How long `close` waits out a 429 on `chat.stopStream` before trying once more."""
STREAM_OVER = frozenset({"message_not_in_streaming_state", "stopped_by_user", "message_not_found"})
"""Answers that mean the stream is gone (expired after ~5 minutes, stopped)."""
NOT_ABOUT_STREAMING = frozenset(
    {"not_in_channel", "channel_not_found", "is_archived", "internal_error", "fatal_error"}
)
"""Refusals of `chat.startStream` that say nothing about streaming in that
channel (any other one, e.g. `channel_type_not_supported`, and the channel
gets posts and edits from then on)."""


class Streams:
    """Opens live messages for the adapter; remembers who asked where (the
    recipient Slack needs) and the channels that refused native streaming."""

    def __init__(self, client: AsyncWebClient, *, sleep: Sleep = asyncio.sleep) -> None:
        self._client = client
        self._sleep = sleep
        self._askers: OrderedDict[tuple[str, str | None], tuple[str, str | None]] = OrderedDict()
        self._refused: set[str] = set()
        self.team_id: str | None = None

    def asked(self, msg: IncomingMessage) -> None:
        """`msg` was handed to the pipeline: its reply streams to its author."""
        key = (msg.platform_channel_id, msg.platform_thread_id)
        self._askers[key] = (msg.platform_user_id, msg.platform_server_id)
        self._askers.move_to_end(key)
        while len(self._askers) > MAX_ASKERS:
            self._askers.popitem(last=False)

    def open(self, target: Target) -> SlackLiveMessage:
        thread = target.thread_id or target.reply_to_message_id
        recipient = None
        asker = self._askers.get((target.channel_id, target.thread_id))
        if thread and asker is not None and target.channel_id not in self._refused:
            user, team = asker
            team = team or target.server_id or self.team_id
            recipient = (user, team) if team else None
        return SlackLiveMessage(
            self._client, target.channel_id, thread, recipient, self._refuse, self._sleep
        )

    def _refuse(self, channel: str) -> None:
        self._refused.add(channel)


class SlackLiveMessage:
    def __init__(
        self,
        client: AsyncWebClient,
        channel: str,
        thread_ts: str | None,
        recipient: tuple[str, str] | None,
        refused: Callable[[str], None],
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._sleep = sleep
        self._client = client
        self._channel = channel
        self._thread = thread_ts
        self._recipient = recipient
        self._refused = refused
        self._native = recipient is not None and thread_ts is not None
        self._stream_ts: str | None = None
        """The native stream's message while it is open."""
        self._streamed = ""
        """The markdown appended to it so far."""
        self._posted: list[str] = []
        self._shown: list[str | None] = []
        """What each posted message shows (None: not one of our renderings)."""
        self._closed = False

    @property
    def native(self) -> bool:
        """Still streaming natively (or about to)."""
        return self._native

    def drafts(self) -> tuple[str, ...]:
        return tuple(self._posted)

    async def update(self, text: str) -> None:
        if self._closed or not text.strip():
            return
        if self._native and await self._stream(text):
            return
        await self._edit(render(text))

    async def close(self) -> None:
        self._closed = True
        for attempt in (1, 2):
            try:
                await self._stop()
                return
            except RateLimited as exc:
                if attempt == 1:
                    await self._sleep(min(exc.retry_after, CLOSE_WAIT_S))
                    continue
                log.warning("slack.stream_stop_failed channel=%s: %s", self._channel, exc)
            except Exception as exc:  # the final edit goes out all the same
                log.warning("slack.stream_stop_failed channel=%s: %s", self._channel, exc)
                return

    async def discard(self) -> None:
        await self.close()
        for ts in reversed(self._posted):
            try:
                await self._once(
                    "chat.delete", partial(self._client.chat_delete, channel=self._channel, ts=ts)
                )
            except Exception as exc:
                log.warning(
                    "slack.draft_delete_failed channel=%s ts=%s: %s", self._channel, ts, exc
                )
        self._posted.clear()
        self._shown.clear()

    # -- native ---------------------------------------------------------------------

    async def _stream(self, text: str) -> bool:
        """Append what `text` adds to the native stream; False when it cannot
        be streamed (the stream is then stopped and edits take over)."""
        markdown = stream_safe(text)
        fits = len(markdown) <= NATIVE_LIMIT and len(render(text)) <= 1
        if fits and markdown.startswith(self._streamed):
            delta = markdown[len(self._streamed) :]
            if not delta:
                return True
            try:
                if self._stream_ts is None:
                    await self._start(delta)
                else:
                    await self._append(delta)
            except DeliveryFailed as exc:
                log.info("slack.stream_fallback channel=%s: %s", self._channel, exc)
            else:
                self._streamed = markdown
                return True
        await self._stop()
        self._native = False
        return False

    async def _start(self, delta: str) -> None:
        assert self._thread is not None and self._recipient is not None
        user, team = self._recipient
        try:
            response = await self._once(
                "chat.startStream",
                partial(
                    self._client.chat_startStream,
                    channel=self._channel,
                    thread_ts=self._thread,
                    markdown_text=delta,
                    recipient_user_id=user,
                    recipient_team_id=team,
                ),
            )
        except Refused as exc:
            if exc.error not in NOT_ABOUT_STREAMING:
                self._refused(self._channel)  # not asked again for this channel
            raise
        self._stream_ts = str(response.get("ts") or "")
        self._posted, self._shown = [self._stream_ts], [None]

    async def _append(self, delta: str) -> None:
        ts = self._stream_ts
        assert ts is not None
        try:
            await self._once(
                "chat.appendStream",
                partial(
                    self._client.chat_appendStream,
                    channel=self._channel,
                    ts=ts,
                    markdown_text=delta,
                ),
            )
        except Refused as exc:
            if exc.error in STREAM_OVER:
                self._stream_ts = None  # over on Slack's side: nothing to stop
            raise

    async def _stop(self) -> None:
        ts = self._stream_ts
        if ts is None:
            return
        try:
            await self._once(
                "chat.stopStream",
                partial(self._client.chat_stopStream, channel=self._channel, ts=ts),
            )
        except DeliveryFailed as exc:  # already over: edits work on it all the same
            log.info("slack.stream_stop channel=%s ts=%s: %s", self._channel, ts, exc)
        self._stream_ts = None

    # -- posts and edits --------------------------------------------------------------

    async def _edit(self, chunks: list[str]) -> None:
        for index, chunk in enumerate(chunks):
            if index < len(self._posted):
                if self._shown[index] != chunk:
                    edit = partial(
                        self._client.chat_update,
                        channel=self._channel,
                        ts=self._posted[index],
                        text=chunk,
                        blocks=[],  # a streamed message's own blocks go
                    )
                    await self._once("chat.update", edit)
                    self._shown[index] = chunk
                continue
            args = message_args(self._channel, chunk, self._thread, None)
            response = await self._once(
                "chat.postMessage", partial(self._client.chat_postMessage, **args)
            )
            self._posted.append(str(response.get("ts") or ""))
            self._shown.append(chunk)
        while len(self._posted) > max(len(chunks), 1):  # the text got shorter
            drop = partial(self._client.chat_delete, channel=self._channel, ts=self._posted[-1])
            await self._once("chat.delete", drop)
            self._posted.pop()
            self._shown.pop()

    async def _once(
        self, method: str, call: Callable[[], Awaitable[AsyncSlackResponse]]
    ) -> AsyncSlackResponse:
        """One call: a 429 raises `RateLimited`, other failures `DeliveryFailed`."""
        try:
            return await call()
        except SlackApiError as exc:
            status, error = api_error(exc)
            headers: Any = getattr(exc.response, "headers", None)
            if status == 429 or error == "ratelimited":
                wait = retry_after(headers)
                raise RateLimited(f"{method} rate limited (Retry-After {wait:g}s)", wait) from None
            raise Refused(method, error or f"HTTP {status}") from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DeliveryFailed(f"{method} failed: {type(exc).__name__}") from None
