"""The inbox: every accepted message is a row before the platform is
acknowledged, and every state change after that is a change of that row.

- `accept` stores the message whole (its unique platform event id makes a
  redelivery a no-op) and leases it to this instance in the same statement;
- the lease is renewed while the message is worked on (`renew`, one statement
  for everything this instance holds) and handed back at shutdown (`release`);
- `finish` records the final state (the turn commit does it in its own
  transaction for the messages a run answered);
- `take_expired` claims messages whose lease expired (their process died), for
  the recovery sweep to run them again.

Claims are single atomic statements (`UPDATE … WHERE … RETURNING`, a unique
constraint); PostgreSQL also skips rows another instance is claiming
(`FOR UPDATE SKIP LOCKED`).

Over 500 lines: the inbox row's states and their claims are one state machine,
and each transition's rule (order per conversation, leases, takeovers) reads
against the others.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, func, literal, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import aliased
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.pipeline.codec import decode, encode
from bot.pipeline.intake_batch import ACCEPT, Batch, redelivery
from bot.ports import ChannelMark
from bot.store import Store
from bot.store.models import InboxItem, Lease
from bot.store.rows import Write, combined, execute
from bot.types import IncomingMessage, utcnow

log = logging.getLogger("switchboard.inbox")

OPEN_STATES = ("pending", "running")
LOCAL_PREFIX = "local:"
"""Event ids made up for messages the platform gives no id (the terminal chat)."""


def with_event_id(msg: IncomingMessage) -> IncomingMessage:
    """The message with a delivery id: the platform's, or a made-up unique one."""
    if msg.dedupe_key:
        return msg
    return dataclasses.replace(msg, event_id=LOCAL_PREFIX + uuid.uuid4().hex)


@dataclass(frozen=True, slots=True)
class Taken:
    """A message taken over from an expired lease."""

    id: int
    platform: str
    event_id: str
    conversation_key: str
    attempts: int
    payload: dict[str, Any] | None
    deliver: bool
    drafts: tuple[str, ...] = ()
    """Messages an earlier attempt posted while streaming (left unfinished)."""

    def message(self) -> IncomingMessage:
        if self.payload is None:
            raise ValueError("the inbox item has no stored message")
        return decode(self.payload)


@dataclass(frozen=True, slots=True)
class InboxStats:
    pending: int
    """Accepted and not finished (waiting or being worked on)."""
    oldest: datetime | None
    """When the oldest of those was accepted."""
    failed: int


@dataclass(frozen=True, slots=True)
class Joined:
    """PostgreSQL: a write made in the same statement as a message's INSERT
    (`Inbox.accept(also=…)`), and what to do with that statement's rows once
    it committed."""

    write: Write
    took: Callable[[list[Any]], None]


TakenOver = Callable[[AsyncSession, list[tuple[str, str]]], Awaitable[object]]
"""What `take_expired` writes in its transaction about the runs it takes over:
(the instance that held them, their conversation's key)."""

WithMessage = Callable[[AsyncSession], Awaitable[None]] | Joined
"""What `accept` writes with the message (not for a redelivery): in its
transaction, or joined to its INSERT."""


