"""`[web.search] backend = "anthropic"`: the Messages API's own web search,
through the real pipeline, the `anthropic` SDK (streaming) and the fake
model answering with ``server_tool_use`` / ``web_search_tool_result`` blocks
and cited text. The request carries the server tool; the blocks go back
verbatim when the turn goes on (a paused turn, a tool call after a search);
the citations become a Sources line; what the model read taints the run."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import func
from sqlmodel import select

from bot.accounts.directory import Directory
from bot.store.models import ScheduledJob, TraceSpan
from bot.store.traces import load_trace, recent_runs
from bot.types import Role
from tests.fakes.anthropic import MessageReply, text_reply, tool_call
from tests.fakes.anthropic_search import cited, search_blocks
from tests.harness import RecordingAdapter, message

OTTERS = ("Otters return to the Rhine", "https://news.example/otters")
SURVEY = ("Rhine wildlife survey (2026)", "https://basel.example/survey?year=2026")
SEARCH = {"search": {"backend": "anthropic", "max_uses": 3}}


async def started(make_app: Any) -> tuple[Any, RecordingAdapter, int]:
    app = await make_app(web={"fetch": False, **SEARCH})
    adapter = RecordingAdapter()
    app.attach(adapter)
    alice = await app.pipeline.s.identity.resolve(message("-"))
    await Directory(app.store, app.pipeline.s.identity).set_role(alice.id, Role.USER)
    return app, adapter, int(alice.id)


def answer(*blocks: dict[str, Any], stop_reason: str = "end_turn") -> MessageReply:
    return MessageReply(content=tuple(blocks), stop_reason=stop_reason)


async def spans(app: Any) -> list[TraceSpan]:
    (line,) = await recent_runs(app.store, 1)
    loaded = await load_trace(app.store, line.run.id)
    assert loaded is not None
    return loaded.spans


async def test_a_search_by_the_provider_ends_in_a_reply_with_its_sources(make_app, fake_anthropic):
    app, adapter, _ = await started(make_app)
    fake_anthropic.script(
        answer(
            *search_blocks("otters rhine 2026", [OTTERS, SURVEY]),
            {"type": "text", "text": "Good news: "},
            cited("otters are back near Basel.", *reversed(OTTERS), "otter sighted near Basel"),
            {"type": "text", "text": " "},
            cited("Fourteen were counted.", *reversed(SURVEY), "fourteen individuals"),
        )
    )
    await app.pipeline.handle(message("any news about otters in the Rhine?"))
    (request,) = fake_anthropic.requests
    assert {"type": "web_search_20250305", "name": "web_search", "max_uses": 3} in [
        {k: v for k, v in tool.items() if k != "cache_control"} for tool in request.tools
    ]
    (reply,) = adapter.texts
    assert reply == (
        "Good news: otters are back near Basel. Fourteen were counted.\n\n"
        "Sources: [Otters return to the Rhine](https://news.example/otters), "
        "[Rhine wildlife survey (2026)](https://basel.example/survey?year=2026)"
    )
    (search,) = [s for s in await spans(app) if s.kind == "server_tool"]
    assert (search.name, search.is_error) == ("web_search", False)
    assert search.detail == 'search "otters rhine 2026" → 2 results'
    value = app.metrics.registry.get_sample_value(
        "switchboard_web_requests_total", {"tool": "web_search", "outcome": "ok"}
    )
    assert value == 1

    # The next turn: the stored history is valid for the API (the fake checks it).
    fake_anthropic.script(text_reply("You're welcome."))
    await app.pipeline.handle(message("thanks!"))
    history = json.dumps(fake_anthropic.last_request.messages)
    assert "otters are back near Basel." in history and fake_anthropic.last_request.status == 200


async def test_a_paused_turn_goes_back_with_its_search_blocks_as_they_came(
    make_app, fake_anthropic
):
    app, adapter, _ = await started(make_app)
    paused = answer(
        *search_blocks("otter census", [SURVEY]),
        {"type": "text", "text": "Let me look further."},
        stop_reason="pause_turn",
    )
    fake_anthropic.script(
        paused,
        answer(cited(" The census counted fourteen.", *reversed(SURVEY), "fourteen individuals")),
    )
    await app.pipeline.handle(message("how many otters?"))
    _, second = fake_anthropic.requests
    assert second.status == 200  # the fake accepts only a valid continuation
    sent_back = second.messages[-1]
    assert sent_back["role"] == "assistant"
    kinds = [b["type"] for b in sent_back["content"]]
    assert kinds == ["server_tool_use", "web_search_tool_result", "text"]
    result = sent_back["content"][1]
    assert result["content"] == paused.content[1]["content"]  # encrypted content untouched
    assert result["tool_use_id"] == sent_back["content"][0]["id"]
    (reply,) = adapter.texts
    assert reply.startswith("Let me look further. The census counted fourteen.\n\nSources: ")
    assert "[Rhine wildlife survey (2026)](https://basel.example/survey?year=2026)" in reply


async def test_what_the_search_read_holds_a_later_schedule_for_confirmation(
    make_app, fake_anthropic
):
    app, _, alice = await started(make_app)
    fake_anthropic.script(
        answer(
            *search_blocks("release notes 4.2", [OTTERS]),
            {"type": "text", "text": "The page asks me to schedule something."},
            tool_call("schedule_add", {"prompt": "post 'pwned'", "when": "every 1 minute"}),
            stop_reason="tool_use",
        ),
        text_reply("I asked you to confirm first."),
    )
    await app.pipeline.handle(message("what do the release notes say?"))
    second = fake_anthropic.requests[1]
    assert second.status == 200
    assert [b["type"] for b in second.messages[-2]["content"]] == [
        "server_tool_use",
        "web_search_tool_result",
        "text",
        "tool_use",
    ]
    (result,) = [b for b in second.messages[-1]["content"] if b["type"] == "tool_result"]
    assert result["content"].startswith("Not done yet: this needs the user's confirmation first")
    (pending,) = await app.pipeline.s.actions.pending_for(alice)
    assert pending.tool_name == "schedule_add" and pending.sources == "tool_result"
    async with app.store.read() as session:
        assert (await session.exec(select(func.count()).select_from(ScheduledJob))).one() == 0


async def test_a_failed_search_is_a_failed_span(make_app, fake_anthropic):
    app, adapter, _ = await started(make_app)
    fake_anthropic.script(
        answer(
            *search_blocks("otters", [], error="max_uses_exceeded"),
            {"type": "text", "text": "I could not search any more."},
        )
    )
    await app.pipeline.handle(message("search again"))
    assert adapter.texts == ["I could not search any more."]  # nothing cited: no Sources
    (search,) = [s for s in await spans(app) if s.kind == "server_tool"]
    assert search.is_error and search.detail == 'search "otters" → error: max_uses_exceeded'
    value = app.metrics.registry.get_sample_value(
        "switchboard_web_requests_total", {"tool": "web_search", "outcome": "error"}
    )
    assert value == 1
