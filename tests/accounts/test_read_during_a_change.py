"""A read of an account's records that began before an operator's change, and
whose answer arrives after this process heard of the change (and dropped its
caches), is not cached: it holds what the change replaced, and cached it
would be trusted for the cache's TTL (10-30 s) as if the change had never
been made. The change is made as the CLI makes it, through a store of its
own (another process), and heard as the service hears it: PostgreSQL's
notice, SQLite's look at the file. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from bot.accounts.budgets import Budgets
from bot.accounts.directory import Directory
from bot.accounts.identity import Identity
from bot.errors import BudgetExceeded
from bot.store import accounts as account_rows
from bot.store import budget_rows
from bot.store import memories as memories_module
from bot.store.coordination import ACCOUNT
from bot.store.memories import MemoryStore
from bot.types import Role
from tests.accounts.test_budget_reservations import NOTICE_S, earlier_notices_heard
from tests.conftest import Database
from tests.harness import message

Change = Callable[[Any], Awaitable[None]]
"""The operator's change, given the other process's store."""


async def change_heard_during_a_read(
    app: Any,
    database: Database,
    monkeypatch: pytest.MonkeyPatch,
    module: Any,
    user_id: int,
    change: Change,
) -> list[int]:
    """Arm `module`'s next statement: once its answer is back, and before it
    is handed on, `change` is made through another process's store and this
    app hears of it. Returns a list that holds 1 once that happened."""
    coordination = app.pipeline.s.coordination
    heard = asyncio.Event()
    await coordination.listen(
        lambda kind, key: heard.set() if (kind, key) == (ACCOUNT, str(user_id)) else None
    )
    await earlier_notices_heard(coordination)
    heard.clear()
    real = module.execute
    done: list[int] = []

    async def answered_then_changed(*args: Any, **kwargs: Any) -> Any:
        result = await real(*args, **kwargs)
        if not done:
            done.append(1)
            other = database.store()
            try:
                await change(other)
            finally:
                await other.dispose()
            if app.store.is_sqlite:  # as the next message's intake looks
                await app.store.look_elsewhere()
            else:  # as the notice reaches the running service
                await asyncio.wait_for(heard.wait(), NOTICE_S)
        return result

    monkeypatch.setattr(module, "execute", answered_then_changed)
    return done


async def test_a_limit_read_while_it_was_set_is_not_cached(
    make_app, database: Database, monkeypatch: pytest.MonkeyPatch
):
    app = await make_app(budgets={"guest": "unlimited"})
    s = app.pipeline.s
    user = await s.identity.resolve(message("hi"))
    s.budgets.forget()  # what the account's creation cached: the next check reads

    async def no_tokens_left(other: Any) -> None:
        await Budgets(other, app.settings.budgets).set_limit(user.id, "fixed", 0)

    done = await change_heard_during_a_read(
        app, database, monkeypatch, budget_rows, user.id, no_tokens_left
    )
    status = await s.budgets.check(user)  # the read that began before the change
    assert done and status.limit is None  # what it read: unlimited, as before the change
    with pytest.raises(BudgetExceeded):  # the next check reads the limit again
        await s.budgets.check(user)


async def test_a_role_read_while_it_was_changed_is_not_cached(
    make_app, database: Database, monkeypatch: pytest.MonkeyPatch
):
    app = await make_app()
    s = app.pipeline.s
    user = await s.identity.resolve(message("hi"))
    assert user.role is Role.GUEST
    s.identity.forget()  # the next resolve reads the account

    async def made_admin(other: Any) -> None:
        await Directory(other, Identity(other, ())).set_role(user.id, Role.ADMIN)

    done = await change_heard_during_a_read(
        app, database, monkeypatch, account_rows, user.id, made_admin
    )
    before = await s.identity.resolve(message("again"))  # began before the change
    assert done and before.role is Role.GUEST
    assert (await s.identity.resolve(message("and again"))).role is Role.ADMIN


async def test_no_memories_read_while_one_was_saved_is_not_cached(
    make_app, database: Database, monkeypatch: pytest.MonkeyPatch
):
    app = await make_app()
    s = app.pipeline.s
    user = await s.identity.resolve(message("hi"))
    s.memories.forget()  # "none", known since the account's creation: the next search asks

    async def saved(other: Any) -> None:
        await MemoryStore(other).save(user.id, "Alice likes cheese")

    done = await change_heard_during_a_read(
        app, database, monkeypatch, memories_module, user.id, saved
    )
    assert await s.memories.search(user.id, "cheese") == []  # its read said none
    assert done
    found = await s.memories.search(user.id, "cheese")
    assert [m.text for m in found] == ["Alice likes cheese"]
