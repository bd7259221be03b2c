"""The outbox: a reply is a row before it is sent, written in the same
transaction as what produced it (the turn, or a message's final state), leased
to the instance that will send it.

Delivery records each part's platform message id as soon as the platform took
it (`OutboxProgress`), so a reply taken over after a crash continues after the
last part sent; Discord parts also carry a nonce derived from the row, which
Discord enforces. A reply that finally cannot be delivered is `failed` (and in
`delivery_failures`), never retried into a duplicate.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import bindparam, select, update
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store import Store
from bot.store.models import OutboxItem
from bot.store.rows import NewRow, Write, execute, insert_returning_ids, new_row
from bot.types import Button, Reply, Target, utcnow

log = logging.getLogger("switchboard.outbox")


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One stored reply, ready to send."""

    id: int
    reply: Reply
    done: tuple[str, ...] = ()
    resumed: bool = False
    """Taken over from a sender that died (see `SendProgress.resumed`)."""
    created_at: datetime = field(default_factory=utcnow)
    run_id: str | None = None
    """The run that wrote it, for a reply sent outside it (taken over): what
    its delivery logs carry (`Delivery.record_failure`)."""


def reply_of(row: OutboxItem) -> Reply:
    target = Target(
        platform=row.platform,
        channel_id=row.channel_id,
        thread_id=row.thread_id,
        reply_to_message_id=row.reply_to_message_id,
        server_id=row.server_id,
    )
    buttons = tuple(Button(label, command) for label, command in row.buttons or ())
    drafts = tuple(row.drafts or ())
    return Reply(row.text, target, row.kind, row.private, buttons, drafts)  # type: ignore[arg-type]


