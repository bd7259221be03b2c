"""Memories per user with full-text search (SQLite FTS5, PostgreSQL tsvector),
the memory tools through the pipeline, and recall into the prompt."""

from __future__ import annotations

import pytest
from sqlmodel import select

from bot.agent.untrusted import unwrap
from bot.store import Store
from bot.store.memories import MemoryStore, search_terms
from bot.store.models import Memory, User
from tests.fakes.anthropic import text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message


async def users(store: Store, count: int) -> list[int]:
    async with store.write() as session:
        rows = [User(display_name=f"u{i}") for i in range(count)]
        session.add_all(rows)
        await session.flush()
        return [row.id for row in rows if row.id is not None]


def test_search_terms():
    assert search_terms("What's the DEPLOY schedule for staging?") == [
        "deploy",
        "schedule",
        "staging",
    ]
    assert search_terms("the a of") == []
    assert search_terms("\"quotes\" OR * NEAR(x) 'y':*") == ["quotes", "near"]


async def test_save_search_and_get_per_user(store: Store):
    alice, bob = await users(store, 2)
    memories = MemoryStore(store)
    editor, created = await memories.save(alice, "Prefers the Helix editor")
    assert created
    again, created = await memories.save(alice, "  Prefers the   Helix editor ")
    assert not created and again.id == editor.id  # the same fact is stored once
    await memories.save(alice, "Deploys to staging every Friday afternoon")
    await memories.save(alice, "Has a cat named Pixel")
    await memories.save(bob, "Prefers the Vim editor")

    found = await memories.search(alice, "which editor?")
    assert [m.text for m in found] == ["Prefers the Helix editor"]  # never Bob's
    assert [m.text for m in await memories.search(alice, "deploy")] == [
        "Deploys to staging every Friday afternoon"  # prefix match: deploy → Deploys
    ]
    several = await memories.search(alice, "cat editor staging", limit=2)
    assert len(several) == 2
    assert await memories.search(alice, "kubernetes") == []
    assert await memories.search(alice, "") == []

    assert (await memories.get(alice, editor.id)) == editor
    assert await memories.get(bob, editor.id) is None
    assert await memories.count(alice) == 3


async def test_search_ranks_better_matches_first(store: Store):
    (alice,) = await users(store, 1)
    memories = MemoryStore(store)
    await memories.save(alice, "Likes tea")
    await memories.save(alice, "Tea: green tea in the morning, black tea after lunch")
    found = await memories.search(alice, "tea morning")
    assert found[0].text.startswith("Tea: green tea in the morning")


async def test_the_index_follows_updates_and_deletes(store: Store):
    (alice,) = await users(store, 1)
    memories = MemoryStore(store)
    record, _ = await memories.save(alice, "Works on the billing service")
    async with store.write() as session:
        row = await session.get(Memory, record.id)
        assert row is not None
        row.text = "Works on the search service"
    assert await memories.search(alice, "billing") == []
    assert [m.id for m in await memories.search(alice, "search")] == [record.id]
    async with store.write() as session:
        row = await session.get(Memory, record.id)
        await session.delete(row)
    assert await memories.search(alice, "search") == []


async def test_limits():
    store_like = MemoryStore.__new__(MemoryStore)
    with pytest.raises(ValueError):
        await store_like.save(1, "   ")
    with pytest.raises(ValueError):
        await store_like.save(1, "x" * 2001)


async def test_memory_tools_through_the_pipeline(make_app, fake_anthropic):
    app = await make_app(budgets={"guest": "unlimited"})
    adapter = RecordingAdapter()
    app.attach(adapter)
    fake_anthropic.script(
        tool_use_reply(tool_call("memory_save", {"text": "Alice's team is called Platform"})),
        text_reply("Noted."),
        tool_use_reply(tool_call("memory_search", {"query": "team"})),
        text_reply("Your team is Platform."),
        tool_use_reply(tool_call("memory_get", {"id": 1}), tool_call("memory_get", {"id": 99})),
        text_reply("Done."),
    )
    await app.pipeline.handle(message("remember my team is Platform"))
    await app.pipeline.handle(message("what's my team?"))
    await app.pipeline.handle(message("show memory 1"))

    def results(i: int) -> list[dict]:  # type: ignore[type-arg]
        return [
            b
            for b in fake_anthropic.requests[i].messages[-1]["content"]
            if b["type"] == "tool_result"
        ]

    assert results(1)[0]["content"] == "Saved to memory (#1)."
    found = results(3)[0]["content"]  # what memory holds reaches the model as data
    assert found.startswith('<untrusted source="tool_result" tool="memory_search">')
    assert unwrap(found).endswith(": Alice's team is called Platform")
    got, missing = results(5)
    assert "Alice's team is called Platform" in got["content"]
    assert missing["is_error"] and "no memory #99" in missing["content"]
    # Recalled into the per-turn context of a later, related message.
    tail = fake_anthropic.requests[2].messages[-1]["content"][-1]["text"]
    assert "Alice's team is called Platform" in tail

    # Another user does not see it.
    fake_anthropic.script(tool_use_reply(tool_call("memory_get", {"id": 1})), text_reply("no"))
    await app.pipeline.handle(message("peek", platform_user_id="mallory"))
    peek = fake_anthropic.last_request.messages[-1]["content"][0]
    assert peek["is_error"] and "no memory #1" in peek["content"]
    async with app.store.read() as s:
        assert len((await s.exec(select(Memory))).all()) == 1


async def test_memory_can_be_turned_off(make_app, fake_anthropic):
    app = await make_app(agent={"memory": False})
    app.attach(RecordingAdapter())
    await app.pipeline.handle(message("hi"))
    names = {t["name"] for t in fake_anthropic.last_request.tools}
    assert not names & {"memory_save", "memory_search", "memory_get"}
