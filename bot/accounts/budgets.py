"""Monthly token budgets.

Every change is one atomic SQL statement (no read-modify-write), so concurrent
runs never lose a charge: `used` climbs to the allowance and what a run spent
beyond it is added to `overage`, so real consumption stays visible.

Before each LLM call its estimate is reserved (`reserve`: one statement that
fails when `used + reserved + estimate` would pass the allowance); after the
call the reservation is settled to the real usage (`settle`). Concurrent calls
of one user therefore cannot together spend past the allowance. A reservation
whose process died is never settled: `reserved_until` (pushed forward by every
reservation, past the longest a call can take) makes such leftovers count as
0 once no call can still be holding them.

Nothing can use up an unlimited budget, so `check` skips its read for a user
whose limit (mode and tokens, with the role's allowance) is known to be
unlimited: the limit read with the row is cached for `LIMIT_CACHE_TTL_S`. A
change through this object (`set_limit`, `grant`, `reset`) drops it at once; a
change made by another process (another instance, the CLI) drops it too,
before this process's next message (`bot.store.outside`); the TTL is the
backstop should that news not arrive. (A role change comes with the user
record, `bot.accounts.identity`.)
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import BigInteger, ColumnElement, bindparam, case, select, update
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.accounts.identity import AccountRead, UserRecord, current_period
from bot.config import BudgetSettings
from bot.errors import BudgetExceeded
from bot.store import Store
from bot.store.coordination import announce_account
from bot.store.forgotten import Forgotten
from bot.store.models import Budget
from bot.store.rows import execute
from bot.types import Role, utcnow

log = logging.getLogger("switchboard.budget")

LimitMode = Literal["role", "fixed", "unlimited"]
LIMIT_CACHE_TTL_S = 10.0
"""How long a user's limit read from the database is trusted by `check`."""
CACHE_LIMIT = 10_000


def period_end(period: str) -> datetime:
    """The first instant of the month after `period` ("YYYY-MM"), UTC."""
    year, month = (int(part) for part in period.split("-"))
    return datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    period: str
    allowance: int | None
    """Base allowance for the period (None: unlimited), without `granted`."""
    granted: int
    used: int
    overage: int
    limit_mode: str

    @property
    def limit(self) -> int | None:
        return None if self.allowance is None else self.allowance + self.granted

    @property
    def remaining(self) -> int | None:
        return None if self.limit is None else max(self.limit - self.used, 0)

    @property
    def exhausted(self) -> bool:
        return self.remaining == 0

    @property
    def resets_at(self) -> datetime:
        return period_end(self.period)


@dataclass(frozen=True, slots=True)
class Charge:
    used: int
    overage: int


@dataclass(frozen=True, slots=True)
class Hold:
    """Tokens reserved for one LLM call."""

    user_id: int
    role: Role
    tokens: int


