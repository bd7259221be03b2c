"""PostgreSQL: messages arriving together are stored with one statement.

Storing a message before the platform is acknowledged is one INSERT, one
round trip, on one of the few connections kept for intake. Under a burst
(a thousand deliveries at once) the round trips, not the database, were the
limit: each waited for a connection, and then for its answer behind everything
else on a busy event loop, so acknowledgements took seconds (Slack redelivers
what is not acknowledged within 3 s).

`Batch` lets the accepts that arrive while one statement is out wait for the
next, and stores them all with one multi-row `INSERT … ON CONFLICT DO NOTHING
RETURNING` (SQLAlchemy's "insertmanyvalues"): the rows it returns are stored,
the others were there already (redeliveries). With nothing else in flight a
message goes out at once, alone, as before; so an idle service answers as
fast, and a busy one sends fewer, larger statements instead of queueing.

Each statement is atomic and in autocommit: an accept returns once its row is
committed. When a statement of several rows fails (one row the database
refuses, a cut connection), each of its rows is tried again on its own, so a
row that cannot be stored fails only its own delivery (not acknowledged: the
platform delivers it again) and the others are stored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError, IntegrityError

from bot.store import Store
from bot.store.models import InboxItem
from bot.store.rows import bare_insert, execute

log = logging.getLogger("switchboard.inbox")

MAX_ROWS = 500
"""Rows in one statement at most (the rest go in the next)."""

_Waiting = tuple[dict[str, Any], "asyncio.Future[bool]"]


class Batch:
    """The inbox's INSERTs on PostgreSQL, at most one statement out at a time."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._waiting: list[_Waiting] = []
        self._writer: asyncio.Task[None] | None = None
        self.statements = 0
        """Statements sent (for tests and benchmarks)."""

    async def insert(self, values: dict[str, Any]) -> bool:
        """Store one inbox row (`InboxItem` columns), committed when this
        returns: True; False when a row with its platform and event id is
        there already. Raises what the database raised for it."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append((values, future))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_all(), name="inbox-batch")
        return await future

    async def _write_all(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting[:MAX_ROWS], self._waiting[MAX_ROWS:]
                batch = [(values, f) for values, f in batch if not f.done()]  # not cancelled
                if batch:
                    await self._write(batch)
        except BaseException as error:  # cancelled (shutdown): nobody is left waiting
            _fail([future for _, future in self._waiting], error)
            self._waiting = []
            raise
        finally:
            self._writer = None

    async def _write(self, batch: list[_Waiting]) -> None:
        first: dict[tuple[str, str], asyncio.Future[bool]] = {}
        again: list[tuple[tuple[str, str], asyncio.Future[bool]]] = []  # sent twice at once
        rows: list[dict[str, Any]] = []
        for values, future in batch:
            key = (values["platform"], values["event_id"])
            if key in first:
                again.append((key, future))
            else:
                first[key] = future
                rows.append(values)
        try:
            if len(rows) == 1:
                stored = set(first) if await self._one(rows[0]) else set()
            else:
                stored = await self._many(rows)
        except DBAPIError as error:
            if len(rows) == 1:
                _fail(first.values(), error)
            else:
                log.warning(
                    "inbox.batch_failed rows=%d %s: storing each on its own",
                    len(rows),
                    type(error).__name__,
                )
                await self._each(rows, first)
        except BaseException as error:
            _fail((*first.values(), *(future for _, future in again)), error)
            if not isinstance(error, Exception):
                raise
            return
        else:
            for key, future in first.items():
                if not future.done():
                    future.set_result(key in stored)
        for key, future in again:  # a redelivery of the first, unless that failed
            if future.done():
                continue
            settled = first[key]
            failure = None if settled.cancelled() else settled.exception()
            if failure is None:
                future.set_result(False)
            else:
                future.set_exception(failure)

    async def _one(self, values: dict[str, Any]) -> bool:
        self.statements += 1
        try:
            async with self._store.write_one(urgent=True) as session:
                await execute(session, ACCEPT, values)
        except IntegrityError as error:
            if not redelivery(error):
                raise
            return False
        return True

    async def _many(self, rows: list[dict[str, Any]]) -> set[tuple[str, str]]:
        self.statements += 1
        async with self._store.write_one(urgent=True) as session:
            result = await execute(session, _ACCEPT_MANY, rows)
            return {(platform, event_id) for platform, event_id in result.all()}

    async def _each(
        self, rows: list[dict[str, Any]], futures: dict[tuple[str, str], asyncio.Future[bool]]
    ) -> None:
        for values in rows:
            future = futures[(values["platform"], values["event_id"])]
            try:
                stored = await self._one(values)
            except Exception as error:
                if not future.done():
                    future.set_exception(error)
                continue
            if not future.done():
                future.set_result(stored)


def redelivery(error: IntegrityError) -> bool:
    """Whether `error` is the inbox's unique platform event id refusing a
    message stored before (not another constraint, nor a trigger: SQLite
    reports a trigger's RAISE as an integrity error too)."""
    return "event_id" in str(error.orig)


def _fail(futures: Iterable[asyncio.Future[bool]], error: BaseException) -> None:
    for future in futures:
        if future.done():
            continue
        if isinstance(error, asyncio.CancelledError):
            future.cancel()
        else:
            future.set_exception(error)


_TABLE = InboxItem.__table__  # type: ignore[attr-defined]
ACCEPT = bare_insert(_TABLE)
"""An inbox row, its values as parameters (nothing to build per message); a
redelivery raises IntegrityError (the unique platform event id)."""
_ACCEPT_MANY = (
    postgresql.insert(_TABLE)
    .on_conflict_do_nothing(index_elements=["platform", "event_id"])
    .returning(_TABLE.c.platform, _TABLE.c.event_id)
)
"""Several rows; those returned were stored, the others were there already."""
