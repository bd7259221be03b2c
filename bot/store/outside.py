"""Writes made by another process, seen before this process's next message.

This process caches what rarely changes (accounts by platform id, budget
limits, who has no memories: `bot.accounts`, `bot.store.memories`) and drops
an entry at once when it changes something itself. An operator's change made
with the CLI, or by another instance, must count as soon, or a budget set to
nothing would go on being spent until the cached limit expired:

- SQLite: every write of this process goes through one connection (the
  writer, `Store.write`), and SQLite's `PRAGMA data_version` on a connection
  changes when another connection has committed since it last looked. The
  writer asks at the start of a message's intake (`Store.write(fresh=True)`,
  under the write lock, before BEGIN: `OutsideWrites.look`), its first write,
  so a change committed before the message arrived is known before the
  message is resolved, and the watchers (`watch`) drop what they cached; so
  do a wakeup's claim (a wakeup is its owner's next message), the claim of
  messages recovered from the inbox (the recovery sweep's, every few seconds)
  and the lease taken by a message that waited for its conversation's turn. No
  rows are read; it costs a few microseconds, and is not one of the
  statements the benchmarks count. This process's own reads and side
  checkpoints (PASSIVE) are no news; another process's TRUNCATE checkpoint
  is (a cache dropped for nothing: one more read).
- PostgreSQL: the change's own transaction sends a notification
  (`bot.store.coordination.announce_account`), which every instance's
  listening connection hears when it commits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

log = logging.getLogger("switchboard.store")


class Versioned(Protocol):
    async def data_version(self) -> int: ...


class ConnectionVersion:
    """The data version of a connection of stock aiosqlite (the plain path,
    `bot.store.compat`), asked outside any transaction."""

    __slots__ = ("_connection",)

    def __init__(self, connection: AsyncConnection) -> None:
        self._connection = connection

    async def data_version(self) -> int:
        raw = await self._connection.get_raw_connection()
        driver = raw.driver_connection
        assert driver is not None
        async with driver.execute("PRAGMA data_version") as cursor:
            row = await cursor.fetchone()
        return int(row[0])


class OutsideWrites:
    """SQLite: tells watchers when another connection committed since the
    writer's last look (every time the writer connection is a new one, too:
    what happened before it opened is not known)."""

    def __init__(self) -> None:
        self._watchers: list[Callable[[], None]] = []
        self._writer: Versioned | None = None
        self._version = 0

    def watch(self, callback: Callable[[], None]) -> None:
        """Call `callback()` whenever another process may have written."""
        self._watchers.append(callback)

    async def look(self, writer: Versioned) -> None:
        """(Under the write lock, no transaction open) Compare the writer's
        data version with the last one seen; tell the watchers when it moved."""
        if not self._watchers:
            return
        try:
            version = await writer.data_version()
        except Exception as exc:  # not known: as if changed (the write goes on)
            log.warning("store.data_version_failed: %s", exc)
            self._writer = None
        else:
            if writer is self._writer and version == self._version:
                return
            self._writer, self._version = writer, version
            log.debug("store.written_elsewhere data_version=%s", version)
        for callback in self._watchers:
            try:
                callback()
            except Exception:
                log.exception("store.watcher_failed")
