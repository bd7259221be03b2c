"""Every stop reason through the real pipeline and SDK against the fake API."""

from __future__ import annotations

import logging

import pytest
from sqlmodel import col, select

from bot.agent.history import SUMMARY_HEADER
from bot.agent.loop import CONTEXT_NOTE, CONTINUE_PROMPT, MAX_TOKENS_NOTE, REFUSAL_REPLY
from bot.store.models import Message, Run
from tests.fakes.anthropic import prompt_too_long, text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message
from tests.probes import ProbeTool
from tests.waiting import next_event


async def start(make_app, *tools, **sections):  # type: ignore[no-untyped-def]
    sections.setdefault("budgets", {"guest": "unlimited"})
    app = await make_app(tools=tools, **sections)
    adapter = RecordingAdapter()
    app.attach(adapter)
    return app, adapter


async def stored(app) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    async with app.store.read() as s:
        rows = (await s.exec(select(Message).order_by(col(Message.id)))).all()
    return [(r.role, r.text) for r in rows]


async def test_end_turn_answers(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    fake_anthropic.script(text_reply("Plain answer.", stop_reason="end_turn"))
    assert (await app.pipeline.handle(message("q"))).status == "answered"
    assert adapter.texts == ["Plain answer."]


async def test_stop_sequence_answers(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    fake_anthropic.script(text_reply("Up to the stop.", stop_reason="stop_sequence"))
    await app.pipeline.handle(message("q"))
    assert adapter.texts == ["Up to the stop."]


async def test_tool_use_runs_the_tools_and_goes_on(make_app, fake_anthropic):
    tool = ProbeTool("probe")
    app, adapter = await start(make_app, tool)
    fake_anthropic.script(tool_use_reply(tool_call("probe", {"x": "7"})), text_reply("Used it."))
    await app.pipeline.handle(message("q"))
    assert tool.calls == [{"x": "7"}] and adapter.texts == ["Used it."]


async def test_max_tokens_continues_the_reply(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    fake_anthropic.script(
        text_reply("The first half", stop_reason="max_tokens"),
        text_reply(" and the second half."),
    )
    await app.pipeline.handle(message("tell me"))

    assert adapter.texts == ["The first half and the second half."]
    second = fake_anthropic.requests[1].messages
    assert second[-2] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "The first half"}],
    }
    assert second[-1]["content"][0]["text"] == CONTINUE_PROMPT
    assert await stored(app) == [
        ("user", "tell me"),
        ("assistant", "The first half and the second half."),
    ]


async def test_max_tokens_beyond_the_continuations_tells_the_user(make_app, fake_anthropic):
    app, adapter = await start(make_app, agent={"max_continuations": 1})
    fake_anthropic.script(
        text_reply("Part one,", stop_reason="max_tokens"),
        text_reply(" part two,", stop_reason="max_tokens"),
    )
    await app.pipeline.handle(message("tell me everything"))
    assert fake_anthropic.request_count == 2
    assert adapter.texts == [f"Part one, part two,\n\n{MAX_TOKENS_NOTE}"]


async def test_max_tokens_without_continuations(make_app, fake_anthropic):
    app, adapter = await start(make_app, agent={"max_continuations": 0})
    fake_anthropic.script(text_reply("Cut", stop_reason="max_tokens"))
    await app.pipeline.handle(message("q"))
    assert adapter.texts == [f"Cut\n\n{MAX_TOKENS_NOTE}"]


async def test_a_tool_call_cut_by_max_tokens_is_retried_with_more_room(make_app, fake_anthropic):
    tool = ProbeTool("probe")
    app, adapter = await start(make_app, tool, llm={"max_tokens": 100})
    fake_anthropic.script(
        tool_use_reply(tool_call("probe", {"x": "trunc"}), stop_reason="max_tokens"),
        tool_use_reply(tool_call("probe", {"x": "whole"})),
        text_reply("Done."),
    )
    async with app.pipeline.events.subscribe(types=["run.retrying"]) as events:
        await app.pipeline.handle(message("q"))
        retry = await next_event(events, "run.retrying")
    assert retry.data["reason"] == "max_tokens"
    assert [r.body["max_tokens"] for r in fake_anthropic.requests] == [100, 200, 200]
    assert tool.calls == [{"x": "whole"}]  # the cut call never ran
    assert adapter.texts == ["Done."]


