"""The tool loop through the real pipeline and SDK: parallel calls, retry once,
iteration limit, the error channel round trip, tool filtering."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any

from bot.errors import ToolFailed
from bot.types import Role
from tests.fakes.anthropic import text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message
from tests.probes import ProbeTool


async def start(make_app, *tools, **sections):  # type: ignore[no-untyped-def]
    sections.setdefault("budgets", {"guest": "unlimited"})  # these runs take many steps
    app = await make_app(tools=tools, **sections)
    adapter = RecordingAdapter()
    app.attach(adapter)
    return app, adapter


def tool_results(request) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    return [b for b in request.messages[-1]["content"] if b["type"] == "tool_result"]


async def test_tool_calls_of_one_response_run_concurrently_in_order(make_app, fake_anthropic):
    barrier = asyncio.Barrier(2)

    async def meet(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        async with asyncio.timeout(5):  # only passes if both run at the same time
            await barrier.wait()
        if tool.name == "slow":
            await asyncio.sleep(0.05)  # finishes last, but its result stays first
        return f"{tool.name} done"

    slow, fast = ProbeTool("slow", meet), ProbeTool("fast", meet)
    app, adapter = await start(make_app, slow, fast)
    fake_anthropic.script(
        tool_use_reply(tool_call("slow", {"x": "1"}), tool_call("fast", {"x": "2"})),
        text_reply("both done"),
    )
    await app.pipeline.handle(message("go"))

    results = tool_results(fake_anthropic.requests[1])
    assert [r["content"] for r in results] == ["slow done", "fast done"]
    assert adapter.texts == ["both done"]


async def test_a_failing_tool_is_retried_once(make_app, fake_anthropic):
    async def flaky(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        if len(tool.calls) == 1:
            raise ConnectionError("blip")
        return "worked"

    tool = ProbeTool("flaky", flaky)
    app, _ = await start(make_app, tool)
    fake_anthropic.script(tool_use_reply(tool_call("flaky")), text_reply("ok"))
    await app.pipeline.handle(message("go"))

    assert len(tool.calls) == 2
    result = tool_results(fake_anthropic.requests[1])[0]
    assert result["content"] == "worked" and not result.get("is_error")


async def test_error_channel_round_trip(make_app, fake_anthropic):
    async def broken(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        raise ValueError("disk on fire " + "x" * 300)

    tool = ProbeTool("broken", broken)
    app, _ = await start(make_app, tool)
    fake_anthropic.script(tool_use_reply(tool_call("broken")))
    # After the failure the model asks for the details of the error it was given.
    fake_anthropic.responder = lambda body: _ask_for_detail(body)
    await app.pipeline.handle(message("go"))

    assert len(tool.calls) == 2  # tried, retried, then reported
    failure = tool_results(fake_anthropic.requests[1])[0]
    assert failure["is_error"] is True
    match = re.fullmatch(
        r"Tool 'broken' failed: (.*) \[Error ID: (err_\d{8}_\d{6}_[0-9a-f]{6})\]",
        failure["content"],
    )
    assert match, failure["content"]
    assert len(match.group(1)) <= 100 and match.group(1).startswith("disk on fire")

    detail = tool_results(fake_anthropic.requests[2])[0]
    assert not detail.get("is_error")
    assert "Traceback" in detail["content"] and "ValueError: disk on fire" in detail["content"]

    # Another conversation cannot read it.
    fake_anthropic.script(
        tool_use_reply(tool_call("get_error_detail", {"error_id": match.group(2)})),
        text_reply("done"),
    )
    fake_anthropic.responder = None  # type: ignore[assignment]
    await app.pipeline.handle(message("peek", platform_channel_id="other-room"))
    other = tool_results(fake_anthropic.requests[-1])[0]
    assert other["is_error"] is True and "no error" in other["content"]


def _ask_for_detail(body: dict[str, Any]) -> Any:
    last = body["messages"][-1]["content"]
    results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
    if results and results[0].get("is_error") and "Error ID" in str(results[0]["content"]):
        error_id = re.search(r"err_\w+", str(results[0]["content"]))
        assert error_id
        return tool_use_reply(tool_call("get_error_detail", {"error_id": error_id.group(0)}))
    return text_reply("I looked at the error.")


async def test_a_deliberate_tool_failure_is_not_retried(make_app, fake_anthropic):
    async def refuse(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        raise ToolFailed("bad cron expression '61 * * * *'")

    tool = ProbeTool("schedule", refuse)
    app, _ = await start(make_app, tool)
    fake_anthropic.script(tool_use_reply(tool_call("schedule")), text_reply("fixed"))
    await app.pipeline.handle(message("go"))
    assert len(tool.calls) == 1
    assert "bad cron expression" in tool_results(fake_anthropic.requests[1])[0]["content"]


async def test_iteration_limit_gives_a_partial_answer(make_app, fake_anthropic):
    tool = ProbeTool("step")
    app, adapter = await start(make_app, tool, llm={"max_iterations": 3})

    def responder(body: dict[str, Any]) -> Any:
        if body.get("tool_choice") == {"type": "none"}:
            return text_reply("Here is what I found so far.")
        return tool_use_reply(tool_call("step"), text="Still working on it.")

    fake_anthropic.responder = responder
    outcome = await app.pipeline.handle(message("loop forever"))

    # The last allowed call must answer: tools stay defined but cannot be called.
    assert fake_anthropic.request_count == 3 and len(tool.calls) == 2
    last = fake_anthropic.requests[-1].body
    assert last["tool_choice"] == {"type": "none"} and last["tools"]
    assert "last step allowed" in last["messages"][-1]["content"][-1]["text"]
    assert outcome.status == "answered"
    assert adapter.texts[0].startswith("Here is what I found so far.")
    assert "stopped after 3 steps" in adapter.texts[0]
    # The stored history stays valid for the next message.
    fake_anthropic.responder = None  # type: ignore[assignment]
    fake_anthropic.script(text_reply("ok"))
    assert (await app.pipeline.handle(message("next"))).status == "answered"


async def test_iteration_limit_when_the_model_still_calls_tools(make_app, fake_anthropic):
    tool = ProbeTool("step")
    app, adapter = await start(make_app, tool, llm={"max_iterations": 2})
    fake_anthropic.responder = lambda body: tool_use_reply(
        tool_call("step"), text="Still working on it."
    )
    outcome = await app.pipeline.handle(message("loop forever"))

    assert fake_anthropic.request_count == 2 and len(tool.calls) == 1  # the last call's tools: no
    assert outcome.status == "answered"
    assert adapter.texts[0].startswith("Still working on it.")
    assert "stopped after 2 steps" in adapter.texts[0]
    fake_anthropic.responder = None  # type: ignore[assignment]
    fake_anthropic.script(text_reply("ok"))
    assert (await app.pipeline.handle(message("next"))).status == "answered"
    assert fake_anthropic.last_request.status == 200


async def test_unknown_tool_is_reported_to_the_model(make_app, fake_anthropic):
    app, _ = await start(make_app)
    fake_anthropic.script(tool_use_reply(tool_call("made_up")), text_reply("sorry"))
    await app.pipeline.handle(message("go"))
    result = tool_results(fake_anthropic.requests[1])[0]
    assert result["is_error"] is True and "not available" in result["content"]


async def test_tools_are_filtered_by_role(make_app, fake_anthropic):
    admin_tool = ProbeTool("admin_only", min_role=Role.ADMIN)
    guest_tool = ProbeTool("for_all")
    app, _ = await start(make_app, admin_tool, guest_tool, admin={"owners": ["console:boss"]})
    await app.pipeline.handle(message("hi"))
    offered = {t["name"] for t in fake_anthropic.last_request.tools}
    assert "for_all" in offered and "admin_only" not in offered

    await app.pipeline.handle(message("hi", platform_user_id="boss"))
    assert "admin_only" in {t["name"] for t in fake_anthropic.last_request.tools}

    # A guest cannot call it even if the model tries.
    fake_anthropic.script(tool_use_reply(tool_call("admin_only")), text_reply("no"))
    await app.pipeline.handle(message("sneaky"))
    assert admin_tool.calls == []
    refused = tool_results(fake_anthropic.requests[-1])[0]
    assert refused["is_error"] is True and "not available" in refused["content"]
