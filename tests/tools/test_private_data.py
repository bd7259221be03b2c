"""Private data stays with its owner in a shared thread, through the real
pipeline and the fake model: B cannot read A's memories, stored results or
error details, and the model never sees them on B's turns."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlmodel import select

from bot.accounts.directory import Directory
from bot.errors import ToolFailed
from bot.store.models import ConversationSummary, StoredToolResult, ToolError
from bot.types import IncomingMessage, Role
from tests.fakes.anthropic import last_user_text, text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message
from tests.probes import ProbeTool

SECRET = "SECRET-FACT Alice earns 90k at Initech"
REPORT = "SECRET-LINE of Alice's report\n" + "".join(f"line {i:05d}\n" for i in range(2000))
PEOPLE = {"alice": "Alice", "bob": "Bob", "carol": "Carol"}


def in_thread(who: str, text: str) -> IncomingMessage:
    """A message to the bot in one shared Slack-like thread."""
    return message(
        text,
        platform_user_id=who,
        user_display_name=PEOPLE[who],
        chat_type="group",
        platform_thread_id="thread-1",
        mentions_bot=True,
    )


def results(request: Any) -> list[dict[str, Any]]:
    return [b for b in request.messages[-1]["content"] if b["type"] == "tool_result"]


def text_of(block: Mapping[str, Any]) -> str:
    content = block["content"]
    return content if isinstance(content, str) else " ".join(c["text"] for c in content)


async def test_b_never_sees_a_s_memories_in_a_shared_thread(make_app, fake_anthropic):
    app = await make_app(budgets={"guest": "unlimited"})
    app.attach(RecordingAdapter())
    fake_anthropic.script(
        tool_use_reply(tool_call("memory_save", {"text": SECRET})),
        text_reply("Noted."),
        tool_use_reply(tool_call("memory_search", {"query": "earns Initech"})),
        text_reply("I found it in your memory."),
    )
    await app.pipeline.handle(in_thread("alice", "remember what I told you in private"))
    await app.pipeline.handle(in_thread("alice", "what do I earn?"))
    assert SECRET in text_of(results(fake_anthropic.requests[3])[0])  # Alice reads her own
    before_bob = len(fake_anthropic.requests)

    # Bob, in the same thread, asks the model (which obeys) to dig into memory.
    fake_anthropic.script(
        tool_use_reply(
            tool_call("memory_search", {"query": "earns Initech"}),
            tool_call("memory_get", {"id": 1}),
        ),
        text_reply("I have nothing about that."),
    )
    await app.pipeline.handle(in_thread("bob", "what does Alice earn at Initech?"))
    bob_requests = fake_anthropic.requests[before_bob:]
    assert len(bob_requests) == 2
    for request in bob_requests:
        seen = json.dumps(request.body)
        assert "SECRET-FACT" not in seen  # not in history, recall, tool calls or results
        assert "[memory_search result of another user, withheld]" in seen
        assert "[memory_save result of another user, withheld]" in seen
    search, get = results(bob_requests[1])
    assert "No memories match" in text_of(search)
    assert get["is_error"] and "no memory #1" in text_of(get)

    # Alice's next turn still shows her own results, marked as data.
    fake_anthropic.script(text_reply("ok"))
    await app.pipeline.handle(in_thread("alice", "thanks"))
    seen = json.dumps(fake_anthropic.last_request.body)
    assert SECRET in seen
    assert '<untrusted source=\\"tool_result\\" tool=\\"memory_search\\">' in seen


async def failing(tool: ProbeTool, args: Mapping[str, Any]) -> str:
    raise ToolFailed("quota exceeded for SECRET-ERR account")


async def report(tool: ProbeTool, args: Mapping[str, Any]) -> str:
    return REPORT


async def test_stored_results_and_error_details_belong_to_their_run_s_user(
    make_app, fake_anthropic
):
    app = await make_app(
        tools=(ProbeTool("report", report), ProbeTool("broken", failing)),
        agent={"tool_result_max_chars": 8000},
        budgets={"guest": "unlimited"},
    )
    app.attach(RecordingAdapter())
    carol = await app.pipeline.s.identity.resolve(in_thread("carol", "-"))
    await Directory(app.store, app.pipeline.s.identity).set_role(carol.id, Role.ADMIN)

    fake_anthropic.script(
        tool_use_reply(tool_call("report"), tool_call("broken")), text_reply("Here it is.")
    )
    await app.pipeline.handle(in_thread("alice", "run my report"))
    async with app.store.read() as session:
        (stored,) = (await session.exec(select(StoredToolResult))).all()
        (error,) = (await session.exec(select(ToolError))).all()

    async def ask(who: str) -> tuple[dict[str, Any], dict[str, Any]]:
        fake_anthropic.script(
            tool_use_reply(
                tool_call("get_tool_result", {"ref": stored.id, "offset": 0, "limit": 200}),
                tool_call("get_error_detail", {"error_id": error.id}),
            ),
            text_reply("done"),
        )
        await app.pipeline.handle(in_thread(who, f"show {stored.id} and {error.id}"))
        page, detail = results(fake_anthropic.last_request)
        return page, detail

    page, detail = await ask("bob")
    assert page["is_error"] and "belongs to another person's run" in text_of(page)
    assert detail["is_error"] and "belongs to another person's run" in text_of(detail)
    assert "SECRET-LINE" not in text_of(page) and "Traceback" not in text_of(detail)

    for who in ("alice", "carol"):  # the run's own user, and an admin
        page, detail = await ask(who)
        assert not page.get("is_error") and "SECRET-LINE" in text_of(page)
        assert not detail.get("is_error") and "SECRET-ERR" in text_of(detail)
        assert f"Error {error.id} in tool 'broken'" in text_of(detail)


def compaction_model(body: dict[str, Any]) -> Any:
    """Summaries and memory flushes get plain answers; "remember" saves SECRET."""
    text = json.dumps(body)
    if "running summary" in json.dumps(body.get("system")):
        return text_reply("- People chatted in the thread.")
    if "[Memory flush" in text:
        return text_reply("NO_REPLY")
    last = body["messages"][-1]["content"]
    answered = isinstance(last, list) and any(b["type"] == "tool_result" for b in last)
    if "remember" in last_user_text(body) and not answered:
        return tool_use_reply(tool_call("memory_save", {"text": SECRET}))
    return text_reply("ok")


async def test_a_group_summary_and_another_user_s_flush_hold_no_private_results(
    make_app, fake_anthropic
):
    fake_anthropic.responder = compaction_model
    app = await make_app(
        agent={"compact_messages": 6, "keep_last_messages": 2}, budgets={"guest": "unlimited"}
    )
    app.attach(RecordingAdapter())
    await app.pipeline.handle(in_thread("alice", "remember what I told you"))
    await app.pipeline.idle()
    for text in ("hello", "how are you?"):
        await app.pipeline.handle(in_thread("bob", text))
        await app.pipeline.idle()  # Bob's run triggers the compaction
    internal = [
        r.body
        for r in fake_anthropic.requests
        if "running summary" in json.dumps(r.body.get("system"))
        or "[Memory flush" in json.dumps(r.body)
    ]
    assert internal  # the compaction ran, with its flush
    for body in internal:
        assert "SECRET-FACT" not in json.dumps(body)
    async with app.store.read() as session:
        (summary,) = (await session.exec(select(ConversationSummary))).all()
    assert "SECRET-FACT" not in summary.summary
