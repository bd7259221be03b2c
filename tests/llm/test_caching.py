"""Prompt caching: breakpoints on the stable prefix (tools → system → history),
none on prefixes below the model's minimum, the per-turn context after the last
one; and through the pipeline, against the fake's cache simulation, later turns
read most of their input from cache and are priced accordingly."""

from __future__ import annotations

from sqlmodel import col, select

from bot.llm.anthropic import build_params
from bot.llm.pricing import estimate_cost
from bot.llm.types import ChatMessage, LLMRequest, SystemBlock, TextBlock, ToolSpec
from bot.store.models import TokenLog
from bot.types import Usage
from tests.fakes.anthropic import cache_breakpoints, text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message
from tests.probes import ProbeTool

LONG = "A stable instruction that repeats. " * 200  # ~7,000 characters, ~1,750 tokens


def user(text: str) -> ChatMessage:
    return ChatMessage("user", (TextBlock(text),))


def assistant(text: str) -> ChatMessage:
    return ChatMessage("assistant", (TextBlock(text),))


def body(request: LLMRequest) -> dict[str, object]:
    params = build_params(request)
    return {"tools": params.tools, "system": params.system, "messages": params.messages}


TOOLS = (ToolSpec("clock", "what time it is", {"type": "object", "properties": {}}),)


def test_no_breakpoint_on_a_prefix_below_the_minimum():
    request = LLMRequest(
        model="m",
        system=(SystemBlock("short system", cache=True),),
        messages=(user("hi"),),
        tools=TOOLS,
        cache_min_tokens=1024,
    )
    assert cache_breakpoints(body(request)) == []


def test_breakpoints_only_where_the_prefix_is_long_enough():
    request = LLMRequest(
        model="m",
        system=(SystemBlock(LONG, cache=True),),
        messages=(user("first"), assistant("reply"), user("second")),
        tools=TOOLS,
        cache_min_tokens=1024,
        history_end=1,
    )
    # The tool alone is too short; the system prompt, the history's end and the
    # last message are not.
    assert cache_breakpoints(body(request)) == [
        "system.0",
        "messages.1.content.0",
        "messages.2.content.0",
    ]


def test_volatile_context_comes_after_the_last_breakpoint():
    request = LLMRequest(
        model="m",
        system=(SystemBlock(LONG, cache=True),),
        messages=(user("question"),),
        volatile="<turn_context>\nCurrent time: 12:00\n</turn_context>",
    )
    last = body(request)["messages"][-1]["content"]  # type: ignore[index]
    assert last[0] == {"type": "text", "text": "question", "cache_control": {"type": "ephemeral"}}
    assert last[1] == {"type": "text", "text": request.volatile}


def test_volatile_context_is_not_added_to_a_resumed_assistant_turn():
    request = LLMRequest(
        model="m", messages=(user("q"), assistant("paused")), volatile="<turn_context>x"
    )
    assert body(request)["messages"][-1]["content"] == [  # type: ignore[index]
        {"type": "text", "text": "paused", "cache_control": {"type": "ephemeral"}}
    ]


def test_tool_choice_none_keeps_the_tools():
    params = build_params(
        LLMRequest(model="m", messages=(user("q"),), tools=TOOLS, tool_choice="none")
    )
    assert params.tools and params.extra_body["tool_choice"] == {"type": "none"}


async def open_app(make_app, fake, *tools):  # type: ignore[no-untyped-def]
    fake.simulate_cache = True
    fake.cache_min_tokens = 1024
    app = await make_app(tools=tools, budgets={"guest": "unlimited"})
    adapter = RecordingAdapter()
    app.attach(adapter)
    return app, adapter


async def test_later_turns_read_the_prefix_from_cache_and_are_priced_for_it(
    make_app, fake_anthropic
):
    app, _ = await open_app(make_app, fake_anthropic, ProbeTool("lookup"))
    fake_anthropic.script(
        text_reply("Hello! " + "Happy to help. " * 30),
        tool_use_reply(tool_call("lookup", {"x": "deploys"})),
        text_reply("The last deploy was on Monday."),
        text_reply("You're welcome."),
    )
    for text in ("hi there", "when was the last deploy?", "thanks"):
        assert (await app.pipeline.handle(message(text))).status == "answered"

    requests = fake_anthropic.requests
    first, later = requests[0], requests[1:]
    assert "system.0" in first.cache_breakpoints  # the stable prefix is marked
    for request in requests:
        assert request.status == 200
    async with app.store.read() as s:
        logs = (await s.exec(select(TokenLog).order_by(col(TokenLog.id)))).all()
    assert len(logs) == len(requests) == 4
    assert logs[0].cache_write_tokens > 0 and logs[0].cache_read_tokens == 0
    for log in logs[1:]:
        prompt = log.input_tokens + log.cache_read_tokens + log.cache_write_tokens
        assert log.cache_read_tokens >= 0.7 * prompt, (log, later)
    price = app.settings.llm.prices["claude-sonnet-5-5"]
    for log in logs:
        usage = Usage(
            log.input_tokens, log.output_tokens, log.cache_read_tokens, log.cache_write_tokens
        )
        expected = (
            usage.input_tokens * price.input
            + usage.output_tokens * price.output
            + usage.cache_write_tokens * price.input * 1.25
            + usage.cache_read_tokens * price.input * 0.1
        ) / 1_000_000
        assert abs(log.cost_usd - expected) < 1e-12
        assert log.cost_usd == estimate_cost(log.model, usage, app.settings.llm.prices)
    # Reading from cache is what makes the later turns cheap.
    uncached = logs[-1].input_tokens + logs[-1].cache_read_tokens + logs[-1].cache_write_tokens
    assert logs[-1].cost_usd < uncached * price.input / 1_000_000 / 2


async def test_the_prefix_is_byte_stable_from_turn_to_turn(make_app, fake_anthropic):
    """What a turn sends again of the previous one is exactly what it sent: the
    history rebuilt from the database matches the messages as they were sent."""
    app, _ = await open_app(make_app, fake_anthropic, ProbeTool("lookup"))
    fake_anthropic.script(
        tool_use_reply(tool_call("lookup", {"x": "a", "y": [1, 2]}), text="Looking."),
        text_reply("Found a."),
        text_reply("Sure."),
    )
    await app.pipeline.handle(message("find a"))
    await app.pipeline.handle(message("and b?"))
    sent_then = fake_anthropic.requests[1].messages  # user, assistant(tool_use), results
    sent_now = fake_anthropic.requests[2].messages

    def strip(messages):  # type: ignore[no-untyped-def]
        out = []
        for m in messages:
            blocks = [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]]
            blocks = [b for b in blocks if not b.get("text", "").startswith("<turn_context>")]
            out.append({"role": m["role"], "content": blocks})
        return out

    assert strip(sent_now)[: len(sent_then)] == strip(sent_then)


def test_the_tools_breakpoint_stays_on_the_fixed_tools():
    """Tools a run found (`tool_search`) come after the tools' breakpoint."""
    found = ToolSpec("mcp__box__found", "found later", {"type": "object", "properties": {}})
    request = LLMRequest(
        model="m", messages=(user("q"),), tools=(*TOOLS, found), cached_tools=len(TOOLS)
    )
    assert cache_breakpoints(body(request)) == ["tools.0", "messages.0.content.0"]
    everything = LLMRequest(model="m", messages=(user("q"),), tools=(*TOOLS, found))
    assert cache_breakpoints(body(everything)) == ["tools.1", "messages.0.content.0"]
