"""Compaction through the real pipeline and SDK: after a run (with a memory
flush first), mid-run in a long tool loop, the per-conversation lock, and the
fallback to plain truncation when the summary fails or times out."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping
from typing import Any

from sqlmodel import col, select

from bot.agent.history import SUMMARY_ACK, SUMMARY_HEADER
from bot.store.models import ConversationSummary, Memory, Message, TokenLog, TraceSpan
from tests.fakes.anthropic import (
    ErrorReply,
    MessageReply,
    last_user_text,
    server_error,
    text_reply,
    tool_call,
    tool_use_reply,
)
from tests.harness import RecordingAdapter, message
from tests.probes import ProbeTool
from tests.waiting import next_event

SMALL = {"compact_messages": 6, "keep_last_messages": 4}


def is_summary(body: dict[str, Any]) -> bool:
    return "running summary" in json.dumps(body.get("system"))


def is_flush(body: dict[str, Any]) -> bool:
    return "[Memory flush" in last_user_text(body) or any(
        "[Memory flush" in json.dumps(m) for m in body.get("messages", [])
    )


class Model:
    """Answers the three kinds of request; tests change what each one does."""

    def __init__(self) -> None:
        self.summary: MessageReply | ErrorReply = text_reply("- Alice asked about apples and pears")
        self.flush: list[MessageReply] = []
        self.summaries = 0
        self.flushes = 0

    def __call__(self, body: dict[str, Any]) -> Any:
        if is_summary(body):
            self.summaries += 1
            return self.summary
        if is_flush(body):
            self.flushes += 1
            return self.flush.pop(0) if self.flush else text_reply("NO_REPLY")
        return text_reply(f"echo: {last_user_text(body)}")


async def open_app(make_app, fake, *tools, **agent):  # type: ignore[no-untyped-def]
    model = Model()
    fake.responder = model
    app = await make_app(tools=tools, agent={**SMALL, **agent}, budgets={"guest": "unlimited"})
    adapter = RecordingAdapter()
    app.attach(adapter)
    return app, adapter, model


async def chat(app, *texts: str) -> None:  # type: ignore[no-untyped-def]
    for text in texts:
        assert (await app.pipeline.handle(message(text))).status == "answered"
        await app.pipeline.idle()  # let a compaction finish before the next message


def main_requests(fake):  # type: ignore[no-untyped-def]
    return [r for r in fake.requests if not is_summary(r.body) and not is_flush(r.body)]


async def test_a_long_conversation_is_compacted_after_a_run(make_app, fake_anthropic):
    app, adapter, model = await open_app(make_app, fake_anthropic)
    await chat(app, "apples?", "pears?", "plums?", "figs?")  # 8 stored messages > 6

    assert model.flushes == 1 and model.summaries == 1
    summary_request = next(r for r in fake_anthropic.requests if is_summary(r.body))
    assert summary_request.model == "claude-haiku-5-5"
    assert summary_request.body["temperature"] == 0.3
    assert summary_request.body["max_tokens"] == 1024
    transcript = summary_request.messages[0]["content"][0]["text"]
    assert "User: apples?" in transcript and "Assistant: echo: pears?" in transcript
    assert "figs?" not in transcript  # the last four messages are kept as they are
    async with app.store.read() as s:
        row = (await s.exec(select(ConversationSummary))).one()
        messages = (await s.exec(select(Message).order_by(col(Message.id)))).all()
        logs = (await s.exec(select(TokenLog).order_by(col(TokenLog.id)))).all()
    assert row.kind == "summary" and row.messages == 4
    assert row.up_to_message_id == messages[3].id
    assert [log.purpose for log in logs][-2:] == ["memory_flush", "compaction"]

    await chat(app, "and cherries?")
    sent = main_requests(fake_anthropic)[-1].messages
    assert sent[0]["content"][0]["text"] == (
        f"{SUMMARY_HEADER}\n- Alice asked about apples and pears"
    )
    assert sent[1]["content"][0]["text"] == SUMMARY_ACK
    assert [m["content"][0]["text"] for m in sent[2:]] == [
        "plums?",
        "echo: plums?",
        "figs?",
        "echo: figs?",
        "and cherries?",
    ]
    assert adapter.texts[-1] == "echo: and cherries?"


async def test_the_memory_flush_saves_facts_that_are_recalled_later(make_app, fake_anthropic):
    app, adapter, model = await open_app(make_app, fake_anthropic)
    model.flush = [
        tool_use_reply(tool_call("memory_save", {"text": "Alice's favourite editor is Helix"})),
        text_reply("NO_REPLY"),
    ]
    await chat(app, "I use Helix as my editor", "ok", "yes", "sure")
    flush = next(r for r in fake_anthropic.requests if is_flush(r.body))
    assert [t["name"] for t in flush.tools] == ["memory_save", "memory_search"]
    assert "NO_REPLY" in flush.messages[-1]["content"][-1]["text"]
    assert adapter.texts == [
        "echo: I use Helix as my editor",
        "echo: ok",
        "echo: yes",
        "echo: sure",
    ]
    async with app.store.read() as s:
        memory = (await s.exec(select(Memory))).one()
        spans = (await s.exec(select(TraceSpan).order_by(col(TraceSpan.id)))).all()
    assert memory.text == "Alice's favourite editor is Helix"
    assert [s.kind for s in spans if s.kind != "llm"] == [
        "memory_flush",
        "tool",
        "memory_flush",
        "compaction",
    ]

    await chat(app, "which editor should I configure?")
    tail = main_requests(fake_anthropic)[-1].messages[-1]["content"][-1]["text"]
    assert tail.startswith("<turn_context>")
    assert "Alice's favourite editor is Helix" in tail


async def test_a_failed_summary_falls_back_to_truncation(make_app, fake_anthropic):
    app, adapter, model = await open_app(make_app, fake_anthropic, memory_flush=False)
    model.summary = server_error("the fast model is down")
    await chat(app, "one", "two", "three", "four")
    async with app.store.read() as s:
        row = (await s.exec(select(ConversationSummary))).one()
    assert row.kind == "truncation" and row.summary == "" and "api_error" in (row.error or "")

    await chat(app, "five")  # the next message still gets its reply
    assert adapter.texts[-1] == "echo: five"
    sent = main_requests(fake_anthropic)[-1].messages
    assert [m["content"][0]["text"] for m in sent] == [
        "three",
        "echo: three",
        "four",
        "echo: four",
        "five",
    ]


async def test_a_summary_that_times_out_falls_back_to_truncation(make_app, fake_anthropic):
    app, adapter, model = await open_app(
        make_app, fake_anthropic, memory_flush=False, summary_timeout_seconds=0.2
    )
    never = threading.Event()
    model.summary = text_reply("too late", hold=never)
    try:
        await chat(app, "one", "two", "three", "four")
        async with app.store.read() as s:
            row = (await s.exec(select(ConversationSummary))).one()
        assert row.kind == "truncation" and "timed out" in (row.error or "")
        await chat(app, "five")
        assert adapter.texts[-1] == "echo: five"
    finally:
        never.set()


async def test_a_compaction_already_running_is_skipped(make_app, fake_anthropic):
    app, _adapter, model = await open_app(make_app, fake_anthropic, memory_flush=False)
    release = threading.Event()
    model.summary = text_reply("- summary", hold=release)
    for text in ("one", "two", "three"):
        await app.pipeline.handle(message(text))
    compactor = app.pipeline.s.compactor
    conversation = await app.pipeline.s.conversations.resolve(message("x"))
    user = await app.pipeline.s.identity.resolve(message("x"))
    first = asyncio.create_task(compactor.compact(conversation, user, "run1"))
    await fake_anthropic.wait_for_requests(4)  # three answers, then the held summary
    assert compactor.running(conversation.id)
    assert await compactor.compact(conversation, user, "run2") is None  # skipped, not queued
    release.set()
    done = await first
    assert done is not None and done.kind == "summary"
    assert not compactor.running(conversation.id)


async def test_a_run_that_read_the_history_before_a_compaction_landed_asks_for_none(
    make_app, fake_anthropic
):
    """A busy conversation: the next message's run reads the history while the
    last one's compaction is still being written, and ends after it landed. It
    saw the old history (over the limit), but asking for another compaction
    would summarize the two messages since: it is skipped, nothing is called."""
    app, adapter, model = await open_app(make_app, fake_anthropic, memory_flush=False)
    summary_held, reply_held = threading.Event(), threading.Event()
    model.summary = text_reply("- summary", hold=summary_held)
    await chat(app, "one", "two", "three")
    assert (await app.pipeline.handle(message("four"))).status == "answered"  # 8 stored > 6
    await fake_anthropic.wait_for_requests(5)  # four answers, then the held summary

    def held_answers(body: dict[str, Any]) -> Any:
        if is_summary(body) or is_flush(body):
            return model(body)
        return text_reply(f"echo: {last_user_text(body)}", hold=reply_held)

    fake_anthropic.responder = held_answers
    try:
        five = asyncio.create_task(app.pipeline.handle(message("five")))
        await fake_anthropic.wait_for_requests(6)  # five's run has read the history
        summary_held.set()

        async def summaries() -> list[ConversationSummary]:
            async with app.store.read() as s:
                return list((await s.exec(select(ConversationSummary))).all())

        for _ in range(200):  # the first compaction lands
            if await summaries():
                break
            await asyncio.sleep(0.02)
        reply_held.set()
        assert (await five).status == "answered"
        await app.pipeline.idle()
    finally:
        summary_held.set()
        reply_held.set()
    assert adapter.texts[-1] == "echo: five"
    assert model.summaries == 1
    [only] = await summaries()
    assert only.kind == "summary" and only.messages == 4


async def test_a_long_tool_loop_is_compacted_mid_run(make_app, fake_anthropic):
    async def big(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        return f"page {len(tool.calls)}: " + "lorem ipsum " * 150  # ~1,800 characters

    reader = ProbeTool("read", big)
    app, adapter, _model = await open_app(
        make_app,
        fake_anthropic,
        reader,
        memory_flush=False,
        prune_threshold=1.0,
        models={"claude-sonnet-5-5": {"context_window": 5000, "min_cache_tokens": 1024}},
    )
    steps = iter(range(8))

    def main(body: dict[str, Any]) -> Any:
        if is_summary(body):
            return text_reply("- read pages 1 to 4 of the manual for Alice")
        step = next(steps)
        if step < 7:
            return tool_use_reply(tool_call("read", {"x": str(step)}))
        return text_reply("I read the whole manual.")

    fake_anthropic.responder = main
    fake_anthropic.context_window = 5000  # the fake refuses anything longer
    async with app.pipeline.events.subscribe(types=["activity"]) as events:
        outcome = await app.pipeline.handle(message("read the manual"))
        kinds = []
        while "compacting" not in kinds:
            kinds.append((await next_event(events, "activity")).data["kind"])
    assert outcome.status == "answered" and adapter.texts == ["I read the whole manual."]
    assert all(r.status == 200 for r in fake_anthropic.requests)
    compacted = [
        r
        for r in fake_anthropic.requests
        if not is_summary(r.body) and r.messages[0]["content"][0]["text"].startswith(SUMMARY_HEADER)
    ]
    assert compacted, "no request was sent with the summary in front"
    async with app.store.read() as s:
        results = (await s.exec(select(Message).where(Message.role == "tool_result"))).all()
        spans = (await s.exec(select(TraceSpan).where(TraceSpan.kind == "compaction"))).all()
    assert len(results) == 7  # everything is still stored; only the context was compacted
    assert spans