async def test_pause_turn_is_resumed_as_one_reply(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    fake_anthropic.script(
        text_reply("Searching… ", stop_reason="pause_turn"), text_reply("Found it.")
    )
    await app.pipeline.handle(message("look up"))
    second = fake_anthropic.requests[1].messages
    assert second[-1]["role"] == "assistant"  # the paused turn is sent back to resume
    assert second[-1]["content"][0]["text"] == "Searching… "
    assert adapter.texts == ["Searching… Found it."]
    assert await stored(app) == [("user", "look up"), ("assistant", "Searching… Found it.")]


async def test_refusal_is_a_polite_reply_and_logged(make_app, fake_anthropic, caplog):
    app, adapter = await start(make_app)
    fake_anthropic.script(text_reply("", stop_reason="refusal"))
    with caplog.at_level(logging.WARNING, logger="switchboard.agent"):
        outcome = await app.pipeline.handle(message("something bad"))
    assert outcome.status == "answered" and adapter.texts == [REFUSAL_REPLY]
    assert any("run.refusal" in r.getMessage() for r in caplog.records)
    # The history stays valid after an empty refusal.
    await app.pipeline.handle(message("sorry, something else"))
    assert fake_anthropic.last_request.status == 200


async def earlier_turns(app, count: int = 4) -> None:  # type: ignore[no-untyped-def]
    for i in range(count):
        await app.pipeline.handle(message(f"earlier message {i}"))


async def test_context_window_exceeded_compacts_and_retries_once(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    await earlier_turns(app)
    fake_anthropic.script(
        text_reply("partial", stop_reason="model_context_window_exceeded"),
        text_reply("- the user sent four earlier messages"),  # the summary (fast model)
        text_reply("Answer after compaction."),
    )
    async with app.pipeline.events.subscribe(types=["run.retrying", "activity"]) as events:
        await app.pipeline.handle(message("and now?"))
        retry = await next_event(events, "run.retrying")
        compacting = await next_event(events, "activity")
        while compacting.data["kind"] != "compacting":
            compacting = await next_event(events, "activity")
    assert retry.data["reason"] == "context_window"
    summary_request, retried = fake_anthropic.requests[-2:]
    assert summary_request.model == "claude-haiku-5-5"
    assert summary_request.body["temperature"] == 0.3
    assert "earlier message 0" in summary_request.messages[0]["content"][0]["text"]
    first = retried.messages[0]["content"][0]["text"]
    assert first.startswith(SUMMARY_HEADER) and "four earlier messages" in first
    assert retried.messages[1]["role"] == "assistant"
    assert adapter.texts[-1] == "Answer after compaction."
    assert retried.status == 200


async def test_context_window_exceeded_twice_tells_the_user(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    fake_anthropic.script(
        text_reply("partial one", stop_reason="model_context_window_exceeded"),
        text_reply("partial two", stop_reason="model_context_window_exceeded"),
    )
    await app.pipeline.handle(message("q"))
    assert adapter.texts == [f"partial two\n\n{CONTEXT_NOTE}"]


async def test_prompt_too_long_compacts_and_retries_once(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    await earlier_turns(app)
    fake_anthropic.script(prompt_too_long(), text_reply("- a summary"), text_reply("Fits now."))
    outcome = await app.pipeline.handle(message("and now?"))
    assert outcome.status == "answered" and adapter.texts[-1] == "Fits now."
    assert fake_anthropic.requests[-1].messages[0]["content"][0]["text"].startswith(SUMMARY_HEADER)


async def test_prompt_too_long_twice_fails_with_a_clear_notice(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    fake_anthropic.script(prompt_too_long(), prompt_too_long())
    outcome = await app.pipeline.handle(message("q"))
    assert outcome.status == "failed"
    assert "grown too long for the model. Send /new" in adapter.texts[0]  # what to do
    async with app.store.read() as s:
        run = (await s.exec(select(Run))).one()
    assert run.status == "failed" and "ContextWindowExceeded" in (run.error or "")


@pytest.mark.parametrize("stop_reason", ["max_tokens", "refusal", "pause_turn"])
async def test_an_empty_cut_refused_or_paused_turn_still_reaches_the_user(
    make_app, fake_anthropic, stop_reason
):
    app, adapter = await start(make_app, agent={"max_continuations": 0}, llm={"max_iterations": 2})
    fake_anthropic.responder = lambda body: text_reply("", stop_reason=stop_reason)
    outcome = await app.pipeline.handle(message("q"))
    assert outcome.status == "answered"
    assert adapter.texts and adapter.texts[0].strip()
