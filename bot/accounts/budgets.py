"""Monthly token budgets.

Every charge is one atomic SQL statement (no read-modify-write), so concurrent
runs never lose a charge: `used` climbs to the allowance and what a run spent
beyond it is added to `overage`, so real consumption stays visible.

Before each LLM call of a limited user its tokens are held (`reserve`), and
after it the hold is released and what the call used charged (`settle`), so
concurrent calls of one user cannot together spend past the allowance; the
holds are rows of their own, owned by the run and this instance, and die with
them (`bot.accounts.holds`). A message whose call does not fit only because of
the user's other calls in flight waits for them (`wait_for_release`).

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
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import update
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.accounts import holds
from bot.accounts.holds import (
    MIN_OUTPUT_TOKENS,
    BudgetRefused,
    Decision,
    Figures,
    Hold,
    HoldOwner,
    Releases,
    period_end,
)
from bot.accounts.identity import AccountRead, UserRecord, current_period
from bot.config import BudgetSettings
from bot.store import Store, budget_rows, mechanisms
from bot.store.coordination import (
    BUDGET,
    MISSED,
    announce_account,
    announce_released,
    tell_released,
)
from bot.store.forgotten import Forgotten
from bot.store.models import Budget
from bot.store.transient import retrying
from bot.types import Role, utcnow

log = logging.getLogger("switchboard.budget")

LimitMode = Literal["role", "fixed", "unlimited"]
LIMIT_CACHE_TTL_S = 10.0
_NO_CACHE = mechanisms.off("caches")
"""How long a user's limit read from the database is trusted by `check`."""
CACHE_LIMIT = 10_000


__all__ = ["BudgetStatus", "Budgets", "Charge", "Hold", "LimitMode", "period_end"]


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


