"""Coordination between instances sharing one database.

- `notify` / `listen`: on PostgreSQL, `NOTIFY` on one channel ("switchboard"),
  received by every instance's `LISTEN` on a dedicated connection (payloads are
  "<schema>|<kind>:<key>", so instances on other schemas ignore them). That
  connection, lost or never made, is tried again in the background; once it
  listens again, callbacks hear `MISSED` (what was sent meanwhile is lost), as
  they do when the first connection listens only after `listen` returned.
  SQLite has no notifications: callers fall back to polling (the recovery
  sweep).
- `announce_account`: a user's account, role, budget or memories changed;
  sent in the change's own transaction (PostgreSQL), so every instance drops
  what it cached of that user when it commits (SQLite: `bot.store.outside`).
- `announce_released`: a user's budget holds were released while a message
  waits for them (`bot.accounts.holds`), sent in the release's transaction, so
  the instance where it waits decides it again at once.
- `announce_jobs`: a scheduled job was created, paused, resumed or removed;
  sent the same way, so every instance's scheduler syncs at once (SQLite: the
  writer's look, `bot.store.outside`).
- `leadership(name)`: one holder across instances. On PostgreSQL, a session
  advisory lock held on its own connection: it is released the moment that
  process dies (its connection closes), so another instance takes over within
  its polling interval. On SQLite, a lease renewed every few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from sqlalchemy import bindparam, func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store.db import Store
from bot.store.leases import Held, Leases
from bot.store.rows import execute
from bot.store.transient import log_failure

log = logging.getLogger("switchboard.control")

CHANNEL = "switchboard"
POLL_S = 1.0
"""How often a waiting instance tries to become leader."""
CHECK_S = 2.0
"""How often a leader checks that it still is."""
LISTEN_RETRY_S = 0.5
"""How soon a failed or lost listening connection is tried again (doubling)."""
LISTEN_RETRY_MAX_S = 15.0
LISTEN_FIRST_WAIT_S = 5.0
MISSED = "missed"
"""What listeners hear once listening again after a failure: notifications
sent meanwhile never arrive (caches drop everything, the sweep runs)."""
ACCOUNT = "account"
"""A notification's kind: a user's account changed (its key: the user id)."""
JOBS = "jobs"
"""A notification's kind: a scheduled job changed (its key: the job id)."""
BUDGET = "budget"
"""A notification's kind: a user's budget holds were released (its key: the user id)."""
_NOTIFY = select(func.pg_notify(bindparam("channel"), bindparam("payload")))


def _wake(event: asyncio.Event, _connection: object) -> None:
    event.set()


def _payload(schema: str | None, kind: str, key: str) -> str:
    return f"{schema or ''}|{kind}:{key}"


async def announce_account(session: AsyncSession, store: Store, user_id: int) -> None:
    """Tell every instance, when `session`'s transaction commits, that the
    account of `user_id` changed (role, budget, links, a memory saved), so
    that none goes on trusting what it cached of it (PostgreSQL; on SQLite
    the writer sees another process's commit itself, `bot.store.outside`)."""
    await _announce(session, store, ACCOUNT, str(user_id))


async def announce_released(session: AsyncSession, store: Store, user_id: int) -> None:
    """Tell every instance, when `session`'s transaction commits, that holds
    of `user_id` were released (PostgreSQL; on SQLite one process serves, and
    its waiting messages look again on their own)."""
    await _announce(session, store, BUDGET, str(user_id))


async def tell_released(store: Store, user_ids: Iterable[int]) -> None:
    """Tell every instance, in a transaction of its own, that holds of these
    users were released (PostgreSQL; on SQLite one process serves: nothing
    to tell, no transaction)."""
    if store.dialect != "postgresql":
        return
    async with store.write() as session:
        for user_id in sorted(user_ids):
            await announce_released(session, store, user_id)


