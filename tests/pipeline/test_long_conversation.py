"""A 200-turn conversation with tool results through the real pipeline and SDK:
every request stays valid (the fake validates tool pairing and refuses prompts
over the context window) and under the context budget, every turn is answered,
and nothing stored is lost along the way."""

from __future__ import annotations

import pytest
from sqlmodel import col, func, select

from bot.store.models import ConversationSummary, Message, Run, StoredToolResult
from tests.fakes.anthropic import estimate_tokens
from tests.harness import RecordingAdapter, message
from tests.scripted import ScriptedModel, SearchTool, is_flush, is_summary, question

TURNS = 200
WINDOW = 10_000


@pytest.mark.slow
async def test_two_hundred_turns_stay_valid_and_within_the_window(make_app, fake_anthropic):
    model = ScriptedModel()
    fake_anthropic.responder = model
    fake_anthropic.context_window = WINDOW
    fake_anthropic.simulate_cache = True
    search = SearchTool()
    app = await make_app(
        tools=(search,),
        budgets={"guest": "unlimited"},
        agent={"models": {"claude-sonnet-5-5": {"context_window": WINDOW}}},
    )
    adapter = RecordingAdapter()
    app.attach(adapter)

    for turn in range(TURNS):
        outcome = await app.pipeline.handle(message(question(turn)))
        assert outcome.status == "answered", (turn, outcome)
        await app.pipeline.idle()
        failed = [r for r in fake_anthropic.requests if r.status != 200]
        assert not failed, (turn, failed[0].status, failed[0].body.get("messages", [])[:1])

    assert len(adapter.texts) == TURNS
    assert all(f"About question {turn}:" in text for turn, text in enumerate(adapter.texts))
    main = [r for r in fake_anthropic.requests if not is_summary(r.body) and not is_flush(r.body)]
    sizes = [estimate_tokens([r.system, r.messages, r.tools]) for r in main]
    assert max(sizes) <= WINDOW
    assert model.summaries >= 3 and model.flushes == model.summaries

    async with app.store.read() as s:
        user_rows = (
            await s.exec(select(func.count()).select_from(Message).where(Message.role == "user"))
        ).one()
        results = (
            await s.exec(
                select(func.count()).select_from(Message).where(Message.role == "tool_result")
            )
        ).one()
        runs = (await s.exec(select(Run.status))).all()
        summaries = (
            await s.exec(select(ConversationSummary).order_by(col(ConversationSummary.id)))
        ).all()
        stored = (await s.exec(select(func.count()).select_from(StoredToolResult))).one()
    assert user_rows == TURNS and results == TURNS  # compaction never deletes anything
    assert runs.count("completed") == TURNS
    assert all(s.kind == "summary" for s in summaries)
    ids = [s.up_to_message_id for s in summaries]
    assert ids == sorted(ids)
    assert stored == sum(1 for t in range(TURNS) if t % 7 == 3)  # large results, stored whole
    assert search.calls == TURNS
