"""When a cache last dropped what it held of each user, so that a read begun
before a change, and answered after the change dropped the cache, is not
cached: it may hold what the change replaced.

The caches of accounts (`bot.accounts.identity`, `bot.accounts.budgets`,
`bot.store.memories`) fill themselves from reads, and drop a user's entries
when the account changes (here, in another process, on another instance).
A read is a wait: a role set by the CLI can commit, and its notice drop the
cache, while a read of the old role is on its way back. Cached then, that
old role would be trusted for the cache's TTL, as if the change had never
been heard of. So each fill says when its read began (`time.monotonic()`,
taken before the read), and is kept only when nothing of that user was
dropped since.
"""

from __future__ import annotations

import time

NEVER = float("-inf")


class Forgotten:
    """The moments a cache dropped a user's entries (`forget`), or all of
    them; at most `limit` users remembered (past that, as if all were
    dropped: a read in flight then is not cached, which costs a read, never a
    stale answer)."""

    __slots__ = ("_all", "_at", "_limit")

    def __init__(self, limit: int = 10_000) -> None:
        self._at: dict[int, float] = {}
        self._all = NEVER
        self._limit = limit

    def forget(self, user_id: int | None = None) -> None:
        now = time.monotonic()
        if user_id is None or len(self._at) >= self._limit:
            self._at.clear()
            self._all = now
        if user_id is not None:
            self._at[user_id] = now

    def fresh(self, user_id: int, read_at: float) -> bool:
        """Whether a read of `user_id`'s rows begun at `read_at` began after
        every drop of them: nothing it answers was changed since, as far as
        this process has heard, so it may be cached."""
        return read_at > self._all and read_at > self._at.get(user_id, NEVER)
