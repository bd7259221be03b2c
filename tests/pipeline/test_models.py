"""Providers, fallback chains, the auxiliary and the economy model, through the
real pipeline: the real `anthropic` SDK against the fake Messages API and the
real `openai` SDK against the fake Chat Completions API (`tests.fakes.openai_chat`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlmodel import col, select

from bot.store.models import TokenLog, TraceSpan
from tests.fakes.anthropic import (
    FakeUsage,
    MessageReply,
    bad_request,
    overloaded_error,
    text_reply,
)
from tests.fakes.openai_chat import (
    ChatReply,
    FakeOpenAI,
    chat_error,
    chat_reply,
    chat_tool_call,
)
from tests.harness import message
from tests.pipeline.test_compaction import chat
from tests.pipeline.test_live import StreamingAdapter
from tests.probes import ProbeTool
from tests.waiting import wait_until

LOCAL_KEY = "sk-local-test-key"


@pytest.fixture
async def fake_openai(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeOpenAI]:
    monkeypatch.setenv("LOCAL_KEY", LOCAL_KEY)
    monkeypatch.setenv("POOL_KEY_1", "sk-pool-one")
    monkeypatch.setenv("POOL_KEY_2", "sk-pool-two")
    async with FakeOpenAI(api_keys={LOCAL_KEY, "sk-pool-one", "sk-pool-two"}) as fake:
        yield fake


def providers(fake: FakeOpenAI, **llm: Any) -> dict[str, Any]:
    local = {"kind": "openai", "base_url": fake.base_url, "api_key_env": "LOCAL_KEY"}
    pool = {
        "kind": "openai",
        "base_url": fake.base_url,
        "api_key_envs": ["POOL_KEY_1", "POOL_KEY_2"],
    }
    return {"providers": {"local": local, "pool": pool}, "max_retries": 0, **llm}


async def start(make_app: Any, fake: FakeOpenAI, *tools: Any, **sections: Any) -> Any:
    sections.setdefault("budgets", {"guest": "unlimited"})
    sections["llm"] = providers(fake, **sections.get("llm", {}))
    sections.setdefault("streaming", {"interval_seconds": 0.02})
    app = await make_app(tools=tools, **sections)
    adapter = StreamingAdapter()
    app.attach(adapter)
    return app, adapter


async def spans(app: Any) -> list[TraceSpan]:
    async with app.store.read() as session:
        return list((await session.exec(select(TraceSpan).order_by(col(TraceSpan.id)))).all())


async def token_logs(app: Any) -> list[TokenLog]:
    async with app.store.read() as session:
        return list((await session.exec(select(TokenLog).order_by(col(TokenLog.id)))).all())


def fallbacks(app: Any, to: str, reason: str) -> float:
    labels = {"from": "claude-sonnet-5-5", "to": to, "reason": reason}
    value = app.metrics.registry.get_sample_value("switchboard_llm_fallbacks_total", labels)
    return value or 0.0


async def test_an_openai_kind_provider_answers_a_conversation_with_a_tool_call(
    make_app, fake_anthropic, fake_openai
):
    clock = ProbeTool("clock")
    app, adapter = await start(make_app, fake_openai, clock, llm={"model": "local/gpt-test"})
    fake_openai.script(
        chat_tool_call("clock", {"x": "UTC"}, text="Let me look."),
        ChatReply(text="It is noon.", prompt_tokens=900, completion_tokens=12, cached_tokens=800),
    )
    outcome = await app.pipeline.handle(message("what time is it?"))

    assert outcome.status == "answered" and adapter.texts == ["It is noon."]
    assert clock.calls == [{"x": "UTC"}]
    first, second = fake_openai.requests
    assert first.model == second.model == "gpt-test"
    assert first.api_key == LOCAL_KEY
    assert first.json["stream"] is True
    assert first.json["stream_options"] == {"include_usage": True}
    assert first.messages[0]["role"] == "system"
    assert "clock" in [t["function"]["name"] for t in first.tools]
    at = next(i for i, m in enumerate(second.messages) if m.get("tool_calls"))
    call = second.messages[at]["tool_calls"][0]
    assert call["function"]["name"] == "clock"
    assert second.messages[at]["content"] == "Let me look."
    assert second.messages[at + 1] == {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": "clock ok UTC",
    }
    assert fake_anthropic.request_count == 0
    logs = await token_logs(app)
    assert [log.model for log in logs] == ["local/gpt-test", "local/gpt-test"]
    assert (logs[1].input_tokens, logs[1].cache_read_tokens, logs[1].output_tokens) == (
        100,
        800,
        12,
    )
    assert [s.name for s in await spans(app) if s.kind == "llm"] == ["local/gpt-test"] * 2


async def test_overloaded_the_reply_comes_from_the_fallback(make_app, fake_anthropic, fake_openai):
    app, adapter = await start(make_app, fake_openai, llm={"fallback": ["local/backup"]})
    fake_anthropic.script(overloaded_error())
    fake_openai.script(chat_reply("From the backup."))
    outcome = await app.pipeline.handle(message("hello"))

    assert outcome.status == "answered" and adapter.texts == ["From the backup."]
    assert [r.model for r in fake_openai.requests] == ["backup"]
    llm = [s for s in await spans(app) if s.kind == "llm"]
    assert [(s.name, s.is_error) for s in llm] == [
        ("claude-sonnet-5-5", True),
        ("local/backup", False),
    ]
    assert llm[0].detail == "overloaded: went on to local/backup"
    assert fallbacks(app, "local/backup", "overloaded") == 1


async def test_a_timeout_goes_on_to_the_fallback(make_app, fake_anthropic, fake_openai):
    app, adapter = await start(
        make_app, fake_openai, llm={"fallback": ["local/backup"], "timeout_seconds": 0.5}
    )
    fake_anthropic.script(text_reply("too late", delay=5))
    fake_openai.script(chat_reply("In time."))
    outcome = await app.pipeline.handle(message("hello"))

    assert outcome.status == "answered" and adapter.texts == ["In time."]
    assert fallbacks(app, "local/backup", "timeout") == 1


async def test_a_stream_cut_midway_is_replaced_not_doubled(make_app, fake_anthropic, fake_openai):
    app, adapter = await start(make_app, fake_openai, llm={"fallback": ["local/backup"]})
    partial = "Half of an answer from the first model"
    fake_anthropic.script(
        MessageReply(
            content=({"type": "text", "text": partial},),
            truncate=True,
            abort=True,
            chunk_size=6,
            chunk_delay=0.02,
        )
    )
    answered = asyncio.Event()
    whole = "The whole answer, from the fallback."
    fake_openai.script(ChatReply(text=whole, hold=answered))
    task = asyncio.create_task(app.pipeline.handle(message("hello")))
    await wait_until(
        lambda: bool(adapter.lives) and any("Half" in u for u in adapter.lives[0].updates)
    )
    await fake_openai.wait_for_requests(1)  # the first model failed: the fallback is asked
    answered.set()
    outcome = await task

    assert outcome.status == "answered" and adapter.texts == [whole]
    (live,) = adapter.lives
    assert not any("Half" in u and "whole" in u for u in live.updates)
    after = live.updates[next(i for i, u in enumerate(live.updates) if "whole" in u) :]
    assert after and not any("Half" in u for u in after)  # replaced, never beside it
    assert adapter.sent[0].drafts == live.drafts()  # the final reply edits the draft
    assert fallbacks(app, "local/backup", "unavailable") == 1


async def test_a_bad_request_never_falls_back(make_app, fake_anthropic, fake_openai):
    app, adapter = await start(make_app, fake_openai, llm={"fallback": ["local/backup"]})
    fake_anthropic.script(bad_request("messages: something we sent is wrong"))
    outcome = await app.pipeline.handle(message("hello"))

    assert outcome.status == "failed"
    assert fake_openai.requests == []  # never sent elsewhere
    (line,) = adapter.texts
    assert "refused the request (400)" in line and "\n" not in line


async def test_when_the_whole_chain_fails_the_user_gets_one_line(
    make_app, fake_anthropic, fake_openai
):
    app, adapter = await start(make_app, fake_openai, llm={"fallback": ["local/backup"]})
    fake_anthropic.script(overloaded_error())
    fake_openai.script(chat_error(503, "no capacity"))
    outcome = await app.pipeline.handle(message("hello"))

    assert outcome.status == "failed"
    (line,) = adapter.texts
    assert "none of the configured models could answer" in line and "\n" not in line
    assert fallbacks(app, "local/backup", "overloaded") == 1


async def test_a_key_pool_rotates_on_429(make_app, fake_anthropic, fake_openai, caplog):
    app, adapter = await start(make_app, fake_openai, llm={"model": "pool/gpt-test"})
    fake_openai.script_for("sk-pool-one", chat_error(429, "Rate limit reached", "rate_limit"))
    fake_openai.script(chat_reply("first"), chat_reply("second"))
    with caplog.at_level(logging.INFO, logger="switchboard.llm"):
        await app.pipeline.handle(message("one"))
        await app.pipeline.handle(message("two", platform_message_id="m2"))

    assert adapter.texts == ["first", "second"]
    assert [r.api_key for r in fake_openai.requests] == [
        "sk-pool-one",
        "sk-pool-two",
        "sk-pool-two",  # the pool stays on the key that answered
    ]
    assert "from=POOL_KEY_1 to=POOL_KEY_2" in caplog.text
    assert "sk-pool" not in caplog.text  # the keys' names, never the keys


async def test_compaction_goes_to_the_auxiliary_model(make_app, fake_anthropic, fake_openai):
    app, _ = await start(
        make_app,
        fake_openai,
        llm={"auxiliary_model": "local/cheap"},
        agent={"compact_messages": 6, "keep_last_messages": 4},
    )
    await chat(app, "apples?", "pears?", "plums?", "figs?")

    assert {r.model for r in fake_anthropic.requests} == {"claude-sonnet-5-5"}
    summary = [r for r in fake_openai.requests if "running summary" in str(r.messages[0])]
    flush = [r for r in fake_openai.requests if "[Memory flush" in str(r.messages)]
    assert summary and flush
    assert {r.model for r in fake_openai.requests} == {"cheap"}
    purposes = {log.purpose: log.model for log in await token_logs(app)}
    assert purposes["compaction"] == purposes["memory_flush"] == "local/cheap"


async def test_a_user_low_on_budget_is_answered_by_the_economy_model(
    make_app, fake_anthropic, fake_openai
):
    budgets = {"guest": 100_000, "economy_model": "local/eco", "economy_below": 0.5}
    llm = {"prices": {"local/eco": {"input": 0.5, "output": 1.0}}}
    app, adapter = await start(make_app, fake_openai, budgets=budgets, llm=llm)
    fake_anthropic.script(text_reply("big", usage=FakeUsage(input_tokens=60_000, output_tokens=10)))
    fake_openai.script(ChatReply(text="cheap", prompt_tokens=1000, completion_tokens=100))
    await app.pipeline.handle(message("one"))
    await app.pipeline.handle(message("two", platform_message_id="m2"))
    await app.pipeline.handle(message("/usage", platform_message_id="m3"))

    assert adapter.texts[:2] == ["big", "cheap"]
    assert [r.model for r in fake_openai.requests] == ["eco"]
    assert fake_anthropic.request_count == 1
    eco = (await token_logs(app))[-1]
    assert eco.model == "local/eco"
    assert eco.cost_usd == pytest.approx((1000 * 0.5 + 100 * 1.0) / 1_000_000)
    assert "economy model (local/eco)" in adapter.texts[2]


async def test_an_unknown_price_is_charged_at_the_highest(
    make_app, fake_anthropic, fake_openai, caplog
):
    with caplog.at_level(logging.WARNING, logger="switchboard.app"):
        app, _ = await start(make_app, fake_openai, llm={"model": "local/unpriced"})
    assert "llm.unpriced model=local/unpriced" in caplog.text
    fake_openai.script(ChatReply(text="hi", prompt_tokens=1000, completion_tokens=100))
    await app.pipeline.handle(message("hello"))

    (log,) = await token_logs(app)
    opus = (1000 * 5.0 + 100 * 25.0) / 1_000_000  # the most expensive configured price
    assert log.cost_usd == pytest.approx(opus)