class Budgets:
    def __init__(self, store: Store, defaults: BudgetSettings, hold_seconds: float = 900.0) -> None:
        self._store = store
        self._defaults = defaults
        self._hold = timedelta(seconds=hold_seconds)
        """How long a reservation can be outstanding (longer than any LLM call)."""
        self._limits: dict[int, tuple[float, str, int | None]] = {}
        """user id → (read at, limit_mode, limit_tokens), see the module doc."""
        self._forgotten = Forgotten(CACHE_LIMIT)
        """when each user's cached limit was dropped: a read begun before is
        not cached"""

    def forget(self, user_id: int | None = None) -> None:
        """Drop the cached limit of a user (or of all) after a change to it;
        a read of it on its way meanwhile is not cached."""
        self._forgotten.forget(user_id)
        if user_id is None:
            self._limits.clear()
        else:
            self._limits.pop(user_id, None)

    def user_created(self, user_id: int) -> None:
        """A user created here has the budget row `Identity` wrote: its role's
        allowance (cached like a read of it)."""
        self._remember(user_id, "role", None, time.monotonic())

    def account_read(self, read: AccountRead) -> None:
        """The user's limit as read with their account (`Identity`'s
        `on_read`): cached like a read of the budget row (no row: the role's
        allowance, as `status` takes it)."""
        self._remember(read.user_id, read.limit_mode or "role", read.limit_tokens, read.read_at)

    def _remember(self, user_id: int, mode: str, tokens: int | None, read_at: float) -> None:
        """Cache what a read begun at `read_at` found, unless the limit was
        dropped since (a change heard while the read was on its way)."""
        if not self._forgotten.fresh(user_id, read_at):
            return
        if len(self._limits) >= CACHE_LIMIT:
            self._limits.clear()
        self._limits[user_id] = (read_at, mode, tokens)

    def _known_unlimited(self, user_id: int, role: Role) -> str | None:
        """The limit mode when the cached limit says unlimited, else None."""
        cached = self._limits.get(user_id)
        if cached is None or time.monotonic() - cached[0] >= LIMIT_CACHE_TTL_S:
            return None
        _, mode, tokens = cached
        return mode if self._allowance(mode, tokens, role) is None else None

    async def look_elsewhere(self) -> None:
        """Before a run's next LLM call: drop what another process changed
        since (SQLite looks; PostgreSQL's instances hear it), so that a limit
        or a role set meanwhile (the CLI, another instance) counts from that
        call."""
        await self._store.look_elsewhere()

    async def unlimited_now(self, user_id: int, role: Role) -> bool:
        """For a run going on, before another LLM call (after `look_elsewhere`):
        whether the user's budget is unlimited now, for their `role` now. No
        read while the cached limit is known (a change to it drops it)."""
        if self._known_unlimited(user_id, role) is not None:
            return True
        return (await self.status(user_id, role)).limit is None

    def role_allowance(self, role: Role) -> int | None:
        return self._defaults.for_role(role)

    async def status(
        self, user_id: int, role: Role, session: AsyncSession | None = None
    ) -> BudgetStatus:
        params = {"s_user_id": user_id}
        read_at = time.monotonic()
        if session is None:
            async with self._store.read() as own:
                row = (await execute(own, _STATUS, params)).first()
        else:
            row = (await execute(session, _STATUS, params)).first()
        if row is None:
            self._remember(user_id, "role", None, read_at)
            return BudgetStatus(current_period(), self.role_allowance(role), 0, 0, 0, "role")
        period, limit_mode, limit_tokens, granted, used, overage = row
        self._remember(user_id, limit_mode, limit_tokens, read_at)
        allowance = self._allowance(limit_mode, limit_tokens, role)
        if period != current_period():  # a new month: nothing used yet
            return BudgetStatus(current_period(), allowance, 0, 0, 0, limit_mode)
        return BudgetStatus(period, allowance, granted, used, overage, limit_mode)

    async def check(self, user: UserRecord, session: AsyncSession | None = None) -> BudgetStatus:
        """Raise `BudgetExceeded` when the user has no tokens left this period.
        For a budget known to be unlimited, no read: the status returned then
        has the limit (None) but not the usage."""
        mode = self._known_unlimited(user.id, user.role)
        if mode is not None:
            return BudgetStatus(current_period(), None, 0, 0, 0, mode)
        status = await self.status(user.id, user.role, session)
        if status.exhausted:
            raise BudgetExceeded(
                f"monthly token budget spent ({status.used}/{status.limit}); "
                f"resets {status.resets_at:%Y-%m-%d}"
            )
        return status

    async def charge(
        self, session: AsyncSession, user_id: int, role: Role, tokens: int, held: int = 0
    ) -> Charge | None:
        """Charge `tokens` inside the caller's transaction, atomically, and
        release `held` reserved tokens (`settle`): one statement, which also
        starts a new period when the row's is over (`charge_write`). None when
        nothing was charged."""
        write = self.charge_write(user_id, role, tokens, held)
        if write is None:
            return None
        row = (await execute(session, *write)).first()
        return self.charged(user_id, tokens, row)

    def charge_write(
        self, user_id: int, role: Role, tokens: int, held: int = 0
    ) -> tuple[Any, dict[str, Any]] | None:
        """The statement `charge` runs and its parameters (None: nothing to do),
        for a caller that runs it as a part of a larger statement; its row
        (used, overage) goes to `charged`."""
        if tokens <= 0 and held <= 0:
            return None
        params = {
            "b_user_id": user_id,
            "b_period": current_period(),
            "tokens": max(tokens, 0),
            "held": max(held, 0),
            "role_limit": self.role_allowance(role),
            "b_now": utcnow(),
        }
        return _CHARGE, params

    @staticmethod
    def charged(user_id: int, tokens: int, row: Any) -> Charge | None:
        """`charge`'s outcome from the charge statement's row (None: no row)."""
        if row is None:
            log.error("budget.missing user=%s tokens=%s (no budget row)", user_id, tokens)
            return None
        return Charge(used=int(row[0]), overage=int(row[1])) if tokens > 0 else None

    async def reserve(self, user_id: int, role: Role, tokens: int) -> Hold | None:
        """Reserve `tokens` if the allowance still covers them on top of what is
        used and reserved; None when it does not. Unlimited budgets always fit."""
        async with self._store.write() as session:
            held = await self._reserve(session, user_id, role, tokens)
            if held is None and await self._roll_period(session, user_id) == 0:
                if await session.get(Budget, user_id) is None:
                    await self._ensure_row(session, user_id)
                    held = await self._reserve(session, user_id, role, tokens)
            elif held is None:  # a new month began: try again on the fresh period
                held = await self._reserve(session, user_id, role, tokens)
        return Hold(user_id, role, tokens) if held else None

    async def _reserve(self, session: AsyncSession, user_id: int, role: Role, tokens: int) -> bool:
        now = utcnow()
        cap = self._cap_expression(role)
        live = case(
            (col(Budget.reserved_until).is_(None) | (col(Budget.reserved_until) < now), 0),
            else_=col(Budget.reserved),
        )
        until = case(
            (
                col(Budget.reserved_until).is_(None)
                | (col(Budget.reserved_until) < now + self._hold),
                now + self._hold,
            ),
            else_=col(Budget.reserved_until),
        )
        stmt = (
            update(Budget)
            .where(
                col(Budget.user_id) == user_id,
                col(Budget.period) == current_period(),
                cap.is_(None) | (col(Budget.used) + live + tokens <= cap),
            )
            .values(reserved=live + tokens, reserved_until=until)
            .returning(col(Budget.reserved))
        )
        return (await session.exec(stmt)).first() is not None

    async def settle(
        self, hold: Hold, tokens: int, session: AsyncSession | None = None
    ) -> Charge | None:
        """Release `hold` and charge what the call really used (in `session`'s
        transaction when given)."""
        if session is None:
            async with self._store.write() as own:
                return await self.settle(hold, tokens, own)
        return await self.charge(session, hold.user_id, hold.role, tokens, held=hold.tokens)

    async def available(self, user_id: int, role: Role) -> int | None:
        """Tokens a new reservation could take now (None: unlimited)."""
        async with self._store.read() as session:
            row = await session.get(Budget, user_id)
        status = await self.status(user_id, role)
        if status.limit is None:
            return None
        reserved = 0
        if row is not None and row.period == status.period and row.reserved_until is not None:
            reserved = row.reserved if row.reserved_until >= utcnow() else 0
        return max(status.limit - status.used - reserved, 0)

    async def set_limit(self, user_id: int, mode: LimitMode, tokens: int | None = None) -> None:
        self.forget(user_id)
        async with self._store.write() as session:
            await announce_account(session, self._store, user_id)
            await self._ensure_row(session, user_id)
            await session.exec(
                update(Budget)
                .where(col(Budget.user_id) == user_id)
                .values(limit_mode=mode, limit_tokens=tokens, updated_at=utcnow())
            )
        self.forget(user_id)  # again: a read during the change may have cached the old

    async def grant(self, user_id: int, tokens: int) -> None:
        self.forget(user_id)
        async with self._store.write() as session:
            await announce_account(session, self._store, user_id)
            await self._ensure_row(session, user_id)
            await self._roll_period(session, user_id)
            await session.exec(
                update(Budget)
                .where(col(Budget.user_id) == user_id)
                .values(granted=col(Budget.granted) + tokens, updated_at=utcnow())
            )
        self.forget(user_id)  # again: a read during the change may have cached the old

    async def reset(self, user_id: int) -> None:
        self.forget(user_id)
        async with self._store.write() as session:
            await announce_account(session, self._store, user_id)
            await self._ensure_row(session, user_id)
            await session.exec(
                update(Budget)
                .where(col(Budget.user_id) == user_id)
                .values(used=0, overage=0, period=current_period(), updated_at=utcnow())
            )
        self.forget(user_id)  # again: a read during the change may have cached the old

    def _allowance(self, mode: str, tokens: int | None, role: Role) -> int | None:
        if mode == "unlimited":
            return None
        if mode == "fixed":
            return tokens
        return self.role_allowance(role)

    def _cap_expression(self, role: Role) -> ColumnElement[Any]:
        """allowance + granted for `role`, computed by the database (NULL = unlimited)."""
        return _cap(bindparam("role_limit", self.role_allowance(role), type_=BigInteger))

    async def _roll_period(self, session: AsyncSession, user_id: int) -> int:
        period = current_period()
        result = await session.exec(
            update(Budget)
            .where(col(Budget.user_id) == user_id, col(Budget.period) != period)
            .values(period=period, used=0, overage=0, granted=0, updated_at=utcnow())
        )
        return int(result.rowcount or 0)

    async def _ensure_row(self, session: AsyncSession, user_id: int) -> None:
        if await session.get(Budget, user_id) is None:
            session.add(Budget(user_id=user_id, period=current_period()))
            await session.flush()


