"""Linking accounts across platforms: `/link` gives a one-time code; `/link CODE`
sent from another account makes both accounts one user.

Codes: 8 characters from a 31-symbol alphabet (~40 bits) from `secrets`, valid
for 10 minutes, single use, stored only as SHA-256; a new `/link` replaces the
user's previous unused code; 5 wrong codes within 10 minutes lock `/link CODE`
for that user until the window passes.

Merging (the user who asked for the code is kept, the one who sent it is merged
into it, in one transaction):
- every platform account, message, run, token log, scheduled job, audit entry
  and anything else referring to the merged user moves to the kept user;
- role: the higher of the two (both accounts were proven to be one person);
- budget: the merged user's usage this period counts against the kept user's
  allowance (charged atomically like a run, so `used` stays within the limit and
  the rest is overage), and its one-off grants carry over; the kept user's
  limit setting stays unless it follows the role default and the merged user
  had an explicit one (fixed or unlimited), which is then adopted.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import SQLModel, col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.accounts.audit import Audit
from bot.accounts.budgets import Budgets
from bot.accounts.identity import Identity, UserRecord, current_period
from bot.store import Store
from bot.store.coordination import announce_account
from bot.store.models import AuditEntry, Budget, LinkCode, User
from bot.types import Role, utcnow

log = logging.getLogger("switchboard.linking")

CODE_TTL = timedelta(minutes=10)
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
MAX_FAILURES = 5


class LinkError(Exception):
    """The code cannot be used; the message is for the user."""


@dataclass(frozen=True, slots=True)
class Linked:
    user_id: int
    merged_user_id: int
    role: Role


def hash_code(code: str) -> str:
    normalized = "".join(code.split()).upper()
    return hashlib.sha256(normalized.encode()).hexdigest()


class Linking:
    def __init__(
        self,
        store: Store,
        identity: Identity,
        budgets: Budgets,
        audit: Audit,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._store = store
        self._identity = identity
        self._budgets = budgets
        self._audit = audit
        self._clock = clock

    async def issue(self, user: UserRecord) -> tuple[str, datetime]:
        """A new code for `user` (replacing an unused earlier one) and its expiry."""
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        now = self._clock()
        expires = now + CODE_TTL
        async with self._store.write() as session:
            await session.exec(
                delete(LinkCode).where(
                    col(LinkCode.user_id) == user.id, col(LinkCode.used_at).is_(None)
                )
            )
            session.add(
                LinkCode(
                    user_id=user.id,
                    code_hash=hash_code(code),
                    issued_on=user.handle,
                    expires_at=expires,
                    created_at=now,
                )
            )
        return code, expires

    async def redeem(self, user: UserRecord, code: str, where: str | None = None) -> Linked:
        """Link `user`'s account to the user who issued `code`. Raises `LinkError`."""
        now = self._clock()
        try:
            if await self._recent_failures(user.id, now) >= MAX_FAILURES:
                raise LinkError(
                    "Too many wrong link codes; wait 10 minutes and ask for a new code."
                )
            linked = await self._redeem(user, hash_code(code), now)
        except LinkError as exc:
            await self._audit.record(
                actor=user.handle,
                actor_user_id=user.id,
                action="/link",
                outcome="failed",
                where=where,
                details={"reason": str(exc)},
            )
            raise
        self._identity.forget(linked.user_id)
        self._identity.forget(linked.merged_user_id)
        self._budgets.forget(linked.user_id)  # the merge may have set its limit
        self._budgets.forget(linked.merged_user_id)
        await self._audit.record(
            actor=user.handle,
            actor_user_id=linked.user_id,
            action="/link",
            target=f"#{linked.user_id}",
            where=where,
            details={"merged_user_id": linked.merged_user_id, "role": linked.role.value},
        )
        log.info(
            "user.linked kept=%s merged=%s account=%s role=%s",
            linked.user_id,
            linked.merged_user_id,
            user.handle,
            linked.role,
        )
        return linked

    async def _redeem(self, user: UserRecord, digest: str, now: datetime) -> Linked:
        async with self._store.read() as session:
            query = select(LinkCode).where(LinkCode.code_hash == digest)
            found = (await session.exec(query)).first()
        if found is None or found.used_at is not None or found.expires_at <= now:
            raise LinkError(
                "That link code is wrong, expired or already used. Send /link on your "
                "other account for a new one (codes last 10 minutes)."
            )
        if found.user_id == user.id:
            raise LinkError("These accounts are already linked to the same user.")
        try:
            async with self._store.write() as session:
                claimed = (
                    await session.exec(
                        update(LinkCode)
                        .where(
                            col(LinkCode.id) == found.id,
                            col(LinkCode.used_at).is_(None),
                            col(LinkCode.expires_at) > now,
                        )
                        .values(used_at=now, used_by=user.handle)
                        .returning(col(LinkCode.user_id))
                    )
                ).first()
                if claimed is None:
                    raise LinkError("That link code was just used or expired.")
                return await self._merge(session, keep=int(claimed[0]), drop=user.id)
        except IntegrityError as exc:
            log.error("link.merge_failed keep=%s drop=%s: %s", found.user_id, user.id, exc)
            raise LinkError("The accounts could not be merged; the error was logged.") from None

    async def _merge(self, session: AsyncSession, *, keep: int, drop: int) -> Linked:
        kept = await session.get(User, keep)
        dropped = await session.get(User, drop)
        if kept is None or dropped is None:
            raise LinkError("One of the accounts no longer exists.")
        role = max(Role(kept.role), Role(dropped.role), key=lambda r: r.rank)
        for changed in (keep, drop):
            await announce_account(session, self._store, changed)
        await self._merge_budget(session, keep, drop, role)
        for table in SQLModel.metadata.sorted_tables:
            if table.name == Budget.__tablename__:
                continue
            for fk in table.foreign_keys:
                if fk.column.table.name == User.__tablename__:
                    column = fk.parent
                    await session.exec(
                        update(table).where(column == drop).values({column.name: keep})
                    )
        kept.role = role.value
        kept.display_name = kept.display_name or dropped.display_name
        kept.updated_at = utcnow()
        session.add(kept)
        await session.flush()
        await session.delete(dropped)
        return Linked(keep, drop, role)

    async def _merge_budget(self, session: AsyncSession, keep: int, drop: int, role: Role) -> None:
        other = await session.get(Budget, drop)
        if other is None:
            return
        own = await session.get(Budget, keep)
        if own is None:
            own = Budget(user_id=keep, period=current_period())
            session.add(own)
            await session.flush()
        if own.limit_mode == "role" and other.limit_mode != "role":
            own.limit_mode, own.limit_tokens = other.limit_mode, other.limit_tokens
            session.add(own)
            await session.flush()
        if other.period == current_period():
            await self._budgets.charge(session, keep, role, other.used)
            await session.exec(
                update(Budget)
                .where(col(Budget.user_id) == keep)
                .values(
                    overage=col(Budget.overage) + other.overage,
                    granted=col(Budget.granted) + other.granted,
                )
            )
        await session.delete(other)
        await session.flush()

    async def _recent_failures(self, user_id: int, now: datetime) -> int:
        async with self._store.read() as session:
            count = (
                await session.exec(
                    select(func.count())
                    .select_from(AuditEntry)
                    .where(
                        AuditEntry.actor_user_id == user_id,
                        AuditEntry.action == "/link",
                        AuditEntry.outcome == "failed",
                        col(AuditEntry.created_at) > now - CODE_TTL,
                    )
                )
            ).one()
        return int(count)
