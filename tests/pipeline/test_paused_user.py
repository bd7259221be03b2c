"""A user back after a pause (longer than their cached records are trusted):
one read of the account brings the budget's limit and whether they have
memories, so neither is read again on its own, and what changed meanwhile on
another instance still counts. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time

from bot.accounts.budgets import Budgets
from bot.store.memories import MemoryStore
from tests.benchmarks.pipeline import back_after_a_pause
from tests.harness import message
from tests.pipeline.test_hot_path import account_reads, open_app, reading, statements


async def test_a_user_back_after_a_pause_has_budget_and_memories_read_with_the_account(
    make_app, fake_anthropic
):
    app, _ = await open_app(make_app, budgets={"guest": "unlimited"})
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    back_after_a_pause(app, message("again"))
    with statements(app) as seen:
        assert (await app.pipeline.handle(message("what about cheese"))).status == "answered"
    assert len(account_reads(seen)) == 1, seen
    assert reading(seen, "budgets") == [] and reading(seen, "memories") == []


async def test_a_limit_set_elsewhere_during_the_pause_is_enforced_on_return(
    make_app, fake_anthropic
):
    app, adapter = await open_app(make_app, budgets={"guest": "unlimited"})
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    user = await app.pipeline.s.identity.resolve(message("x"))
    # The CLI (another process): its own Budgets object on the same database.
    await Budgets(app.store, app.settings.budgets).set_limit(user.id, "fixed", 1)
    calls = fake_anthropic.request_count
    back_after_a_pause(app, message("again"))
    refused = await app.pipeline.handle(message("still there?"))
    assert refused.status == "refused" and "allowance" in adapter.texts[-1]
    assert fake_anthropic.request_count == calls  # no LLM call


async def test_a_memory_saved_elsewhere_during_the_pause_is_recalled_on_return(
    make_app, fake_anthropic
):
    app, _ = await open_app(make_app)
    assert (await app.pipeline.handle(message("hello"))).status == "answered"
    user = await app.pipeline.s.identity.resolve(message("x"))
    # "no memories" is known here for this user; another instance saves one
    await MemoryStore(app.store).save(user.id, "Alice likes cheese")
    back_after_a_pause(app, message("again"))
    assert (await app.pipeline.handle(message("what about cheese"))).status == "answered"
    assert "Alice likes cheese" in json.dumps(fake_anthropic.last_request.body)


async def test_memories_known_here_outlast_an_account_read_that_began_before_them(
    make_app, fake_anthropic
):
    """The account's read started before a memory was saved here and says
    none: what this process saved still counts (memories are never deleted)."""
    app, _ = await open_app(make_app)
    assert (await app.pipeline.handle(message("hello"))).status == "answered"
    user = await app.pipeline.s.identity.resolve(message("x"))
    here: MemoryStore = app.pipeline.s.memories
    read_at = time.monotonic()
    await here.save(user.id, "Alice likes cheese")
    here.presence_read(user.id, False, read_at)  # the older read's answer arrives late
    assert [m.text for m in await here.search(user.id, "cheese")] == ["Alice likes cheese"]