class Outbox:
    def __init__(self, store: Store, owner: str, lease_seconds: float) -> None:
        self._store = store
        self.owner = owner
        self.lease = timedelta(seconds=lease_seconds)

    async def add(
        self,
        session: AsyncSession,
        replies: Sequence[Reply],
        *,
        inbox_id: int | None = None,
        run_id: str | None = None,
    ) -> list[Outgoing]:
        """Store `replies` in the caller's transaction, leased to this instance."""
        rows, now = self.rows(replies, inbox_id=inbox_id, run_id=run_id)
        if not rows:
            return []
        ids = await insert_returning_ids(session, rows)
        return [
            Outgoing(row_id, reply, created_at=now)
            for row_id, reply in zip(ids, replies, strict=True)
        ]

    def rows(
        self, replies: Sequence[Reply], *, inbox_id: int | None = None, run_id: str | None = None
    ) -> tuple[list[NewRow], datetime]:
        """The rows `add` inserts for `replies`, and their creation time."""
        now = utcnow()
        return [
            new_row(
                OutboxItem,
                inbox_id=inbox_id,
                run_id=run_id,
                platform=r.target.platform,
                channel_id=r.target.channel_id,
                thread_id=r.target.thread_id,
                reply_to_message_id=r.target.reply_to_message_id,
                server_id=r.target.server_id,
                kind=r.kind,
                private=r.private,
                text=r.text,
                buttons=[[b.label, b.command] for b in r.buttons] or None,
                drafts=list(r.drafts) or None,
                lease_owner=self.owner,
                lease_expires_at=now + self.lease,
                created_at=now,
            )
            for r in replies
        ], now

    async def store(self, replies: Sequence[Reply]) -> list[Outgoing]:
        """Store replies in a transaction of their own."""
        async with self._store.write() as session:
            return await self.add(session, replies)

    async def part_sent(self, outbox_id: int, part_ids: Sequence[str]) -> None:
        async with self._store.write() as session:
            await session.exec(
                update(OutboxItem)
                .where(col(OutboxItem.id) == outbox_id)
                .values(part_ids=list(part_ids))
            )

    async def finish(
        self,
        outbox_id: int,
        state: str,
        part_ids: Sequence[str],
        error: str | None = None,
    ) -> None:
        """Record how a delivery ended, in a transaction of its own (after a
        run, `bot.pipeline.hand_back` writes it with the rest, `finished`)."""
        async with self._store.write() as session:
            await execute(session, *self.finished(outbox_id, state, part_ids, error))

    def finished(
        self, outbox_id: int, state: str, part_ids: Sequence[str], error: str | None = None
    ) -> Write:
        """`finish`'s statement and parameters, for a caller's combined write."""
        params = {
            "o_id": outbox_id,
            "o_state": state,
            "o_parts": list(part_ids),
            "o_now": utcnow(),
            "o_error": error[:2000] if error else None,
        }
        return _FINISH, params

    async def renew(self) -> int:
        async with self._store.write() as session:
            result = await session.exec(
                update(OutboxItem)
                .where(
                    col(OutboxItem.lease_owner) == self.owner,
                    col(OutboxItem.state) == "pending",
                )
                .values(lease_expires_at=utcnow() + self.lease)
            )
        return int(result.rowcount or 0)

    async def release(self) -> int:
        """Hand this instance's unsent replies to the next process (shutdown)."""
        async with self._store.write() as session:
            result = await session.exec(
                update(OutboxItem)
                .where(
                    col(OutboxItem.lease_owner) == self.owner,
                    col(OutboxItem.state) == "pending",
                )
                .values(lease_expires_at=utcnow())
            )
        return int(result.rowcount or 0)

    async def take_expired(self, platforms: Collection[str], limit: int = 100) -> list[Outgoing]:
        """Claim unsent replies of `platforms` whose sender died, oldest first."""
        if not platforms:
            return []
        now = utcnow()
        expired = (
            col(OutboxItem.state) == "pending",
            col(OutboxItem.lease_expires_at) < now,
            col(OutboxItem.platform).in_(list(platforms)),
        )
        candidates = (
            select(col(OutboxItem.id))
            .where(*expired)
            .order_by(col(OutboxItem.id))
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        async with self._store.write() as session:
            rows = (
                await session.exec(
                    update(OutboxItem)
                    .where(col(OutboxItem.id).in_(candidates.scalar_subquery()), *expired)
                    .values(lease_owner=self.owner, lease_expires_at=now + self.lease)
                    .returning(OutboxItem)
                )
            ).all()
        items = sorted((row[0] for row in rows), key=lambda r: r.id or 0)
        return [
            Outgoing(r.id or 0, reply_of(r), tuple(r.part_ids or ()), True, r.created_at, r.run_id)
            for r in items
        ]


_FINISH = (
    update(OutboxItem)
    .where(col(OutboxItem.id) == bindparam("o_id"))
    .values(
        state=bindparam("o_state"),
        part_ids=bindparam("o_parts"),
        sent_at=bindparam("o_now"),
        error=bindparam("o_error"),
        attempts=col(OutboxItem.attempts) + 1,
    )
)
"""`Outbox.finish`, built once (with bind parameters)."""


@dataclass
class OutboxProgress:
    """`SendProgress` backed by one outbox row."""

    outbox: Outbox
    outbox_id: int
    parts: list[str] = field(default_factory=list)
    resumed: bool = False
    since: datetime = field(default_factory=utcnow)
    record_last: bool = True
    """False when the delivery's end is recorded right after its last part
    (`Delivery.deliver`): that write carries the part ids, one write fewer."""

    @property
    def done(self) -> Sequence[str]:
        return tuple(self.parts)

    def nonce(self, index: int) -> str:
        return f"sb{self.outbox_id}.{index}"

    async def sent(self, index: int, platform_id: str, *, last: bool = False) -> None:
        self.parts.append(platform_id)
        if last and not self.record_last:
            return  # the delivery's end, written next, records every part
        try:
            await self.outbox.part_sent(self.outbox_id, self.parts)
        except Exception:  # the part is out; losing the note costs at most a repeat
            log.exception("outbox.progress_not_recorded outbox=%s part=%s", self.outbox_id, index)
