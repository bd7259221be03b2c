"""`chat.postMessage` (and the edits of streamed drafts, `chat.update`) with
Slack's rate limits honoured per channel.

Slack limits posting to about one message per second per channel and answers
429 with `Retry-After`. Sends to one channel are serialized (so the parts of a
long reply stay in order) and a 429 makes only that channel wait: every other
channel keeps going. A part that still cannot be posted after `attempts`
tries, or whose wait would exceed `max_wait`, raises `DeliveryFailed` (the
pipeline records it). Errors Slack reports with `ok: false` (channel_not_found,
not_in_channel, ...) are final and fail at once; 5xx answers and connection
errors are retried with a short backoff.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.errors import DeliveryFailed
from bot.ports import SendProgress

log = logging.getLogger("switchboard.slack.delivery")

Sleep = Callable[[float], Awaitable[Any]]

DEFAULT_RETRY_AFTER_S = 1.0
UNCHANGEABLE = frozenset(
    {"message_not_found", "cant_update_message", "cant_delete_message", "edit_window_closed"}
)
"""Answers to an edit or delete that no retry can fix: the message is gone or
no longer ours to change."""
BACKOFF_S = (1.0, 2.0, 4.0, 8.0)


class Refused(DeliveryFailed):
    """Slack answered a call with an error (other than a 429)."""

    def __init__(self, method: str, error: str) -> None:
        super().__init__(f"{method} failed: {error}")
        self.error = error


class Unchangeable(Refused):
    """The message cannot be edited or deleted (see `UNCHANGEABLE`)."""


class Poster:
    def __init__(
        self,
        client: AsyncWebClient,
        *,
        sleep: Sleep = asyncio.sleep,
        attempts: int = 5,
        max_wait: float = 120.0,
    ) -> None:
        self._client = client
        self._sleep = sleep
        self._attempts = attempts
        self._max_wait = max_wait
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._me: str | None = None

    async def post(
        self,
        channel: str,
        chunks: Sequence[str],
        thread_ts: str | None,
        progress: SendProgress | None = None,
        last_blocks: Sequence[dict[str, Any]] | None = None,
        drafts: Sequence[str] = (),
    ) -> list[str]:
        """Post the parts in order, after those `progress` says are done, the last
        one with `last_blocks` (its buttons); returns the `ts` values of all parts.
        Part i with a draft (`drafts[i]`, a message that showed the reply while it
        was written) is edited into that message instead (an edit is idempotent,
        so a resumed send simply edits again); drafts left over are deleted."""
        sent: list[str] = list(progress.done) if progress else []
        async with self._lock(channel):
            for number, chunk in enumerate(chunks, 1):
                if number <= len(sent):
                    continue
                try:
                    blocks = last_blocks if number == len(chunks) else None
                    if number <= len(drafts):
                        ts = await self._edit(channel, drafts[number - 1], chunk, thread_ts, blocks)
                    else:
                        found = None
                        if progress is not None and progress.resumed and number == len(sent) + 1:
                            found = await self._find_posted(
                                channel, chunk, thread_ts, progress.since
                            )
                        ts = found or await self._post_one(channel, chunk, thread_ts, blocks)
                    sent.append(ts)
                    if progress is not None:
                        await progress.sent(number - 1, sent[-1], last=number == len(chunks))
                except DeliveryFailed as exc:
                    where = f"part {number} of {len(chunks)}" if len(chunks) > 1 else "message"
                    raise DeliveryFailed(f"{exc} ({where}; {len(sent)} sent)") from None
            for ts in drafts[len(chunks) :]:
                await self.delete(channel, ts)
        return sent

    async def delete(self, channel: str, ts: str) -> None:
        """Delete one of our messages; one already gone, or that cannot be
        deleted, is only logged."""
        try:
            await self._call(
                channel, "chat.delete", lambda: self._client.chat_delete(channel=channel, ts=ts)
            )
        except DeliveryFailed as exc:
            log.warning("slack.delete_failed channel=%s ts=%s: %s", channel, ts, exc)

    async def _find_posted(
        self, channel: str, text: str, thread_ts: str | None, since: datetime
    ) -> str | None:
        """The `ts` of a message with this text we posted since `since`, if any: a
        part sent by a process that died before it could record it."""
        oldest = f"{since.timestamp() - 1:.6f}"
        try:
            if thread_ts:
                response = await self._client.conversations_replies(
                    channel=channel, ts=thread_ts, oldest=oldest, limit=100
                )
            else:
                response = await self._client.conversations_history(
                    channel=channel, oldest=oldest, limit=100
                )
        except SlackApiError as exc:
            log.warning("slack.history_unreadable channel=%s: %s", channel, api_error(exc)[1])
            return None
        me = await self._bot_user()
        for message in response.get("messages") or []:
            if message.get("user") == me and message.get("text") == text:
                log.info("slack.part_already_posted channel=%s ts=%s", channel, message.get("ts"))
                return str(message.get("ts"))
        return None

    async def _bot_user(self) -> str:
        if self._me is None:
            self._me = str((await self._client.auth_test()).get("user_id") or "")
        return self._me

    async def _post_one(
        self,
        channel: str,
        text: str,
        thread_ts: str | None,
        blocks: Sequence[dict[str, Any]] | None = None,
    ) -> str:
        response = await self._call(
            channel,
            "chat.postMessage",
            lambda: self._client.chat_postMessage(**message_args(channel, text, thread_ts, blocks)),
        )
        return str(response.get("ts") or "")

    async def _edit(
        self,
        channel: str,
        ts: str,
        text: str,
        thread_ts: str | None,
        blocks: Sequence[dict[str, Any]] | None,
    ) -> str:
        """Edit draft `ts` into this part (`blocks=[]` removes a streamed
        message's own blocks); a draft that is gone or can no longer be edited
        is replaced by a new message. A draft still streaming (its process died
        before `chat.stopStream`) is stopped, then edited."""

        async def edit() -> None:
            await self._call(
                channel,
                "chat.update",
                lambda: self._client.chat_update(
                    channel=channel, ts=ts, text=text, blocks=list(blocks or [])
                ),
            )

        try:
            try:
                await edit()
            except Unchangeable:
                raise
            except Refused:
                if not await self._stopped(channel, ts):
                    raise
                await edit()
            return ts
        except Unchangeable as exc:
            log.warning("slack.draft_lost channel=%s ts=%s: %s; posting it anew", channel, ts, exc)
            return await self._post_one(channel, text, thread_ts, blocks)

    async def _stopped(self, channel: str, ts: str) -> bool:
        """Whether `ts` was a native stream still open, now stopped."""
        try:
            await self._call(
                channel,
                "chat.stopStream",
                lambda: self._client.chat_stopStream(channel=channel, ts=ts),
            )
        except DeliveryFailed:
            return False
        log.info("slack.stream_left_open channel=%s ts=%s: stopped", channel, ts)
        return True

    async def _call(
        self, channel: str, method: str, call: Callable[[], Awaitable[AsyncSlackResponse]]
    ) -> AsyncSlackResponse:
        """One Web API call, waiting out 429s and retrying 5xx/connection errors."""
        attempt = 0
        while True:
            attempt += 1
            last = attempt >= self._attempts
            try:
                return await call()
            except SlackApiError as exc:
                status, error = api_error(exc)
                if status == 429 or error == "ratelimited":
                    wait = retry_after(getattr(exc.response, "headers", None))
                    if last or wait > self._max_wait:
                        raise DeliveryFailed(
                            f"{method} rate limited (Retry-After {wait:g}s) "
                            f"after {attempt} attempt(s)"
                        ) from None
                    log.warning(
                        "slack.rate_limited channel=%s method=%s retry_after=%ss attempt=%d",
                        channel,
                        method,
                        wait,
                        attempt,
                    )
                    await self._sleep(wait)
                    continue
                if status >= 500 and not last:
                    await self._backoff(channel, attempt, f"HTTP {status}")
                    continue
                failure = Unchangeable if error in UNCHANGEABLE else Refused
                raise failure(method, error or f"HTTP {status}") from None
            except (aiohttp.ClientError, TimeoutError) as exc:
                if last:
                    raise DeliveryFailed(
                        f"{method} failed: {type(exc).__name__} after {attempt} attempts"
                    ) from None
                await self._backoff(channel, attempt, type(exc).__name__)

    async def _backoff(self, channel: str, attempt: int, reason: str) -> None:
        delay = BACKOFF_S[min(attempt, len(BACKOFF_S)) - 1]
        log.warning("slack.post_retry channel=%s reason=%s retry_in=%ss", channel, reason, delay)
        await self._sleep(delay)

    def _lock(self, channel: str) -> asyncio.Lock:
        lock = self._locks.get(channel)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[channel] = lock
        return lock


def message_args(
    channel: str, text: str, thread_ts: str | None, blocks: Sequence[dict[str, Any]] | None
) -> dict[str, Any]:
    """`chat.postMessage` arguments for one part of a reply."""
    return {
        "channel": channel,
        "text": text,
        "blocks": blocks,
        "thread_ts": thread_ts,
        "mrkdwn": True,
        "unfurl_links": False,
        "unfurl_media": False,
    }


def api_error(exc: SlackApiError) -> tuple[int, str | None]:
    """HTTP status and Slack's `error` code of a failed call."""
    response = exc.response
    status = getattr(response, "status_code", None) or getattr(response, "status", None)
    data = getattr(response, "data", None)
    error = data.get("error") if isinstance(data, dict) else None
    return int(status or 0), str(error) if error else None


def retry_after(headers: Mapping[str, Any] | None) -> float:
    """Seconds from a `Retry-After` header (any case); 1 s when absent or odd."""
    for key, value in (headers or {}).items():
        if key.lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except (TypeError, ValueError):
                break
    return DEFAULT_RETRY_AFTER_S
