"""Run control through the real pipeline and SDK: one run per conversation,
quick follow-ups answered together, /stop, run timeout, per-channel limits."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

from sqlmodel import col, select

from bot.agent.loop import CANCELLED_RESULT
from bot.pipeline.turns import STOPPED_NOTE, TIMEOUT_NOTE
from bot.store.models import InboxItem, Message, Run, TraceSpan
from bot.types import utcnow
from tests.fakes.anthropic import last_user_text, text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message
from tests.probes import ProbeTool
from tests.waiting import next_event, wait_until

KEY = "console:room:-"


async def start(make_app, *tools, **sections):  # type: ignore[no-untyped-def]
    sections.setdefault("budgets", {"guest": "unlimited"})
    app = await make_app(tools=tools, **sections)
    adapter = RecordingAdapter()
    app.attach(adapter)
    return app, adapter


async def test_three_quick_messages_get_one_run_and_one_reply(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    hold = threading.Event()
    fake_anthropic.script(
        text_reply("Hi! What can I do?", hold=hold), text_reply("One answer to all three.")
    )
    first = asyncio.create_task(app.pipeline.handle(message("hey", platform_message_id="m1")))
    await fake_anthropic.wait_for_requests(1)
    rest = [
        asyncio.create_task(app.pipeline.handle(message(text, platform_message_id=mid)))
        for mid, text in (("m2", "can you check the deploy"), ("m3", "on staging"))
    ]
    await wait_until(lambda: app.pipeline.s.control.queued(KEY) == 2)
    hold.set()
    outcomes = await asyncio.gather(first, *rest)

    assert [o.status for o in outcomes] == ["answered", "merged", "merged"]
    assert len({o.run_id for o in outcomes}) == 1
    assert adapter.texts == ["One answer to all three."]  # the unsent first answer is dropped
    sent = fake_anthropic.requests[1].messages
    assert len(sent) == 1
    texts = [b["text"] for b in sent[0]["content"]]
    assert texts[:3] == ["hey", "can you check the deploy", "on staging"]

    async with app.store.read() as s:
        runs = (await s.exec(select(Run))).all()
        rows = (await s.exec(select(Message).order_by(col(Message.id)))).all()
        events = (await s.exec(select(InboxItem))).all()
    assert len(runs) == 1 and runs[0].iterations == 2
    assert [(r.role, r.platform_message_id) for r in rows] == [
        ("user", "m1"),
        ("user", "m2"),
        ("user", "m3"),
        ("assistant", None),
    ]
    assert {e.event_id: e.state for e in events} == {
        "m1": "answered",
        "m2": "answered",
        "m3": "answered",
    }


async def test_a_follow_up_during_tool_use_joins_the_run(make_app, fake_anthropic):
    gate = asyncio.Event()

    async def wait_for_gate(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        await gate.wait()
        return "looked"

    app, adapter = await start(make_app, ProbeTool("look", wait_for_gate))
    fake_anthropic.script(tool_use_reply(tool_call("look")), text_reply("Both handled."))
    first = asyncio.create_task(app.pipeline.handle(message("look it up")))
    await fake_anthropic.wait_for_requests(1)
    second = asyncio.create_task(app.pipeline.handle(message("and also the logs")))
    await wait_until(lambda: app.pipeline.s.control.queued(KEY) == 1)
    gate.set()
    outcomes = await asyncio.gather(first, second)

    assert [o.status for o in outcomes] == ["answered", "merged"]
    assert adapter.texts == ["Both handled."]
    last = fake_anthropic.requests[1].messages[-1]["content"]
    assert [b["type"] for b in last][:2] == ["tool_result", "text"]
    assert last[1]["text"] == "and also the logs"
    async with app.store.read() as s:
        rows = (await s.exec(select(Message).order_by(col(Message.id)))).all()
    assert [r.role for r in rows] == ["user", "tool_call", "tool_result", "user", "assistant"]


async def test_another_users_message_waits_for_the_next_run(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    hold = threading.Event()
    fake_anthropic.script(text_reply("for alice", hold=hold), text_reply("for bob"))
    first = asyncio.create_task(app.pipeline.handle(message("hi")))
    await fake_anthropic.wait_for_requests(1)
    second = asyncio.create_task(app.pipeline.handle(message("me too", platform_user_id="bob")))
    await wait_until(lambda: app.pipeline.s.control.queued(KEY) == 1)
    hold.set()
    outcomes = await asyncio.gather(first, second)

    assert [o.status for o in outcomes] == ["answered", "answered"]
    assert outcomes[0].run_id != outcomes[1].run_id
    assert adapter.texts == ["for alice", "for bob"]


async def test_a_follow_up_after_another_users_message_does_not_overtake_it(
    make_app, fake_anthropic
):
    """Alice, Bob, Alice again while Alice's first is answered: her second is
    not taken into her run ahead of Bob's (answered after his)."""
    app, adapter = await start(make_app)
    hold = threading.Event()
    fake_anthropic.responder = lambda body: text_reply(
        "re: " + last_user_text(body).splitlines()[-1], hold=hold if not hold.is_set() else None
    )
    first = asyncio.create_task(app.pipeline.handle(message("hi")))
    await fake_anthropic.wait_for_requests(1)
    bob = asyncio.create_task(app.pipeline.handle(message("me too", platform_user_id="bob")))
    await wait_until(lambda: app.pipeline.s.control.queued(KEY) == 1)
    again = asyncio.create_task(app.pipeline.handle(message("and another thing")))
    await wait_until(lambda: app.pipeline.s.control.queued(KEY) == 2)
    hold.set()
    await asyncio.gather(first, bob, again)

    assert adapter.texts == ["re: hi", "re: me too", "re: and another thing"]