class Inbox:
    def __init__(self, store: Store, owner: str, lease_seconds: float) -> None:
        self._store = store
        self.owner = owner
        """This instance, as it appears in `lease_owner`."""
        self.lease = timedelta(seconds=lease_seconds)
        self._batch = None if store.is_sqlite else Batch(store)
        """PostgreSQL: messages accepted at the same moment share one INSERT."""
        self.joins = not store.is_sqlite
        """Whether a write can join a message's INSERT (`Joined`): PostgreSQL."""

    async def accept(
        self,
        msg: IncomingMessage,
        *,
        deliver: bool = True,
        also: WithMessage | None = None,
    ) -> bool:
        """Store `msg` (which must have a delivery id, see `with_event_id`), leased
        to this instance; then `also` in the same transaction (not for a
        redelivery). False: a redelivery, already stored. Raises when the
        database cannot take it (the platform must not be acknowledged)."""
        key = msg.dedupe_key
        assert key, "with_event_id() first"
        now = utcnow()
        values = {
            "platform": msg.platform,
            "event_id": key,
            "conversation_key": msg.conversation_key,
            "source": msg.source,
            "state": "running",
            "payload": encode(msg),
            "deliver": deliver,
            "attempts": 1,
            "lease_owner": self.owner,
            "lease_expires_at": now + self.lease,
            "created_at": now,
        }
        if also is None and self._batch is not None:  # PostgreSQL: arrivals share an INSERT
            stored = await self._batch.insert(values)
        elif isinstance(also, Joined):
            stored = await self._insert_joined(values, also)
        else:
            stored = await self._insert(values, also)
        if not stored:
            log.info("inbox.duplicate platform=%s event_id=%s", msg.platform, key)
        return stored

    async def _insert_joined(self, values: dict[str, Any], also: Joined) -> bool:
        """The INSERT as a part of `also`'s statement: one statement, atomic by
        itself (a redelivery fails it whole), in autocommit."""
        statement, params = combined(also.write, [(ACCEPT, values)])
        try:
            async with self._store.write_one(urgent=True) as session:
                rows = list((await execute(session, statement, params)).all())
        except IntegrityError as error:
            if not redelivery(error):
                raise
            return False
        also.took(rows)
        return True

    async def _insert(
        self, values: dict[str, Any], also: Callable[[AsyncSession], Awaitable[None]] | None
    ) -> bool:
        try:
            # fresh: on SQLite, what another process changed (an operator's
            # CLI) is known before this message is resolved
            if also is None:
                async with self._store.write(fresh=True) as session:
                    await execute(session, ACCEPT, values)
                return True
            async with self._store.write_urgent(fresh=True) as session:
                # Not waited for: on PostgreSQL it goes out with `also`'s first
                # statement (a redelivery fails that statement, and so the
                # transaction, with the same IntegrityError).
                await execute(session, ACCEPT, values, wait=False)
                await also(session)
        except IntegrityError as error:
            if not redelivery(error):
                raise
            return False
        return True

    async def record_drafts(
        self,
        platform: str,
        event_id: str,
        drafts: Sequence[str],
        *,
        session: AsyncSession | None = None,
    ) -> None:
        """Remember the messages a run posted while streaming its answer to
        this message, so that they are closed if the process dies."""
        stmt = (
            update(InboxItem)
            .where(col(InboxItem.platform) == platform, col(InboxItem.event_id) == event_id)
            .values(drafts=list(drafts) or None)
        )
        if session is not None:
            await session.exec(stmt)
            return
        async with self._store.write() as own:
            await own.exec(stmt)

    async def finish(
        self,
        platform: str,
        event_ids: Sequence[str],
        state: str,
        *,
        run_id: str | None = None,
        error: str | None = None,
        session: AsyncSession | None = None,
    ) -> None:
        """Record the final state of messages (in `session`'s transaction if given)."""
        if not event_ids:
            return
        stmt = finish_statement(platform, event_ids, state, run_id=run_id, error=error)
        if session is not None:
            await session.exec(stmt)
            return
        async with self._store.write() as own:
            await own.exec(stmt)

    async def renew(self) -> int:
        """Extend the lease of every message this instance is working on."""
        async with self._store.write() as session:
            result = await session.exec(
                update(InboxItem)
                .where(col(InboxItem.lease_owner) == self.owner, col(InboxItem.state) == "running")
                .values(lease_expires_at=utcnow() + self.lease)
            )
        return int(result.rowcount or 0)

    async def release(self) -> int:
        """Hand this instance's unfinished messages back (shutdown): their lease
        ends now, so the next process takes them at once."""
        stmt = update(InboxItem).where(
            col(InboxItem.lease_owner) == self.owner, col(InboxItem.state) == "running"
        )
        async with self._store.write() as session:
            result = await session.exec(stmt.values(lease_expires_at=utcnow()))
        return int(result.rowcount or 0)

    async def take_expired(
        self, platforms: Collection[str], limit: int = 100, *, also: TakenOver | None = None
    ) -> list[Taken]:
        """Claim messages of `platforms` whose lease expired (their process died,
        or they wait for their conversation), oldest first; each claim counts as
        an attempt. Messages of a conversation another live instance
        (or this one) is running are left to the run holding it, which takes
        them in order. `also` runs in the claim's transaction with the runs
        taken over: (the instance that held them, the conversation's key) of
        each message another instance held."""
        if not platforms:
            return []
        now = utcnow()
        being_run = (
            select(col(Lease.name))
            .where(
                col(Lease.name) == literal(CONVERSATION_LEASE) + col(InboxItem.conversation_key),
                col(Lease.expires_at) >= now,
            )
            .exists()
        )
        earlier = aliased(InboxItem)
        behind_a_live_lease = (
            select(col(earlier.id))
            .where(
                col(earlier.conversation_key) == col(InboxItem.conversation_key),
                col(earlier.id) < col(InboxItem.id),
                col(earlier.state).in_(OPEN_STATES),
                col(earlier.lease_expires_at) >= now,
                # this instance's own are in order here (they queue in arrival order)
                or_(col(earlier.lease_owner).is_(None), col(earlier.lease_owner) != self.owner),
            )
            .exists()
        )
        expired = (
            col(InboxItem.state).in_(OPEN_STATES),
            col(InboxItem.lease_expires_at) < now,
            col(InboxItem.platform).in_(list(platforms)),
            ~being_run,
        )
        candidates = (
            select(col(InboxItem.id), col(InboxItem.lease_owner), col(InboxItem.conversation_key))
            # In order per conversation: not while an earlier message is still
            # leased to another instance (its holder died: it is taken first,
            # once its lease ends).
            # (Not asked again by the UPDATE, which sees the earlier ones it
            # has just taken as leased.)
            .where(*expired, ~behind_a_live_lease)
            .order_by(col(InboxItem.id))
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        # fresh: they run next; what another process changed is known first
        async with self._store.write(fresh=True) as session:
            found = (await execute(session, candidates)).all()
            if not found:
                return []
            rows = (
                await session.exec(
                    update(InboxItem)
                    .where(col(InboxItem.id).in_([row[0] for row in found]), *expired)
                    .values(
                        state="running",
                        lease_owner=self.owner,
                        lease_expires_at=now + self.lease,
                        attempts=col(InboxItem.attempts) + 1,
                    )
                    .returning(*_TAKEN_COLUMNS)
                )
            ).all()
            claimed = {row[0] for row in rows}
            runs = sorted(
                {(owner, key) for id_, owner, key in found if id_ in claimed and owner}
                - {(self.owner, key) for _, _, key in found}
            )
            if runs and also is not None:
                await also(session, runs)
        taken = [_taken(row) for row in rows]
        taken.sort(key=lambda t: t.id)
        return taken

    async def requeue(self, platform: str, event_ids: Sequence[str]) -> int:
        """Give messages back to the queue (their conversation is running on
        another instance, which will take them): pending, leased to nobody; the
        claim that took them does not count as an attempt."""
        if not event_ids:
            return 0
        async with self._store.write() as session:
            result = await session.exec(
                update(InboxItem)
                .where(
                    col(InboxItem.platform) == platform,
                    col(InboxItem.event_id).in_(list(event_ids)),
                    col(InboxItem.lease_owner) == self.owner,
                    col(InboxItem.state) == "running",
                )
                .values(
                    state="pending",
                    lease_owner=None,
                    lease_expires_at=utcnow(),
                    attempts=col(InboxItem.attempts) - 1,
                )
            )
        return int(result.rowcount or 0)

    async def claim_pending(
        self, conversation_key: str, limit: int = 100, session: AsyncSession | None = None
    ) -> list[Taken]:
        """Take the messages waiting for a conversation this instance runs (in
        `session`'s transaction when given: the one taking the conversation's
        lease, or the one handing it back)."""
        statement, params = self.claiming(conversation_key)
        if session is None:
            async with self._store.write() as own:
                rows = (await execute(own, statement, params)).all()
        else:
            rows = (await execute(session, statement, params)).all()
        return taken(rows, limit)

    def claiming(self, conversation_key: str) -> Write:
        """`claim_pending`'s statement and parameters, for a caller's combined
        write (its rows, given to `taken`, are the messages taken)."""
        params = {
            "i_key": conversation_key,
            "i_owner": self.owner,
            "i_expires": utcnow() + self.lease,
        }
        return _CLAIM_PENDING, params

    async def backlog(self) -> tuple[int, datetime | None]:
        """Open messages (waiting or being worked on) and when the oldest was
        accepted, in one query (`bot.metrics` gauges)."""
        async with self._store.read() as session:
            pending, oldest = (
                await session.exec(
                    select(func.count(), func.min(InboxItem.created_at)).where(  # type: ignore[call-overload]
                        col(InboxItem.state).in_(OPEN_STATES)
                    )
                )
            ).one()
        return int(pending), oldest

    async def stats(self) -> InboxStats:
        async with self._store.read() as session:
            pending, oldest = (
                await session.exec(
                    select(func.count(), func.min(InboxItem.created_at)).where(  # type: ignore[call-overload]
                        col(InboxItem.state).in_(OPEN_STATES)
                    )
                )
            ).one()
            failed = (
                await session.exec(
                    select(func.count()).where(col(InboxItem.state) == "failed")  # type: ignore[call-overload]
                )
            ).one()[0]
        return InboxStats(int(pending), oldest, int(failed))

    async def recent_channels(
        self, platform: str, within: timedelta, limit: int, scan: int = 1000
    ) -> list[ChannelMark]:
        """Channels of `platform` with messages accepted within `within` (most
        recently active first), each with the newest platform message id seen."""
        async with self._store.read() as session:
            rows = await session.exec(  # type: ignore[call-overload]
                select(col(InboxItem.payload))
                .where(
                    col(InboxItem.platform) == platform,
                    col(InboxItem.source) == "user",
                    col(InboxItem.created_at) >= utcnow() - within,
                    col(InboxItem.payload).is_not(None),
                )
                .order_by(col(InboxItem.id).desc())
                .limit(scan)
            )
            payloads = [row[0] for row in rows.all()]
        marks: dict[str, ChannelMark] = {}
        for payload in payloads:
            channel = payload.get("platform_channel_id") if payload else None
            message = payload.get("platform_message_id") if payload else None
            if not channel or not message or not str(message).isdigit():
                continue
            known = marks.get(channel)
            if known is None:
                if len(marks) >= limit:
                    continue
            elif int(known.last_message_id) >= int(message):
                continue
            marks[channel] = ChannelMark(channel, payload.get("platform_server_id"), str(message))
        return list(marks.values())

    async def listing(self, states: Collection[str], limit: int = 50) -> list[InboxItem]:
        async with self._store.read() as session:
            rows = await session.exec(
                select(InboxItem)  # type: ignore[call-overload]
                .where(col(InboxItem.state).in_(list(states)))
                .order_by(col(InboxItem.id).desc())
                .limit(limit)
            )
            return [row[0] for row in rows.all()]


CONVERSATION_LEASE = "conversation:"
"""The lease held by the instance running a conversation: "conversation:<key>"."""

_TAKEN_COLUMNS = (
    col(InboxItem.id),
    col(InboxItem.platform),
    col(InboxItem.event_id),
    col(InboxItem.conversation_key),
    col(InboxItem.attempts),
    col(InboxItem.payload),
    col(InboxItem.deliver),
    col(InboxItem.drafts),
)


def _taken(row: Any) -> Taken:
    id_, platform, event_id, key, attempts, payload, deliver, drafts = row
    return Taken(id_, platform, event_id, key, attempts, payload, deliver, tuple(drafts or ()))


def taken(rows: Iterable[Any], limit: int = 100) -> list[Taken]:
    """The messages a claim's rows took, oldest first, at most `limit`."""
    return sorted((_taken(row) for row in rows), key=lambda t: t.id)[:limit]


_CLAIM_PENDING = (
    update(InboxItem)
    .where(
        col(InboxItem.conversation_key) == bindparam("i_key"),
        col(InboxItem.state) == "pending",
    )
    .values(
        state="running",
        lease_owner=bindparam("i_owner"),
        lease_expires_at=bindparam("i_expires"),
        attempts=col(InboxItem.attempts) + 1,
    )
    .returning(*_TAKEN_COLUMNS)
)
"""`claim_pending`, built once (with bind parameters)."""


def finish_statement(
    platform: str,
    event_ids: Sequence[str],
    state: str,
    *,
    run_id: str | None = None,
    error: str | None = None,
) -> Any:
    values: dict[str, Any] = {"state": state, "finished_at": utcnow()}
    if run_id is not None:
        values["run_id"] = run_id
    if error is not None:
        values["error"] = error[:2000]
    return (
        update(InboxItem)
        .where(
            col(InboxItem.platform) == platform,
            col(InboxItem.event_id).in_(list(event_ids)),
            col(InboxItem.state).in_(OPEN_STATES),
        )
        .values(**values)
    )
