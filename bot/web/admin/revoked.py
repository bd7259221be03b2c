"""Which admin sessions were logged out, on any instance sharing the database.

A logout is written to the database first (`bot.store.revocations`), then
remembered here; this instance refuses the cookie at once. Other instances
read the list of revoked sessions at most once per `REFRESH_S` (one small
read, shared by the requests that come meanwhile, not one per page), so a
logout on one instance takes effect on all of them within `REFRESH_S`
seconds. When that read fails, a request with a session cookie is not let in
on an old list: it fails (503) like any page whose data cannot be read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime

from bot.store import Store
from bot.store import revocations as stored

REFRESH_S = 2.0


class Revocations:
    def __init__(
        self,
        store: Store,
        *,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._refresh_s = refresh_s
        self._clock = clock
        self._known: frozenset[str] = frozenset()
        """Digests of the sessions revoked, as last read."""
        self._read_at: float | None = None
        self._mine: dict[str, float] = {}
        """Digests of the sessions revoked here → until when (epoch seconds)."""
        self._reading = asyncio.Lock()

    async def revoked(self, nonce: str) -> bool:
        """Whether the session `nonce` was logged out (here at once; elsewhere
        within `REFRESH_S`). Raises the database's error when the list is due
        to be read again and cannot be."""
        digest = stored.digest(nonce)
        if digest in self._mine:
            return True
        if self._stale():
            async with self._reading:
                if self._stale():  # not read meanwhile by a request that waited first
                    began = self._clock()  # what is revoked after this may be missed
                    self._known = await stored.revoked(self._store)
                    self._read_at = began
        return digest in self._known

    async def revoke(self, nonce: str, expires_at: float) -> None:
        """End the session `nonce` (which expires at `expires_at`, epoch
        seconds) on every instance. Raises the database's error when it could
        not be recorded: then nothing is revoked, here either."""
        when = datetime.fromtimestamp(expires_at, UTC)
        await stored.revoke(self._store, nonce, when)
        now = time.time()
        for old, until in list(self._mine.items()):
            if until <= now:
                del self._mine[old]
        self._mine[stored.digest(nonce)] = expires_at

    def _stale(self) -> bool:
        return self._read_at is None or self._clock() - self._read_at >= self._refresh_s
