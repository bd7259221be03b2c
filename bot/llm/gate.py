"""How many LLM calls may be in flight at once (`[llm] max_in_flight`), and
who goes first when more want to.

`FairLimiter` is a semaphore whose waiters are served by key, then in the
order they asked: never a newcomer before someone already waiting (asyncio's
own semaphore lets a task that was not waiting take a slot freed before a
woken waiter runs). `GatedProvider` puts every call of the service (runs,
summaries, memory flushes) through one: the call whose message arrived first
(`arrival`, set by the pipeline when a message comes in) reaches the model
first, so under a burst the oldest messages are answered first whatever the
order their pre-model work finished in.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import itertools
import time
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from typing import Protocol

from bot.llm.capabilities import Feature, supports
from bot.llm.types import LLMRequest, LLMResponse, TextCallback


class Provider(Protocol):
    """`bot.ports.Provider` (ports imports this package: restated, not imported)."""

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse: ...

    async def aclose(self) -> None: ...


arrival: ContextVar[float | None] = ContextVar("llm_arrival", default=None)
"""When the message being answered arrived (a `time.time()` timestamp); the key
of its LLM calls in the queue. Unset: the time of the call itself."""


@contextlib.contextmanager
def arrived(at: float) -> Iterator[None]:
    """While a message that arrived `at` is handled, its LLM calls queue by
    that (oldest first)."""
    token = arrival.set(at)
    try:
        yield
    finally:
        arrival.reset(token)


Waiter = tuple[float, int, "asyncio.Future[None]"]
"""A waiter's place: its key, its turn in asking, and what it awaits."""


class FairLimiter:
    """At most `limit` holders at once (0: no limit). Waiters are served lowest
    key first, equal keys in the order they asked."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.peak = 0
        """The most holders at once so far (for figures and tests)."""
        self._waiters: list[Waiter] = []
        self._order = itertools.count()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def locked(self) -> bool:
        """Whether an `acquire` now would wait."""
        return self.limit > 0 and (self.held >= self.limit or self.waiting > 0)

    async def acquire(self, key: float = 0.0) -> None:
        if not self.locked():
            self._take()
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (key, next(self._order), future)
        self._push(entry)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # granted just as it was cancelled: pass it on
            else:
                self._remove(entry)
                self._wake()
            raise

    def release(self) -> None:
        if self.held <= 0:
            raise RuntimeError("FairLimiter released more than acquired")
        self.held -= 1
        self._wake()

    @contextlib.asynccontextmanager
    async def hold(self, key: float = 0.0) -> AsyncIterator[None]:
        await self.acquire(key)
        try:
            yield
        finally:
            self.release()

    def _take(self) -> None:
        self.held += 1
        self.peak = max(self.peak, self.held)

    def _wake(self) -> None:
        while self.waiting and (self.limit <= 0 or self.held < self.limit):
            _, _, future = self._pop()
            if future.done():  # cancelled meanwhile
                continue
            self._take()
            future.set_result(None)

    # The waiters' queue: lowest key first, then in the order they asked.

    def _push(self, entry: Waiter) -> None:
        heapq.heappush(self._waiters, entry)

    def _pop(self) -> Waiter:
        return heapq.heappop(self._waiters)

    def _remove(self, entry: Waiter) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(entry)
            heapq.heapify(self._waiters)


class TakingTurns(FairLimiter):
    """A `FairLimiter` whose waiters of different keys take turns: when a
    place frees and several keys wait, it goes to the lowest key that was
    not served last (each key's waiters in the order they asked), so that no
    key starves the others however many of its waiters keep coming. With one
    key waiting, that key is served."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self._queues: dict[float, collections.deque[Waiter]] = {}
        self._count = 0
        self._last: float | None = None

    @property
    def waiting(self) -> int:
        return self._count

    def _push(self, entry: Waiter) -> None:
        self._queues.setdefault(entry[0], collections.deque()).append(entry)
        self._count += 1

    def _pop(self) -> Waiter:
        keys = sorted(key for key, queue in self._queues.items() if queue)
        key = next((k for k in keys if k != self._last), keys[0])
        entry = self._queues[key].popleft()
        self._count -= 1
        if not entry[2].done():  # (one cancelled meanwhile takes no turn)
            self._last = key
        return entry

    def _remove(self, entry: Waiter) -> None:
        queue = self._queues.get(entry[0])
        if queue is not None and entry in queue:
            queue.remove(entry)
            self._count -= 1


class GatedProvider:
    """A `Provider` whose calls wait for a place under `limiter`, oldest
    message first."""

    def __init__(self, inner: Provider, limiter: FairLimiter) -> None:
        self.inner = inner
        self.limiter = limiter

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse:
        key = arrival.get()
        async with self.limiter.hold(time.time() if key is None else key):
            return await self.inner.complete(request, on_text)

    def supports(self, model: str, feature: Feature) -> bool:
        return supports(self.inner, model, feature)

    async def aclose(self) -> None:
        await self.inner.aclose()
