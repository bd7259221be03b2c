"""Admission: how many messages may be working the CPU and the database at
once (`[inbox] max_busy`).

A message takes a slot once it is in the inbox, and gives it up whenever it
only waits: for its turn in its conversation, or for the model. Under a burst
(hundreds of messages a second) the rest wait in the inbox, already
acknowledged, instead of all queueing at once for connections and the event
loop; so intake, `/healthz` and the runs in progress stay responsive. Waiting
on the model is free, so thousands of conversations can wait on it at once.

The slot of the message being handled is in a context variable, so the
agent loop (a task of its own, which inherits the context) can give it up
around each LLM call without it being passed down.

A new message also waits while the event loop itself runs late
(`[inbox] max_loop_lag_ms`): intake (storing and acknowledging what arrives)
and `/healthz` share that loop, so under more load than the CPU can answer,
the answering slows down, not the accepting. Runs already under way are not
held back: finishing them is what frees the loop.

Slots are handed out fairly (`bot.llm.gate.TakingTurns`): messages taking
their slot back after a wait (their turn came, the model answered) and
messages not yet started take turns, a resuming one first; within each kind,
first come first served. So under a burst of a thousand new messages the runs
already under way go on (and reply) without queueing behind the whole burst,
and the burst still reaches the model meanwhile: were the runs coming back
from the model served first, every message not yet started would wait for
all of them (with a model taking about as long as the burst's pre-model work,
the last messages reached it only after the first thousand answers were
written, and the burst took half again as long).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextvars import ContextVar

from bot.llm.gate import FairLimiter, TakingTurns

RESUMING, NEW = 0.0, 1.0
"""Queue keys: messages that already had a slot and new ones take turns, a
resuming one first."""


class Slot:
    def __init__(self, limiter: FairLimiter) -> None:
        self._limiter = limiter
        self.held = False
        self.started = False
        self.queued = False
        """Waiting for the slot (back): the message's run stands still meanwhile,
        whatever it has written so far (what a live view need not show yet)."""

    async def take(self) -> None:
        if not self.held:
            self.queued = True
            try:
                await self._limiter.acquire(RESUMING if self.started else NEW)
            finally:
                self.queued = False
            self.held = self.started = True

    def give_up(self) -> None:
        if self.held:
            self.held = False
            self._limiter.release()


current_slot: ContextVar[Slot | None] = ContextVar("current_slot", default=None)


class LoopLag:
    """How late the event loop runs what is ready: the time one pass through
    the loop takes. `calm()` returns once a pass takes at most `limit` seconds
    (checking again every `interval` while it does not)."""

    def __init__(self, limit: float, interval: float = 0.05, fresh: float = 0.01) -> None:
        self.limit = limit
        self.interval = interval
        self.fresh = fresh
        """How long a pass found on time stands for the next messages: a
        measurement costs each message a pass through the loop (a poll of
        its selector), so while one a moment ago was on time, they go on."""
        self.last = 0.0
        self._calm_at = -1.0
        self.waits = 0
        """How many times a message waited for the loop (for tests and figures)."""

    async def measure(self) -> float:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.sleep(0)  # back of the queue of what is ready to run
        self.last = loop.time() - started
        return self.last

    async def calm(self) -> None:
        if self.limit <= 0:
            return
        now = asyncio.get_running_loop().time()
        if now - self._calm_at < self.fresh:
            return
        while await self.measure() > self.limit:
            self.waits += 1
            await asyncio.sleep(self.interval)
        self._calm_at = asyncio.get_running_loop().time()


class Admission:
    def __init__(self, limit: int, max_loop_lag: float = 0.0) -> None:
        self._limiter = TakingTurns(limit)
        self.limit = limit
        self.lag = LoopLag(max_loop_lag)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[Slot]:
        """A slot for the current message, given up on exit whatever happens."""
        slot = Slot(self._limiter)
        token = current_slot.set(slot)
        try:
            await slot.take()
            await self.lag.calm()
            yield slot
        finally:
            slot.give_up()
            current_slot.reset(token)

    @property
    def waiting(self) -> bool:
        return self._limiter.locked()


@contextlib.asynccontextmanager
async def waiting() -> AsyncIterator[None]:
    """Around a wait (the model, a lock): the current message's slot is free
    meanwhile, and taken back after."""
    slot = current_slot.get()
    if slot is None:
        yield
        return
    slot.give_up()
    try:
        yield
    finally:
        await slot.take()
