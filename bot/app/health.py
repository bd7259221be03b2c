"""The database's side of `/healthz`: a liveness answer within a second, also
under load.

One ping at a time, on the urgent connections; a success counts for a second,
so a poller asking ten times a second costs one round trip. A ping slower than
the answer's deadline is not a dead database while the last success is recent
(`busy`: the database answers, just not at once); a failed ping, or none
succeeding for `grace` seconds, is unhealthy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class DatabaseHealth:
    def __init__(
        self,
        ping: Callable[[], Awaitable[None]],
        *,
        timeout: float = 0.8,
        fresh: float = 1.0,
        grace: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ping = ping
        self.timeout = timeout
        self.fresh = fresh
        self.grace = grace
        self._clock = clock
        self._last_ok: float | None = None
        self._pending: asyncio.Future[None] | None = None

    async def check(self) -> str:
        """ "ok" or "busy"; raises what the ping raised, or TimeoutError."""
        if self._recent(self.fresh):
            return "ok"
        if self._pending is None or self._pending.done():
            self._pending = asyncio.ensure_future(self._ping())
            self._pending.add_done_callback(self._settled)
        try:
            await asyncio.wait_for(asyncio.shield(self._pending), self.timeout)
        except TimeoutError:
            if self._recent(self.grace):
                return "busy"
            raise
        return "ok"

    def _recent(self, seconds: float) -> bool:
        return self._last_ok is not None and self._clock() - self._last_ok < seconds

    def _settled(self, future: asyncio.Future[None]) -> None:
        if not future.cancelled() and future.exception() is None:
            self._last_ok = self._clock()