def _cap(role_limit: Any, granted: Any = None) -> ColumnElement[Any]:
    """allowance + granted, computed by the database (NULL = unlimited)."""
    allowance = case(
        (col(Budget.limit_mode) == "unlimited", None),
        (col(Budget.limit_mode) == "fixed", col(Budget.limit_tokens)),
        else_=role_limit,
    )
    return allowance + (col(Budget.granted) if granted is None else granted)


def _charge_statement() -> Any:
    """The charge, built once (building this expression costs more than running
    it): `used` climbs to the cap, the rest goes to `overage`; `held` reserved
    tokens are released. A row whose period is over starts the current one
    first (used, overage and granted from 0, as `_roll_period`), in the same
    statement, so a month's first charge is no extra round trip."""
    same = col(Budget.period) == bindparam("b_period")

    def this_period(column: Any) -> Any:
        return case((same, column), else_=0)

    used, overage, granted = (
        this_period(col(Budget.used)),
        this_period(col(Budget.overage)),
        this_period(col(Budget.granted)),
    )
    cap = _cap(bindparam("role_limit", type_=BigInteger), granted)
    tokens = bindparam("tokens", type_=BigInteger)
    held = bindparam("held", type_=BigInteger)
    fits = cap.is_(None) | (used + tokens <= cap)
    already_full = used >= cap
    return (
        update(Budget)
        .where(col(Budget.user_id) == bindparam("b_user_id"))
        .values(
            used=case((fits, used + tokens), (already_full, used), else_=cap),
            overage=overage + case((fits, 0), (already_full, tokens), else_=used + tokens - cap),
            granted=granted,
            period=bindparam("b_period"),
            reserved=case((col(Budget.reserved) > held, col(Budget.reserved) - held), else_=0),
            updated_at=bindparam("b_now"),
        )
        .returning(col(Budget.used), col(Budget.overage))
    )


_CHARGE = _charge_statement()

_STATUS = select(
    col(Budget.period),
    col(Budget.limit_mode),
    col(Budget.limit_tokens),
    col(Budget.granted),
    col(Budget.used),
    col(Budget.overage),
).where(col(Budget.user_id) == bindparam("s_user_id"))
"""What `status` reads of a user's budget row, built once: a Core statement
(the driver path on SQLite and PostgreSQL), no ORM object."""
