"""In-process publish/subscribe of what runs are doing.

The agent loop and the pipeline publish `Event`s; subscribers (adapters showing
typing indicators or streaming text, tests waiting for a step) read them from a
`Subscription`, an async iterator over a bounded queue, or are handed each event
as it is published (`sink`: a quick, synchronous callback; no queue, no task
to wake). Publishing never blocks and never fails: a subscriber that falls
behind loses its oldest events (the count is kept in `Subscription.dropped`),
so a slow reader cannot stall a run, and a sink that raises is logged and
skipped.

Event types and their `data`:
- ``run.started``: source, model, inputs (number of messages answered)
- ``activity``: kind = "thinking" | "tool_exec" | "compacting"
- ``chunk``: text (a streamed piece of the model's reply; may be discarded later)
- ``tool.call``: tool, id
- ``tool.result``: tool, id, is_error, duration_ms
- ``run.retrying``: reason ("context_window", "max_tokens", "tool", "fallback": the
  call goes on with the next model of its chain, `detail`, whose text replaces
  what was streamed), detail
- ``run.completed``: status ("completed" | "silent"), iterations, tokens
- ``run.failed``: error
- ``run.cancelled``: reason ("stop" | "timeout" | "shutdown")
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self, get_args

from bot.types import utcnow

log = logging.getLogger("switchboard.events")

EventType = Literal[
    "run.started",
    "activity",
    "chunk",
    "tool.call",
    "tool.result",
    "run.retrying",
    "run.completed",
    "run.failed",
    "run.cancelled",
]
EVENT_TYPES: frozenset[str] = frozenset(get_args(EventType))


@dataclass(frozen=True, slots=True)
class Event:
    type: EventType
    run_id: str
    conversation_key: str
    data: Mapping[str, Any] = field(default_factory=dict)
    at: datetime = field(default_factory=utcnow)


class Subscription:
    """Events matching a filter, in publication order. Use as an async context
    manager (unsubscribes on exit) and iterate, or call `next()`."""

    def __init__(
        self,
        bus: EventBus,
        conversation_key: str | None,
        types: Collection[str] | None,
        maxsize: int,
        sink: Callable[[Event], None] | None = None,
    ) -> None:
        self._bus = bus
        self._sink = sink
        self._queue: asyncio.Queue[Event] | None = None if sink else asyncio.Queue(maxsize)
        """None with a sink: the sink is called instead, nothing is kept"""
        self.conversation_key = conversation_key
        self.types = frozenset(types) if types is not None else None
        self.dropped = 0

    def wants(self, event: Event) -> bool:
        if self.conversation_key is not None and event.conversation_key != self.conversation_key:
            return False
        return self.types is None or event.type in self.types

    def offer(self, event: Event) -> None:
        if self._sink is not None:
            try:
                self._sink(event)
            except Exception:
                log.exception("event.sink_failed type=%s run=%s", event.type, event.run_id)
            return
        queue = self._kept()
        if queue.full():
            queue.get_nowait()
            self.dropped += 1
        queue.put_nowait(event)

    def _kept(self) -> asyncio.Queue[Event]:
        if self._queue is None:
            raise TypeError("a subscription with a sink keeps no events to read")
        return self._queue

    async def next(self) -> Event:
        return await self._kept().get()

    def pending(self) -> list[Event]:
        """Events already received and not read yet (consumed by this call)."""
        queue, events = self._kept(), []
        while not queue.empty():
            events.append(queue.get_nowait())
        return events

    def close(self) -> None:
        self._bus.unsubscribe(self)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        queue = self._kept()
        while True:
            yield await queue.get()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class EventBus:
    """Subscriptions kept by conversation: an event costs the subscribers of
    its conversation and those of every conversation, however many others
    listen (a live view per run in progress: thousands under a burst)."""

    def __init__(self) -> None:
        self._by_key: dict[str | None, dict[Subscription, None]] = {}
        self._count = 0

    def subscribe(
        self,
        *,
        conversation_key: str | None = None,
        types: Collection[str] | None = None,
        maxsize: int = 1000,
        sink: Callable[[Event], None] | None = None,
    ) -> Subscription:
        """Events of one conversation (or all), of some types (or all): queued
        for the subscriber to read, or handed to `sink` as they come."""
        if types is not None and (unknown := set(types) - EVENT_TYPES):
            raise ValueError(f"unknown event types: {', '.join(sorted(unknown))}")
        subscription = Subscription(self, conversation_key, types, maxsize, sink)
        self._by_key.setdefault(conversation_key, {})[subscription] = None
        self._count += 1
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        key = subscription.conversation_key
        if (group := self._by_key.get(key)) is not None and subscription in group:
            del group[subscription]
            self._count -= 1
            if not group:
                del self._by_key[key]

    def listening(self, conversation_key: str) -> bool:
        """Whether an event of this conversation would reach anyone."""
        return None in self._by_key or conversation_key in self._by_key

    def publish(self, event: Event) -> None:
        for key in (None, event.conversation_key):
            if (group := self._by_key.get(key)) is not None:
                for subscription in list(group):
                    if subscription.wants(event):
                        subscription.offer(event)

    @property
    def subscribers(self) -> int:
        return self._count


@dataclass(frozen=True, slots=True)
class RunEvents:
    """A publisher bound to one run."""

    bus: EventBus | None
    run_id: str
    conversation_key: str

    def emit(self, type: EventType, **data: Any) -> None:
        if self.bus is None or not self.bus.listening(self.conversation_key):  # no event made
            return
        try:
            self.bus.publish(Event(type, self.run_id, self.conversation_key, data))
        except Exception:  # a broken subscriber must not break the run
            log.exception("event.publish_failed type=%s run=%s", type, self.run_id)