class Budgets:
    def __init__(
        self,
        store: Store,
        defaults: BudgetSettings,
        hold_seconds: float = 900.0,
        instance: str = "",
    ) -> None:
        self._store = store
        self._defaults = defaults
        self.settings = defaults
        self._hold = timedelta(seconds=hold_seconds)
        """A hold's backstop: longer than any LLM call can take."""
        self.instance = instance
        """This process, as it appears on its holds (`Inbox.owner`)."""
        self.releases = Releases()
        """Messages of this process waiting for a user's holds to be released."""
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
        if cached is None or time.monotonic() - cached[0] >= LIMIT_CACHE_TTL_S or _NO_CACHE:
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
        read_at = time.monotonic()
        if session is None:
            async with self._store.read() as own:
                row = await budget_rows.read_status(own, user_id)
        else:
            row = await budget_rows.read_status(session, user_id)
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
        """The user's budget as a run begins; raises `BudgetRefused` when no
        call can fit what is left (settled usage and the least a call needs,
        `MIN_OUTPUT_TOKENS`, pass the allowance: refused before anything is
        built). For a budget known to be unlimited, no read: the status
        returned then has the limit (None) but not the usage."""
        mode = self._known_unlimited(user.id, user.role)
        if mode is not None:
            return BudgetStatus(current_period(), None, 0, 0, 0, mode)
        status = await self.status(user.id, user.role, session)
        if status.limit is not None and status.used + MIN_OUTPUT_TOKENS > status.limit:
            if session is None:
                async with self._store.read() as own:
                    held = await budget_rows.held_tokens(own, user.id, utcnow())
            else:
                held = await budget_rows.held_tokens(session, user.id, utcnow())
            figures = Figures(
                status.used, int(held or 0), MIN_OUTPUT_TOKENS, status.limit, status.period
            )
            raise BudgetRefused(figures)
        return status

    async def charge(
        self, session: AsyncSession, user_id: int, role: Role, tokens: int
    ) -> Charge | None:
        """Charge `tokens` inside the caller's transaction, atomically: one
        statement, which also starts a new period when the row's is over
        (`charge_write`). None when nothing was charged."""
        write = self.charge_write(user_id, role, tokens)
        if write is None:
            return None
        row = await budget_rows.charge(session, write)
        return self.charged(user_id, tokens, row)

    def charge_write(self, user_id: int, role: Role, tokens: int) -> budget_rows.ChargeWrite | None:
        """The statement `charge` runs and its parameters (None: nothing to do),
        for a caller that runs it as a part of a larger statement; its row
        (used, overage, awaited_until) goes to `charged`."""
        if tokens <= 0:
            return None
        return budget_rows.charge_write(
            user_id, current_period(), tokens, self.role_allowance(role), utcnow()
        )

    @staticmethod
    def charged(user_id: int, tokens: int, row: Any) -> Charge | None:
        """`charge`'s outcome from the charge statement's row (None: no row)."""
        if row is None:
            log.error("budget.missing user=%s tokens=%s (no budget row)", user_id, tokens)
            return None
        return Charge(used=int(row[0]), overage=int(row[1])) if tokens > 0 else None

    # -- holds (`bot.accounts.holds`) -----------------------------------------

    async def reserve(
        self, user_id: int, role: Role, owner: HoldOwner, input_tokens: int, max_tokens: int
    ) -> Decision:
        """Decide a call that reads `input_tokens` and may write `max_tokens`
        (the rule of `bot.accounts.holds`): a hold, a wait, or a refusal. A
        failure that passes (a connection the server ended, SQLite busy) is
        tried again on another connection; a hold written by a try whose
        answer was lost is released with the run's turn."""

        async def attempt() -> Decision:
            async with self._store.write() as session:
                return await self._reserve(session, user_id, role, owner, input_tokens, max_tokens)

        decision = await retrying(attempt, f"budget.reserve user={user_id}")
        if decision.figures is not None and decision.hold is None and not decision.waits:
            log.info("budget.refused user=%s %s", user_id, decision.figures.record())
        return decision

    async def _reserve(
        self,
        session: AsyncSession,
        user_id: int,
        role: Role,
        owner: HoldOwner,
        input_tokens: int,
        max_tokens: int,
    ) -> Decision:
        row = await budget_rows.lock_budget(session, user_id)
        if row is None:
            await self._ensure_row(session, user_id)
            row = await budget_rows.lock_budget(session, user_id)
        assert row is not None
        period, used, granted, mode, limit_tokens = row
        if period != current_period():  # a new month: nothing used or granted yet
            period, used, granted = current_period(), 0, 0
        allowance = self._allowance(mode, limit_tokens, role)
        if allowance is None:
            return Decision(None, max_tokens, None)
        allowance += granted
        now = utcnow()
        estimate = holds.estimate(input_tokens, max_tokens)
        if not holds.refused(used, allowance, input_tokens, max_tokens):
            wanted = budget_rows.WantedHold(
                user_id=user_id,
                run_id=owner.run_id,
                instance=self.instance,
                conversation_key=owner.conversation_key,
                input_tokens=input_tokens,
                room=allowance - used - input_tokens,
                max_tokens=max_tokens,
                least=min(holds.MIN_OUTPUT_TOKENS, max_tokens),
                now=now,
                expires_at=now + self._hold,
            )
            taken = await budget_rows.take_hold(session, wanted)
            if taken is not None:
                hold = Hold(taken[0], user_id, role, taken[1])
                figures = Figures(used, 0, estimate, allowance, period)
                return Decision(hold, hold.tokens - input_tokens, figures)
        held = await budget_rows.held_tokens(session, user_id, now)
        figures = Figures(used, held, estimate, allowance, period)
        if holds.refused(used, allowance, input_tokens, max_tokens):
            return Decision(None, 0, figures)
        # The user's other calls hold what is missing (or held it a moment
        # ago: a hold released since the INSERT looked): wait, then again.
        until = now + timedelta(seconds=holds.AWAITED_S)
        await budget_rows.mark_awaited(session, user_id, until)
        return Decision(None, 0, figures, waits=True)

    async def settle(
        self, hold: Hold, tokens: int, log_row: budget_rows.TokenLogRow | None = None
    ) -> Charge | None:
        """Release `hold` and charge what the call really used, in one
        transaction, with the call's token log (`log_row`) when given: a run
        that dies before its turn is written leaves no charge without its
        log. Other instances waiting for the user's holds are told
        (PostgreSQL), this one's woken."""
        try:
            async with self._store.write() as session:
                await budget_rows.release_hold(session, hold.id, log_row)
                write = self.charge_write(hold.user_id, hold.role, tokens)
                if write is None:
                    return None
                row = await budget_rows.charge(session, write)
                if row is not None and row[2] is not None and row[2] > utcnow():
                    await announce_released(session, self._store, hold.user_id)
                return self.charged(hold.user_id, tokens, row)
        finally:
            self.releases.wake(hold.user_id)

    def release_write(self, run_id: str) -> budget_rows.ChargeWrite:
        """The statement that releases every hold of a run, for its turn's
        write (none of its calls is in flight any more)."""
        return budget_rows.release_run_write(run_id)

    async def release_dead(self, session: AsyncSession, taken: list[tuple[str, str]]) -> set[int]:
        """In the transaction of a takeover: release the holds of the runs
        taken over — (instance, conversation key) of each, another instance's
        — and the holds past their backstop; returns the users whose holds
        went (for `released`)."""
        pairs = sorted({pair for pair in taken if pair[0] != self.instance})
        return await budget_rows.release_dead_holds(session, pairs, utcnow())

    async def released(self, user_ids: set[int]) -> None:
        """Holds of these users went (a takeover, a turn's write): wake the
        messages waiting for them here, and tell the other instances."""
        for user_id in user_ids:
            self.releases.wake(user_id)
        if not user_ids:
            return
        try:
            await tell_released(self._store, user_ids)
        except Exception as exc:  # a hint only: waiting messages look again soon
            log.warning("budget.release_notice_failed: %s", exc)

    async def wait_for_release(self, user_id: int, within: float) -> None:
        """Return when a hold of the user may have been released (here, on
        another instance), or after `within` seconds (or `holds.WAIT_POLL_S`)."""
        await self.releases.wait(user_id, within)

    def heard(self, kind: str, key: str) -> None:
        """A notice from another instance (`Coordination.subscribe`)."""
        if kind == BUDGET:
            self.releases.wake(int(key))
        elif kind == MISSED:
            self.releases.wake_all()

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
