"""Budgets: atomic charging under concurrency, periods, overrides."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from sqlalchemy import event, update
from sqlmodel import col, select

from bot.accounts.budgets import Budgets, period_end
from bot.accounts.holds import HoldOwner
from bot.accounts.identity import Identity, current_period
from bot.config import BudgetSettings
from bot.errors import BudgetExceeded
from bot.store import Store
from bot.store.models import Budget, BudgetHold
from bot.types import Role


async def make_user(store: Store, name: str = "alice"):  # type: ignore[no-untyped-def]
    return await Identity(store, ()).resolve_account("console", name)


async def charge(store: Store, budgets: Budgets, user_id: int, role: Role, n: int):  # type: ignore[no-untyped-def]
    async with store.write() as session:
        return await budgets.charge(session, user_id, role, n)


async def test_concurrent_charges_never_exceed_the_allowance(store: Store):
    budgets = Budgets(store, BudgetSettings(guest=10))
    user = await make_user(store)
    await asyncio.gather(*(charge(store, budgets, user.id, Role.GUEST, 1) for _ in range(50)))

    status = await budgets.status(user.id, Role.GUEST)
    assert status.used == 10  # room for 10: exactly 10 charged against the allowance
    assert status.overage == 40  # and no charge was lost
    assert status.exhausted
    with pytest.raises(BudgetExceeded):
        await budgets.check(user)


async def test_charge_beyond_the_remainder_goes_to_overage(store: Store):
    budgets = Budgets(store, BudgetSettings(guest=100))
    user = await make_user(store)
    await charge(store, budgets, user.id, Role.GUEST, 70)
    result = await charge(store, budgets, user.id, Role.GUEST, 50)
    assert result is not None and (result.used, result.overage) == (100, 20)


async def test_unlimited_roles_and_overrides(store: Store):
    budgets = Budgets(store, BudgetSettings(guest=10, admin=None))
    user = await make_user(store)
    await charge(store, budgets, user.id, Role.ADMIN, 1_000_000)
    assert (await budgets.status(user.id, Role.ADMIN)).remaining is None

    await budgets.set_limit(user.id, "fixed", 500)
    status = await budgets.status(user.id, Role.ADMIN)
    assert (status.limit, status.exhausted) == (500, True)

    await budgets.grant(user.id, 1_000_000)
    assert (await budgets.status(user.id, Role.ADMIN)).remaining == 500

    await budgets.set_limit(user.id, "unlimited")
    assert (await budgets.status(user.id, Role.GUEST)).limit is None

    await budgets.reset(user.id)
    assert (await budgets.status(user.id, Role.GUEST)).used == 0


async def test_a_new_month_starts_from_zero(store: Store):
    budgets = Budgets(store, BudgetSettings(guest=10))
    user = await make_user(store)
    await charge(store, budgets, user.id, Role.GUEST, 10)
    async with store.write() as session:  # pretend the charge happened last month
        await session.exec(
            update(Budget).where(col(Budget.user_id) == user.id).values(period="2000-01", granted=5)
        )
    status = await budgets.status(user.id, Role.GUEST)
    assert (status.used, status.granted, status.exhausted) == (0, 0, False)
    result = await charge(store, budgets, user.id, Role.GUEST, 3)
    assert result is not None and result.used == 3


def test_period_end_rolls_over_the_year():
    assert period_end("2026-12") == datetime(2027, 1, 1, tzinfo=UTC)
    assert period_end("2026-02") == datetime(2026, 3, 1, tzinfo=UTC)


async def test_a_months_first_charge_starts_the_period_in_the_same_statement(store: Store):
    """Last month's used, overage and grant do not count: the charge starts
    the new period from zero and charges against it, in one statement."""
    budgets = Budgets(store, BudgetSettings(guest=10))
    user = await make_user(store)
    async with store.write() as session:  # last month: full, over by 7, 5 granted
        await session.exec(
            update(Budget)
            .where(col(Budget.user_id) == user.id)
            .values(period="2000-01", used=15, overage=7, granted=5)
        )
    seen: list[str] = []
    listen = lambda *args: seen.append(args[2])  # noqa: E731
    event.listen(store.engine.sync_engine, "before_cursor_execute", listen)
    try:
        result = await charge(store, budgets, user.id, Role.GUEST, 14)
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", listen)
    [write] = [s for s in seen if not s.lstrip().upper().startswith("BEGIN")]
    assert write.lstrip().upper().startswith("UPDATE")
    assert result is not None and (result.used, result.overage) == (10, 4)
    status = await budgets.status(user.id, Role.GUEST)
    assert (status.period, status.used, status.overage, status.granted) == (
        current_period(),
        10,
        4,
        0,
    )


async def test_settling_releases_the_hold_and_charges_what_was_used(store: Store):
    budgets = Budgets(store, BudgetSettings(guest=100))
    user = await make_user(store)
    owner = HoldOwner("run-1", "console:alice")
    first = await budgets.reserve(user.id, Role.GUEST, owner, 40, 40)
    assert first.hold is not None and (first.hold.tokens, first.max_tokens) == (80, 40)
    other = await budgets.reserve(user.id, Role.GUEST, HoldOwner("run-2", "c2"), 10, 20)
    assert (other.hold, other.waits) == (None, True)  # 80 held of 100: wait for it
    result = await budgets.settle(first.hold, 25)
    assert result is not None and (result.used, result.overage) == (25, 0)
    async with store.read() as session:
        assert (await session.exec(select(BudgetHold))).all() == []  # released
    again = await budgets.reserve(user.id, Role.GUEST, owner, 40, 35)
    assert again.hold is not None and again.hold.tokens == 75
