"""Run events for subscribers, and traces: spans stored per run and printed by
`switchboard trace show`."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping
from typing import Any

import pytest
from sqlmodel import col, select

from bot.agent.events import Event, EventBus, RunEvents
from bot.cli.trace import format_trace
from bot.store.models import TraceSpan
from bot.store.traces import load_trace
from tests.conftest import Database
from tests.fakes.anthropic import FakeUsage, overloaded_error, text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message
from tests.paths import REPO_ROOT
from tests.probes import ProbeTool

ROOT = REPO_ROOT


async def test_the_bus_filters_and_never_blocks():
    bus = EventBus()
    every = bus.subscribe()
    mine = bus.subscribe(conversation_key="a", types=["chunk"], maxsize=2)
    for i in range(3):
        bus.publish(Event("chunk", "r1", "a", {"text": str(i)}))
    bus.publish(Event("chunk", "r2", "b", {"text": "other"}))
    bus.publish(Event("run.started", "r1", "a"))
    assert [e.data.get("text") for e in mine.pending()] == ["1", "2"]  # the oldest was dropped
    assert mine.dropped == 1
    assert len(every.pending()) == 5
    async with bus.subscribe() as temporary:
        assert bus.subscribers == 3
    del temporary
    assert bus.subscribers == 2
    with pytest.raises(ValueError):
        bus.subscribe(types=["no.such.event"])


async def test_an_event_is_made_only_for_its_conversation_s_listeners():
    """A live view per run in progress listens to its own conversation: a run
    elsewhere makes no event for them, and each gets only its own."""
    bus = EventBus()
    views = {key: bus.subscribe(conversation_key=key) for key in ("a", "b", "c")}
    quiet = RunEvents(bus, "r9", "z")
    assert not bus.listening("z")
    quiet.emit("chunk", text="nobody hears this")
    RunEvents(bus, "r1", "b").emit("chunk", text="for b")
    assert [len(v.pending()) for v in views.values()] == [0, 1, 0]

    every = bus.subscribe()
    assert bus.listening("z")
    quiet.emit("chunk", text="heard")
    assert [e.data["text"] for e in every.pending()] == ["heard"]
    views["b"].close()
    views["b"].close()  # closing twice is harmless
    assert bus.subscribers == 3 and bus.listening("b")  # (through `every`)
    every.close()
    assert not bus.listening("b") and bus.listening("a")


async def open_app(make_app, *tools, **sections):  # type: ignore[no-untyped-def]
    app = await make_app(tools=tools, budgets={"guest": "unlimited"}, **sections)
    adapter = RecordingAdapter()
    app.attach(adapter)
    return app, adapter


async def test_a_run_publishes_its_steps(make_app, fake_anthropic):
    app, _ = await open_app(make_app, ProbeTool("probe"))
    fake_anthropic.script(
        tool_use_reply(tool_call("probe", {"x": "1"}, id="toolu_1")),
        text_reply("All done here.", chunk_size=5),
    )
    events = app.pipeline.events.subscribe(conversation_key="console:room:-")
    outcome = await app.pipeline.handle(message("go"))
    seen = events.pending()
    kinds = [e.type if e.type != "activity" else f"activity:{e.data['kind']}" for e in seen]
    assert [k for k in kinds if k != "chunk"] == [
        "run.started",
        "activity:thinking",
        "tool.call",
        "activity:tool_exec",
        "tool.result",
        "activity:thinking",
        "run.completed",
    ]
    assert {e.run_id for e in seen} == {outcome.run_id}
    chunks = "".join(e.data["text"] for e in seen if e.type == "chunk")
    assert chunks == "All done here."
    call = next(e for e in seen if e.type == "tool.call")
    assert call.data == {"tool": "probe", "id": "toolu_1"}
    result = next(e for e in seen if e.type == "tool.result")
    assert result.data["is_error"] is False and result.data["tool"] == "probe"
    done = seen[-1]
    assert done.data["status"] == "completed" and done.data["iterations"] == 2


async def test_retries_and_failures_are_published(make_app, fake_anthropic):
    async def flaky(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        if len(tool.calls) == 1:
            raise ConnectionError("blip")
        return "fine"

    app, _ = await open_app(make_app, ProbeTool("flaky", flaky))
    events = app.pipeline.events.subscribe(types=["run.retrying", "run.failed"])
    fake_anthropic.script(tool_use_reply(tool_call("flaky")), text_reply("ok"), overloaded_error())
    await app.pipeline.handle(message("one"))
    await app.pipeline.handle(message("two"))
    retry, failed = events.pending()
    assert retry.type == "run.retrying"
    assert retry.data == {"reason": "tool", "detail": "blip", "attempt": 1}
    assert failed.type == "run.failed" and "Overloaded" in failed.data["error"]


@pytest.mark.e2e  # `switchboard trace` prints them
async def test_spans_are_stored_and_printed(make_app, fake_anthropic, database: Database):
    async def broken(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        raise ValueError("no such file")

    app, _ = await open_app(make_app, ProbeTool("ok_tool"), ProbeTool("broken", broken))
    fake_anthropic.script(
        tool_use_reply(
            tool_call("ok_tool"),
            tool_call("broken"),
            usage=FakeUsage(input_tokens=120, output_tokens=30, cache_read_input_tokens=900),
        ),
        text_reply("Half worked.", usage=FakeUsage(input_tokens=200, output_tokens=10)),
    )
    outcome = await app.pipeline.handle(message("try both"))
    assert outcome.run_id

    async with app.store.read() as s:
        spans = (
            await s.exec(
                select(TraceSpan)
                .where(TraceSpan.run_id == outcome.run_id)
                .order_by(col(TraceSpan.id))
            )
        ).all()
    llm = [s for s in spans if s.kind == "llm"]
    tools = {s.name: s for s in spans if s.kind == "tool"}
    assert [
        (s.name, s.input_tokens, s.output_tokens, s.cache_read_tokens, s.detail) for s in llm
    ] == [
        ("claude-sonnet-5-5", 120, 30, 900, "tool_use"),
        ("claude-sonnet-5-5", 200, 10, 0, "end_turn"),
    ]
    assert all(s.duration_ms >= 0 for s in spans)
    assert not tools["ok_tool"].is_error
    assert tools["broken"].is_error and tools["broken"].detail == "no such file"

    trace = await load_trace(app.store, outcome.run_id)
    assert trace is not None
    text = format_trace(trace)
    assert text.startswith(f"run {outcome.run_id}  completed  model claude-sonnet-5-5")
    assert "conversation console:room:-" in text and "2 LLM calls" in text
    assert "cache read 900" in text and "tool_use" in text
    assert "ERROR no such file" in text
    assert await load_trace(app.store, "nope") is None

    if database.backend == "sqlite":  # the CLI, as an operator runs it
        env = {
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", "/tmp"),
            "SWITCHBOARD__DATABASE__URL": database.url,
        }
        code, out, err = await cli(env, "trace", "show", outcome.run_id)
        assert code == 0, err
        assert out.strip() == text
        code, out, err = await cli(env, "trace", "show", "nope")
        assert code == 1 and "no run 'nope'" in err


async def cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await process.communicate()
    return process.returncode or 0, out.decode(), err.decode()


async def test_a_sink_that_raises_is_logged_and_the_others_still_hear(caplog):
    bus = EventBus()
    heard: list[str] = []

    def broken(event: Event) -> None:
        raise RuntimeError("view bug")

    bus.subscribe(conversation_key="a", sink=broken)
    bus.subscribe(conversation_key="a", sink=lambda event: heard.append(event.data["text"]))
    queued = bus.subscribe()
    RunEvents(bus, "r1", "a").emit("chunk", text="hello")
    assert heard == ["hello"] and [e.data["text"] for e in queued.pending()] == ["hello"]
    assert "event.sink_failed" in caplog.text


async def test_a_sink_subscription_keeps_nothing_to_read():
    bus = EventBus()
    heard: list[str] = []
    sunk = bus.subscribe(conversation_key="a", sink=lambda event: heard.append(event.data["text"]))
    RunEvents(bus, "r1", "a").emit("chunk", text="hello")
    assert heard == ["hello"]
    with pytest.raises(TypeError, match="keeps no events"):
        sunk.pending()
    with pytest.raises(TypeError, match="keeps no events"):
        await sunk.next()