async def announce_jobs(session: AsyncSession, store: Store, job_id: int) -> None:
    """Tell every instance, when `session`'s transaction commits, that job
    `job_id` changed (created, paused, resumed, removed; by an operator, an
    agent, or the service itself: a spent owner's jobs, an orphaned job; one
    notice for many is enough, each sync reads every job), so that each
    scheduler syncs now, not at its next `sync_seconds` (PostgreSQL; SQLite:
    `bot.store.outside`)."""
    await _announce(session, store, JOBS, str(job_id))


async def _announce(session: AsyncSession, store: Store, kind: str, key: str) -> None:
    if store.dialect == "postgresql":
        params = {"channel": CHANNEL, "payload": _payload(store.schema, kind, key)}
        await execute(session, _NOTIFY, params)


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory lock key for `name`."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class Leadership:
    """Held by one instance at a time. `wait()` returns once this one holds it;
    `held` says whether it still does (a lost database connection, or an expired
    lease, ends it)."""

    def __init__(self, control: Coordination, name: str) -> None:
        self._control = control
        self.name = name
        self._held = asyncio.Event()
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._conn: AsyncConnection | None = None
        self._lease: Held | None = None

    @property
    def held(self) -> bool:
        return self._held.is_set() and not self._lost.is_set()

    async def wait(self) -> None:
        """Block until this instance is the leader."""
        if self._task is None or self._task.done():
            self._lost.clear()
            self._task = asyncio.create_task(self._campaign(), name=f"leader:{self.name}")
        await self._held.wait()

    async def lost(self) -> None:
        """Block until leadership, once held, is lost."""
        await self._lost.wait()

    async def _campaign(self) -> None:
        try:
            while not await self._try():  # noqa: ASYNC110 (polling a lock in the database)
                await asyncio.sleep(POLL_S)
            log.info("leader.elected name=%s instance=%s", self.name, self._control.owner)
            self._held.set()
            while await self._still():  # noqa: ASYNC110 (checking the connection holds it)
                await asyncio.sleep(CHECK_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # given up, and campaigned for again
            log_failure(log, exc, "leader.check_failed name=%s", self.name)
        self._held.clear()
        self._lost.set()
        log.warning("leader.lost name=%s instance=%s", self.name, self._control.owner)
        await self._drop()

    async def _try(self) -> bool:
        control = self._control
        if control.store.dialect != "postgresql":
            self._lease = await control.leases.acquire(f"leader:{self.name}", seconds=10)
            return self._lease is not None
        try:
            if self._conn is None:
                self._conn = await control.store.engine.connect()
            got = await self._conn.scalar(
                text("SELECT pg_try_advisory_lock(:k)"), {"k": control.lock_key(self.name)}
            )
            await self._conn.commit()
            return bool(got)
        except Exception as exc:
            log.warning("leader.try_failed name=%s: %s", self.name, exc)
            await self._drop()
            return False

    async def _still(self) -> bool:
        control = self._control
        if control.store.dialect != "postgresql":
            self._lease = await control.leases.acquire(f"leader:{self.name}", seconds=10)
            return self._lease is not None
        if self._conn is None:
            return False
        await self._conn.scalar(text("SELECT 1"))
        await self._conn.commit()
        return True

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def release(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        self._held.clear()
        if self._lease is not None:
            with contextlib.suppress(Exception):
                await self._control.leases.release(self._lease)
            self._lease = None
        await self._drop()  # closing the connection frees the advisory lock


class Coordination:
    def __init__(self, store: Store, leases: Leases, schema: str | None = None) -> None:
        self.store = store
        self.leases = leases
        self.schema = schema or ""
        self.owner = leases.owner
        self._listener: AsyncConnection | None = None
        self._listening: asyncio.Task[None] | None = None
        self._callbacks: list[Callable[[str, str], None]] = []
        self._leaders: dict[str, Leadership] = {}

    @property
    def notifies(self) -> bool:
        """Whether other instances hear `notify` (PostgreSQL) or must poll."""
        return self.store.dialect == "postgresql"

    def lock_key(self, name: str) -> int:
        return lock_key(f"{self.schema}|{name}")

    def leadership(self, name: str) -> Leadership:
        if name not in self._leaders:
            self._leaders[name] = Leadership(self, name)
        return self._leaders[name]

    def subscribe(self, callback: Callable[[str, str], None]) -> None:
        """Call `callback(kind, key)` for every notification heard once this
        instance listens (`listen`)."""
        self._callbacks.append(callback)

    async def listen(self, callback: Callable[[str, str], None]) -> None:
        """Call `callback(kind, key)` for every notification (PostgreSQL only),
        from the moment this returns: the first try at listening is over, or
        took `LISTEN_FIRST_WAIT_S` (a failed one is tried again in the
        background, as is a connection lost later; once listening again,
        callbacks hear `MISSED`, as they do when the first try listens only
        after that wait: what was sent from the moment this returned is
        lost)."""
        self.subscribe(callback)
        if not self.notifies or self._listening is not None:
            return
        tried: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._listening = asyncio.create_task(self._keep_listening(tried), name="control:listen")
        await asyncio.wait([tried], timeout=LISTEN_FIRST_WAIT_S)  # (a connect may hang)
        tried.cancel()  # no-op when tried; else nobody waits any more: a late listen missed

    async def _keep_listening(self, tried: asyncio.Future[None]) -> None:
        """Listen on a connection of its own; when it fails or is lost, again,
        after `LISTEN_RETRY_S` (doubling up to `LISTEN_RETRY_MAX_S`)."""
        delay, missed = LISTEN_RETRY_S, False
        while True:
            lost = asyncio.Event()
            try:
                conn = self._listener = await self.store.engine.connect()
                raw: Any = (await conn.get_raw_connection()).driver_connection
                raw.add_termination_listener(partial(_wake, lost))
                await raw.add_listener(CHANNEL, self._received)
            except Exception as exc:
                log.warning("control.listen_failed (again in %.1fs): %s", delay, exc)
                await self._drop_listener()
                if not tried.done():
                    tried.set_result(None)
                missed = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, LISTEN_RETRY_MAX_S)
                continue
            log.info("control.listening channel=%s", CHANNEL)
            if tried.cancelled():  # listening later than `listen` returned
                missed = True
            if not tried.done():
                tried.set_result(None)
            if missed:  # what was sent while nobody listened here is lost
                self._tell(MISSED, "")
            delay, missed = LISTEN_RETRY_S, True
            await lost.wait()
            log.warning("control.listener_lost: listening again")
            await self._drop_listener()

    async def _drop_listener(self) -> None:
        conn, self._listener = self._listener, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.invalidate()
            with contextlib.suppress(Exception):
                await conn.close()

    def _received(self, connection: Any, pid: int, channel: str, payload: str) -> None:
        schema, _, message = payload.partition("|")
        if schema != self.schema:
            return
        kind, _, key = message.partition(":")
        self._tell(kind, key)

    def _tell(self, kind: str, key: str) -> None:
        for callback in self._callbacks:
            try:
                callback(kind, key)
            except Exception:
                log.exception("control.callback_failed kind=%s", kind)

    async def notify(self, kind: str, key: str) -> None:
        """Tell every instance (PostgreSQL; a no-op on SQLite)."""
        if not self.notifies:
            return
        try:
            async with self.store.engine.connect() as conn:
                await conn.execute(
                    _NOTIFY, {"channel": CHANNEL, "payload": _payload(self.schema, kind, key)}
                )
                await conn.commit()
        except Exception as exc:  # a hint only: the sweep finds the work anyway
            log.warning("control.notify_failed kind=%s: %s", kind, exc)

    async def close(self) -> None:
        for leader in self._leaders.values():
            await leader.release()
        listening, self._listening = self._listening, None
        if listening is not None:
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await listening
        await self._drop_listener()