async def test_stop_cancels_a_run_mid_tool_loop(make_app, fake_anthropic):
    slow_started = asyncio.Event()

    async def forever(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        slow_started.set()
        await asyncio.Event().wait()
        return "unreachable"

    app, adapter = await start(make_app, ProbeTool("fast"), ProbeTool("slow", forever))
    fake_anthropic.script(
        tool_use_reply(tool_call("fast", {"x": "1"}), tool_call("slow"), text="Working.")
    )
    async with app.pipeline.events.subscribe(conversation_key=KEY) as events:
        running = asyncio.create_task(app.pipeline.handle(message("do both")))
        done = await next_event(events, "tool.result")
        assert done.data["tool"] == "fast"
        await slow_started.wait()

        async with asyncio.timeout(1):  # /stop takes effect within a second
            stopped = await app.pipeline.handle(message("/stop"))
            cancelled = await next_event(events, "run.cancelled")
            outcome = await running

    assert stopped.status == "command" and stopped.replies[0].text == "Stopped."
    assert cancelled.data == {"reason": "stop"}
    assert outcome.status == "cancelled" and outcome.replies == ()
    assert adapter.texts == ["Stopped."]  # nothing of the run was sent
    async with app.store.read() as s:
        run = (await s.exec(select(Run))).one()
        rows = (await s.exec(select(Message).order_by(col(Message.id)))).all()
        spans = (await s.exec(select(TraceSpan).where(TraceSpan.kind == "tool"))).all()
    assert run.status == "cancelled" and run.error == "stopped by /stop"
    assert [(r.role, r.tool_name or "") for r in rows] == [
        ("user", ""),
        ("assistant", ""),
        ("tool_call", "fast"),
        ("tool_call", "slow"),
        ("tool_result", ""),
        ("tool_result", ""),
        ("assistant", ""),
    ]
    assert rows[4].text == "fast ok 1" and not rows[4].is_error  # the partial result is kept
    assert rows[5].text == CANCELLED_RESULT and rows[5].is_error
    assert rows[6].text == STOPPED_NOTE
    assert [s.name for s in spans] == ["fast"]

    # The conversation goes on, with a history the API accepts.
    fake_anthropic.script(text_reply("Fresh start."))
    assert (await app.pipeline.handle(message("next"))).status == "answered"
    assert fake_anthropic.last_request.status == 200
    assert adapter.texts[-1] == "Fresh start."


async def test_stop_while_the_model_streams(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    hold = threading.Event()
    fake_anthropic.script(text_reply("never seen", hold=hold))
    try:
        running = asyncio.create_task(app.pipeline.handle(message("write an essay")))
        await fake_anthropic.wait_for_requests(1)
        queued = asyncio.create_task(app.pipeline.handle(message("a long one")))
        await wait_until(lambda: app.pipeline.s.control.queued(KEY) == 1)
        stopped = await app.pipeline.handle(message("/stop"))
        outcomes = await asyncio.gather(running, queued)
    finally:
        hold.set()
    assert stopped.replies[0].text == "Stopped."
    assert [o.status for o in outcomes] == ["cancelled", "merged"]
    assert adapter.texts == ["Stopped."]
    async with app.store.read() as s:
        rows = (await s.exec(select(Message).order_by(col(Message.id)))).all()
    # Both messages are kept (the queued one was never answered), then the note.
    assert [r.text for r in rows] == ["write an essay", "a long one", STOPPED_NOTE]


async def test_stop_with_nothing_running(make_app, fake_anthropic):
    app, _ = await start(make_app)
    outcome = await app.pipeline.handle(message("/stop"))
    assert outcome.replies[0].text == "Nothing is running here."
    assert "/stop" in (await app.pipeline.handle(message("/help"))).replies[0].text


async def test_only_the_runs_user_or_an_admin_may_stop_it(make_app, fake_anthropic):
    app, _ = await start(make_app, admin={"owners": ["console:boss"]})
    hold = threading.Event()
    fake_anthropic.script(text_reply("done", hold=hold))
    try:
        running = asyncio.create_task(app.pipeline.handle(message("work")))
        await fake_anthropic.wait_for_requests(1)
        refused = await app.pipeline.handle(message("/stop", platform_user_id="mallory"))
        assert "Only the person" in refused.replies[0].text
        allowed = await app.pipeline.handle(message("/stop", platform_user_id="boss"))
        assert allowed.replies[0].text == "Stopped."
        assert (await running).status == "cancelled"
    finally:
        hold.set()


async def test_a_run_over_its_time_limit_is_stopped(make_app, fake_anthropic):
    async def forever(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        await asyncio.Event().wait()
        return "unreachable"

    app, adapter = await start(
        make_app, ProbeTool("hang", forever), agent={"run_timeout_seconds": 0.3}
    )
    fake_anthropic.script(tool_use_reply(tool_call("hang"), text="Let me check."))
    async with app.pipeline.events.subscribe(types=["run.cancelled"]) as events:
        outcome = await app.pipeline.handle(message("check"))
        assert (await next_event(events, "run.cancelled")).data == {"reason": "timeout"}
    assert outcome.status == "failed"
    assert adapter.texts == [
        "Let me check.\n\n_(This took longer than 0.3 seconds, so I stopped.)_"
    ]
    async with app.store.read() as s:
        run = (await s.exec(select(Run))).one()
        rows = (await s.exec(select(Message).order_by(col(Message.id)))).all()
    assert run.status == "timeout"
    assert [r.role for r in rows] == ["user", "assistant", "tool_call", "tool_result", "assistant"]
    assert rows[3].text == CANCELLED_RESULT and rows[4].text == TIMEOUT_NOTE


async def test_runs_per_channel_are_limited(make_app, fake_anthropic):
    app, adapter = await start(make_app, agent={"max_concurrent": 2})
    holds = {f"q{i}": threading.Event() for i in range(3)}

    def responder(body: dict[str, Any]) -> Any:
        text = last_user_text(body).removeprefix("[Alice] ")
        return text_reply(f"answer to {text}", hold=holds.get(text))

    fake_anthropic.responder = responder
    thread = {"chat_type": "group", "mentions_bot": True}
    tasks = [
        asyncio.create_task(
            app.pipeline.handle(message(f"q{i}", platform_thread_id=f"t{i}", **thread))
        )
        for i in range(3)
    ]
    control = app.pipeline.s.control
    try:
        await fake_anthropic.wait_for_requests(2)
        await wait_until(lambda: all(control.active(f"console:room:t{i}") for i in range(3)))
        waiting = [i for i in range(3) if not control.active(f"console:room:t{i}").started]
        assert len(waiting) == 1  # the third conversation waits for a slot
        assert fake_anthropic.request_count == 2
        # Another channel is not held up.
        other = await app.pipeline.handle(message("hi", platform_channel_id="other-room"))
        assert other.status == "answered"
    finally:
        for hold in holds.values():
            hold.set()
    outcomes = await asyncio.gather(*tasks)
    assert [o.status for o in outcomes] == ["answered"] * 3
    assert sorted(adapter.texts) == ["answer to hi", "answer to q0", "answer to q1", "answer to q2"]


async def test_a_message_answered_through_the_callers_channel_is_not_merged(
    make_app, fake_anthropic
):
    app, adapter = await start(make_app)
    hold = threading.Event()
    fake_anthropic.script(text_reply("first", hold=hold), text_reply("second, returned"))
    first = asyncio.create_task(app.pipeline.handle(message("one")))
    await fake_anthropic.wait_for_requests(1)
    second = asyncio.create_task(app.pipeline.handle(message("two"), deliver=False))
    await wait_until(lambda: app.pipeline.s.control.queued(KEY) == 1)
    hold.set()
    one, two = await asyncio.gather(first, second)
    assert one.status == two.status == "answered"
    assert [r.text for r in two.replies] == ["second, returned"]
    assert adapter.texts == ["first"]


async def test_a_run_still_going_at_shutdown_is_recorded_as_cancelled(
    make_app, fake_anthropic, database
):
    started = asyncio.Event()

    async def forever(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        started.set()
        await asyncio.Event().wait()
        return "unreachable"

    app, adapter = await start(make_app, ProbeTool("hang", forever))
    fake_anthropic.script(tool_use_reply(tool_call("hang")))
    running = asyncio.create_task(app.pipeline.handle(message("wait for it")))
    await started.wait()
    await app.close(drain_timeout=0.1)
    assert running.cancelled()
    assert adapter.texts == []

    store = database.store()
    try:
        async with store.read() as s:
            run = (await s.exec(select(Run))).one()
            rows = (await s.exec(select(Message).order_by(col(Message.id)))).all()
            item = (await s.exec(select(InboxItem))).one()
    finally:
        await store.dispose()
    # What the run spent is recorded; the message itself goes back to the inbox,
    # its lease ended, for the next process to answer (no half turn in the history).
    assert run.status == "interrupted" and run.error == "shutdown"
    assert rows == []
    assert item.state == "running" and item.lease_expires_at is not None
    assert item.lease_expires_at <= utcnow()


async def test_a_crash_outside_the_agent_gives_one_error_reply(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    hold = threading.Event()
    fake_anthropic.script(text_reply("first", hold=hold))
    first = asyncio.create_task(app.pipeline.handle(message("one", platform_message_id="c1")))
    await fake_anthropic.wait_for_requests(1)
    second = asyncio.create_task(app.pipeline.handle(message("two", platform_message_id="c2")))
    await wait_until(lambda: app.pipeline.s.control.queued(KEY) == 1)

    async def broken(record: Any, **_: Any) -> None:
        raise RuntimeError("disk full")

    app.pipeline.s.writer.save = broken  # persisting the run crashes
    hold.set()
    one, two = await asyncio.gather(first, second)
    assert (one.status, two.status) == ("failed", "failed")
    assert [r.kind for r in adapter.sent] == ["error"]  # one notice, not one per message
    async with app.store.read() as s:
        events = {e.event_id: e.state for e in (await s.exec(select(InboxItem))).all()}
    assert events == {"c1": "failed", "c2": "failed"}
