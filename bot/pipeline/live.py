"""Streamed replies: a run's text shown on its platform while the model writes.

`LiveReply` follows one run's events (`bot.agent.events`, handed to it as they
are published) through a `RunView`
(so nothing that must stay hidden is ever shown: a possible `NO_REPLY`,
reasoning, text-form tool calls) and updates the adapter's `LiveMessage` at
most once per interval, one update at a time. A `RateLimited` answer pauses
the updates for as long as the platform asks; any other failure ends the live
view (the run and its final reply go on). When the run is over, `finish` stops
the updates and closes the live message; the final reply is then stored and
sent as always, carrying the drafts to edit (`Reply.drafts`), so what the
user ends with is exactly the non-streamed reply.

While the run waits for its message's slot (`bot.pipeline.admission`: the
model answered, but the service is busy), no update goes out: the run stands
still, and under a burst the final reply would follow the draft closely, so
the update would only add a platform call (CPU the busy service lacks) for
the same text. What was held back is shown with the run's next step (a tool
it goes on to, say); a run that just ends sends its reply whole. A live view
waiting so costs nothing: no task of its own wakes until its run goes on
(under sustained overload, thousands of runs may wait so).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from bot.agent.events import Event, EventBus, Subscription
from bot.agent.streaming import RunView
from bot.config import StreamingSettings
from bot.errors import RateLimited
from bot.pipeline.admission import current_slot
from bot.ports import LiveMessage
from bot.types import IncomingMessage, Outcome, Reply, Target

log = logging.getLogger("switchboard.streaming")

MAX_PAUSE_S = 30.0
"""A rate limit asking for a longer pause ends the updates of this reply."""
LAST_UPDATE_WAIT_S = 10.0
"""How long `finish` lets an update already on its way complete."""
STOPPED_MARK = "_(stopped)_"
INTERRUPTED_NOTE = "_(This answer was interrupted; it is being written again.)_"
"""What the messages of a run that died while streaming end as."""


class LiveReply:
    def __init__(
        self,
        message: LiveMessage,
        bus: EventBus,
        run_id: str,
        conversation_key: str,
        *,
        platform: str,
        interval: float,
        on_drafts: Callable[[tuple[str, ...]], Awaitable[None]] | None = None,
    ) -> None:
        self.message = message
        self.platform = platform
        self.run_id = run_id
        self.interval = interval
        self.view = RunView()
        self.shown = ""
        """The text (without the activity line) of the last update that went out."""
        self.updates = 0
        self._on_drafts = on_drafts
        self._recorded: tuple[str, ...] = ()
        self._last_activity: str | None = None
        self._waited = False
        self._changed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._slot = current_slot.get()
        """The slot of the message answered (None outside the pipeline)."""
        self._subscription: Subscription = bus.subscribe(
            conversation_key=conversation_key, sink=self._observe
        )
        self._writer = asyncio.create_task(self._write(), name=f"live-write:{run_id}")

    @property
    def text(self) -> str:
        """The safe text of the reply so far (what a stopped reply keeps)."""
        return self.view.text

    async def finish(self) -> tuple[str, ...]:
        """Stop updating, close the live message and return its drafts."""
        self._subscription.close()
        self._stopping.set()
        self._changed.set()
        done, _ = await asyncio.wait({self._writer}, timeout=LAST_UPDATE_WAIT_S)
        if not done:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        with contextlib.suppress(Exception):
            await self.message.close()
        return tuple(self.message.drafts())

    async def discard(self) -> None:
        """The run shows nothing after all: remove what was posted."""
        with contextlib.suppress(Exception):
            await self.message.discard()

    async def cancel(self) -> None:
        """The run was abandoned (shutdown): stop and remove what was shown; the
        message is answered again by whoever takes it over."""
        await self.finish()
        await self.discard()

    def _observe(self, event: Event) -> None:
        if event.run_id == self.run_id:
            self.view.observe(event)
            self._changed.set()

    async def _write(self) -> None:
        try:
            while not self._stopping.is_set():
                await self._changed.wait()
                self._changed.clear()
                if self._stopping.is_set():
                    return
                text = self.view.text or self.shown
                if not text:
                    continue  # nothing safe to show yet: the typing indicator goes on
                if not self._waited:  # a reply done within an interval is sent whole
                    self._waited = True
                    await self._sleep(self.interval)
                    self._changed.set()
                    continue
                if self._slot is not None and self._slot.queued:
                    continue  # the run stands still: nothing to show until it goes on
                activity = self.view.activity  # as shown: it may change during the update
                shown = _with_activity(text, activity)
                if shown == _with_activity(self.shown, self._last_activity):
                    continue
                pause = await self._update(shown)
                if pause is None:
                    return
                if pause:  # rate limited: this text did not go out; try it again
                    self._changed.set()
                else:
                    self.shown, self._last_activity = text, activity
                await self._sleep(max(pause, self.interval))
        except asyncio.CancelledError:
            raise
        except Exception:  # the live view is cosmetic: never fail a run over it
            log.exception("stream.failed platform=%s run=%s", self.platform, self.run_id)

    async def _update(self, text: str) -> float | None:
        """Send one update; the pause before the next, or None to stop updating."""
        try:
            await self.message.update(text)
        except RateLimited as exc:
            if exc.retry_after > MAX_PAUSE_S:
                log.warning(
                    "stream.rate_limited platform=%s run=%s retry_after=%.1f: updates stop",
                    self.platform,
                    self.run_id,
                    exc.retry_after,
                )
                return None
            log.info(
                "stream.rate_limited platform=%s run=%s retry_after=%.1f",
                self.platform,
                self.run_id,
                exc.retry_after,
            )
            return max(exc.retry_after, 0.001)
        except Exception as exc:
            log.warning(
                "stream.update_failed platform=%s run=%s: %s: %s (the final reply still goes out)",
                self.platform,
                self.run_id,
                type(exc).__name__,
                exc,
            )
            return None
        self.updates += 1
        await self._record_drafts()
        return 0.0

    async def _record_drafts(self) -> None:
        drafts = tuple(self.message.drafts())
        if self._on_drafts is None or drafts == self._recorded:
            return
        try:
            await self._on_drafts(drafts)
            self._recorded = drafts
        except Exception as exc:
            log.warning("stream.drafts_not_recorded run=%s: %s", self.run_id, exc)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stopping.wait()


def _with_activity(text: str, activity: str | None) -> str:
    """The reply so far and, while a tool runs, a status line under it."""
    if not text or activity is None or not activity.startswith("using"):
        return text
    return f"{text}\n\n_{activity}…_"


def stopped_text(text: str) -> str:
    """What a reply cut by /stop ends as: its text so far, marked."""
    return f"{text.rstrip()}\n\n{STOPPED_MARK}"


def open_live(
    adapter: object,
    settings: StreamingSettings,
    bus: EventBus,
    first: IncomingMessage,
    run_id: str,
    conversation_key: str,
    on_drafts: Callable[[tuple[str, ...]], Awaitable[None]] | None = None,
) -> LiveReply | None:
    """A live view of the run answering `first`, where its platform streams."""
    platform = first.platform
    # What `isinstance(adapter, bot.ports.Streaming)` asks, without a protocol check's
    # cost on every run (it inspects the protocol's members each time).
    open_stream: Callable[[Target], LiveMessage | None] | None = getattr(
        adapter, "open_stream", None
    )
    if not settings.enabled_for(platform) or not callable(open_stream):
        return None
    try:
        message = open_stream(reply_target(first))
    except Exception:
        log.exception("stream.open_failed platform=%s run=%s", platform, run_id)
        return None
    if message is None:
        return None
    interval = settings.interval_for(platform)
    return LiveReply(
        message,
        bus,
        run_id,
        conversation_key,
        platform=platform,
        interval=interval,
        on_drafts=on_drafts,
    )


async def settle(live: LiveReply, outcome: Outcome, first: IncomingMessage) -> Outcome:
    """End the live view and fit the run's outcome to what it showed: the first
    reply replaces the streamed messages; a stopped run keeps its text so far,
    marked as stopped; a run with nothing to say removes what was shown."""
    drafts = await live.finish()
    shown = bool(drafts) or live.updates > 0
    if outcome.status == "cancelled" and shown and live.text.strip():
        notice = Reply(stopped_text(live.text), reply_target(first), "notice", drafts=drafts)
        return dataclasses.replace(outcome, replies=(notice, *outcome.replies))
    if not outcome.replies:
        if shown:
            await live.discard()
        return outcome
    head, *rest = outcome.replies
    return dataclasses.replace(outcome, replies=(dataclasses.replace(head, drafts=drafts), *rest))


def reply_target(first: IncomingMessage) -> Target:
    """Where the run's reply goes: in a group, as a reply to the message."""
    return first.target(as_reply=first.chat_type == "group")
