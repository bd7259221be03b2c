"""Large tool results: stored whole, a preview and a reference in the context,
paged with get_tool_result, scoped to their conversation."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sqlmodel import select

from bot.agent.untrusted import unwrap
from bot.store.models import Message, StoredToolResult
from tests.fakes.anthropic import text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message
from tests.probes import ProbeTool

REPORT = "".join(f"line {i:05d}\n" for i in range(2000))  # 22,000 characters


async def report(tool: ProbeTool, args: Mapping[str, Any]) -> str:
    return REPORT


def result_of(request) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return next(b for b in request.messages[-1]["content"] if b["type"] == "tool_result")


async def test_a_large_result_is_stored_and_paged(make_app, fake_anthropic):
    app = await make_app(
        tools=(ProbeTool("report", report), ProbeTool("small")),
        agent={"tool_result_max_chars": 8000},
        budgets={"guest": "unlimited"},
    )
    adapter = RecordingAdapter()
    app.attach(adapter)
    fake_anthropic.script(tool_use_reply(tool_call("report"), tool_call("small", {"x": "1"})))

    def page(body: dict[str, Any]) -> Any:
        last = body["messages"][-1]["content"]
        text = next(b["content"] for b in last if b["type"] == "tool_result")
        ref = re.search(r"res_[0-9a-f]{12}", text)
        if ref and "Showing characters" in text:
            return tool_use_reply(
                tool_call("get_tool_result", {"ref": ref.group(0), "offset": 21990})
            )
        return text_reply("Read the end of the report.")

    fake_anthropic.responder = page
    await app.pipeline.handle(message("get the report"))

    preview = result_of(fake_anthropic.requests[1])["content"]
    assert len(preview) < 8000
    assert preview.startswith(REPORT[:4000])
    ref = re.search(r"res_[0-9a-f]{12}", preview)
    assert ref and "of 22,000" in preview
    small = fake_anthropic.requests[1].messages[-1]["content"][1]
    assert small["content"] == "small ok 1"  # short results are left alone

    paged = unwrap(result_of(fake_anthropic.requests[2])["content"])  # marked as data
    assert paged.startswith(
        f"[{ref.group(0)} from report: characters 21,990–22,000 of 22,000. (end)]"
    )
    assert paged.endswith(REPORT[21990:])
    assert adapter.texts == ["Read the end of the report."]

    async with app.store.read() as s:
        stored = (await s.exec(select(StoredToolResult))).one()
        rows = (await s.exec(select(Message).where(Message.role == "tool_result"))).all()
    assert stored.id == ref.group(0) and stored.content == REPORT and stored.chars == 22_000
    assert stored.tool_name == "report"
    assert rows[0].text == preview  # the history holds the preview, not 22,000 characters

    # Another conversation cannot read it.
    fake_anthropic.responder = None  # type: ignore[assignment]
    fake_anthropic.script(
        tool_use_reply(tool_call("get_tool_result", {"ref": ref.group(0)})), text_reply("no")
    )
    await app.pipeline.handle(message("peek", platform_channel_id="elsewhere"))
    refused = result_of(fake_anthropic.last_request)
    assert refused["is_error"] and "no stored result" in refused["content"]
