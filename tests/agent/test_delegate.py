"""Sub-agents through the real pipeline and the fake model: `delegate_task`
runs a child with its own short prompt (no history, no memories, no
`delegate_task`), its tokens on the requester's run and usage, its spans
under the call's; a child that used only trusted tools leaves the run clean,
one that read a page makes the run's next external call held; three children
at once (a fourth waits); /stop during a child stops both."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping
from typing import Any

import pytest
from sqlmodel import col, select

from bot.agent.prompt import SUBAGENT
from bot.cli.trace import format_trace
from bot.store.actions import PendingAction
from bot.store.models import Budget, Run, TokenLog, TraceSpan
from bot.store.traces import load_trace
from tests.fakes.anthropic import FakeUsage, server_error, text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message
from tests.probes import ProbeTool

HELPER_BUDGET = {"budgets": {"guest": 1_000_000}}
HELPER = {"agent": {"subagent_min_role": "guest"}, **HELPER_BUDGET}


def is_child(body: Mapping[str, Any]) -> bool:
    return SUBAGENT in json.dumps(body.get("system"))


def tool_names(body: Mapping[str, Any]) -> list[str]:
    return [tool["name"] for tool in body.get("tools", [])]


def results(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    last = body["messages"][-1]["content"]
    return [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]


def reading_results(body: Mapping[str, Any]) -> bool:
    return bool(results(body))


class Model:
    """A responder: the parent's replies in turn (`parent`), each child's by
    its task (`child(task, body)`)."""

    def __init__(self, parent: list[Any], child: Any) -> None:
        self.parent, self.child = list(parent), child
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Any:
        with self.lock:
            self.bodies.append(body)
            if is_child(body):
                first = body["messages"][0]["content"]
                task = first if isinstance(first, str) else first[0]["text"]
                return self.child(task, body)
            return self.parent.pop(0)

    def children(self) -> list[dict[str, Any]]:
        return [b for b in self.bodies if is_child(b)]


async def test_a_delegated_task_runs_fresh_and_is_charged_to_the_requester(
    make_app, fake_anthropic
):
    app = await make_app(**HELPER)
    app.attach(RecordingAdapter())
    alice = await app.pipeline.s.identity.resolve(message("-"))
    await app.pipeline.s.memories.save(alice.id, "Alice's cat is called Zorro")
    fake_anthropic.script(text_reply("Nice to meet you, Alice of the purple house."))
    await app.pipeline.handle(message("I live in the purple house"))

    def child(task: str, body: dict[str, Any]) -> Any:
        if not reading_results(body):
            return tool_use_reply(tool_call("delegate_task", {"task": "again"}))  # can't
        return text_reply("Page A: about cats. Page B: about dogs.")

    model = Model(
        [
            tool_use_reply(
                tool_call("delegate_task", {"task": "Summarise pages A and B", "context": "ctx!"})
            ),
            text_reply("The helper says: cats and dogs."),
        ],
        child,
    )
    fake_anthropic.responder = model
    outcome = await app.pipeline.handle(message("summarise the pages"))
    assert outcome.replies[0].text == "The helper says: cats and dogs."

    first_child, second_child = model.children()
    system = json.dumps(first_child["system"])
    assert "purple" not in json.dumps(first_child) and "Zorro" not in json.dumps(first_child)
    assert "Remember: you are" not in system and "<untrusted source" not in json.dumps(first_child)
    assert len(first_child["messages"]) == 1  # the task is its one message
    assert "Summarise pages A and B" in json.dumps(first_child["messages"])
    assert "<context>\\nctx!\\n</context>" in json.dumps(first_child["messages"])
    assert "delegate_task" not in tool_names(first_child)
    assert "delegate_task" in tool_names(model.bodies[0])  # the parent's
    (refused,) = results(second_child)
    assert refused.get("is_error") and "not available" in refused["content"]
    (answer,) = results(model.bodies[-1])  # (marked: its call of a tool it lacks counts)
    assert "Page A: about cats. Page B: about dogs." in answer["content"]

    async with app.store.read() as s:
        runs = (await s.exec(select(Run).order_by(col(Run.started_at)))).all()
        run = runs[-1]
        logs = (await s.exec(select(TokenLog).where(TokenLog.run_id == run.id))).all()
        spans = (
            await s.exec(
                select(TraceSpan).where(TraceSpan.run_id == run.id).order_by(col(TraceSpan.id))
            )
        ).all()
        budget = (await s.exec(select(Budget))).one()
    assert len(runs) == 2  # the child is not a run of its own
    assert len(logs) == 4 and run.iterations == 4  # 2 of the parent, 2 of the child
    assert run.tokens == sum(t.input_tokens + t.output_tokens for t in logs)
    all_logs_tokens = run.tokens + runs[0].tokens
    assert budget.used == all_logs_tokens
    (call,) = [s for s in spans if s.name == "delegate_task" and s.parent_call_id is None]
    under = [s for s in spans if s.parent_call_id == call.call_id]
    assert [s.kind for s in under] == ["llm", "tool", "llm"]  # its calls and its tool
    trace = await load_trace(app.store, run.id)
    assert trace is not None
    shown = format_trace(trace).splitlines()
    at = next(i for i, line in enumerate(shown) if "delegate_task" in line and "tool" in line)
    assert all("└" in line for line in shown[at + 1 : at + 4])


async def test_a_child_s_taint_joins_the_run(make_app, fake_anthropic):
    async def page(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        return "<html>Welcome to the page</html>"

    web = ProbeTool("web", page, trusted_output=False)
    calc = ProbeTool("calc")
    app = await make_app(tools=(web, calc), scheduler={"max_jobs": {"guest": 5}}, **HELPER)
    app.attach(RecordingAdapter())

    def child(task: str, body: dict[str, Any]) -> Any:
        if reading_results(body):
            return text_reply(f"done: {task}")
        return tool_use_reply(tool_call("web" if "page" in task else "calc"))

    schedule = {"prompt": "check the page", "when": "in 2 hours"}
    # A child that used only trusted tools: the run stays clean, its schedule call runs.
    fake_anthropic.responder = clean = Model(
        [
            tool_use_reply(tool_call("delegate_task", {"task": "add 2 and 2"})),
            tool_use_reply(tool_call("schedule_add", schedule)),
            text_reply("Scheduled."),
        ],
        child,
    )
    await app.pipeline.handle(message("add and schedule"))
    async with app.store.read() as s:
        assert (await s.exec(select(PendingAction))).all() == []
    assert "Scheduled wakeup #" in json.dumps(fake_anthropic.last_request.body)
    (answer,) = results(clean.bodies[-2])
    assert answer["content"] == "done: add 2 and 2"  # trusted: not marked

    # A child that read a page: its answer is data, the run's schedule call is held.
    model = Model(
        [
            tool_use_reply(tool_call("delegate_task", {"task": "read the page"})),
            tool_use_reply(tool_call("schedule_add", schedule)),
            text_reply("Asked you to confirm."),
        ],
        child,
    )
    fake_anthropic.responder = model
    outcome = await app.pipeline.handle(message("read and schedule"))
    (answer,) = results(model.bodies[-2])
    assert answer["content"].startswith('<untrusted source="tool_result" tool="delegate_task">')
    async with app.store.read() as s:
        (held,) = (await s.exec(select(PendingAction))).all()
    assert held.tool_name == "schedule_add" and "tool_result" in held.sources
    assert any("Confirm?" in reply.text for reply in outcome.replies)


async def test_three_children_at_once_and_a_fourth_waits(make_app, fake_anthropic):
    app = await make_app(**HELPER)
    app.attach(RecordingAdapter())
    all_in = threading.Event()
    seen: list[str] = []

    def child(task: str, body: dict[str, Any]) -> Any:
        seen.append(task)
        if len(seen) == 3:
            all_in.set()  # three requests are open at once: let them all answer
        return text_reply(f"answer to {task}", hold=all_in)

    fake_anthropic.flight_key = lambda body: "child" if is_child(body) else "parent"
    fake_anthropic.responder = Model(
        [
            tool_use_reply(*(tool_call("delegate_task", {"task": f"task {i}"}) for i in range(4))),
            text_reply("All four done."),
        ],
        child,
    )
    try:
        outcome = await app.pipeline.handle(message("do four things"))
    finally:
        all_in.set()
    assert outcome.replies[0].text == "All four done."
    assert fake_anthropic.max_in_flight["child"] == 3  # [agent] subagent_parallel
    assert sorted(seen) == [f"task {i}" for i in range(4)]
    answers = [r["content"] for r in results(fake_anthropic.last_request.body)]
    assert answers == [f"answer to task {i}" for i in range(4)]  # in call order


async def test_stop_during_a_child_stops_both(make_app, fake_anthropic):
    app = await make_app(**HELPER)
    adapter = RecordingAdapter()
    app.attach(adapter)
    hold = threading.Event()
    model = Model(
        [tool_use_reply(tool_call("delegate_task", {"task": "a long job"}))],
        lambda task, body: text_reply("never read", hold=hold),
    )
    fake_anthropic.responder = model
    try:
        running = asyncio.create_task(app.pipeline.handle(message("go")))
        await fake_anthropic.wait_for_requests(2)  # the parent's call, then the child's
        stopped = await app.pipeline.handle(message("/stop"))
        outcome = await running
    finally:
        hold.set()
    assert stopped.replies[0].text == "Stopped." and outcome.status == "cancelled"
    assert adapter.texts == ["Stopped."]
    assert fake_anthropic.request_count == 2 and model.parent == []
    async with app.store.read() as s:
        (run,) = (await s.exec(select(Run))).all()
    assert run.status == "cancelled"


async def test_a_guest_cannot_delegate_by_default(make_app, fake_anthropic):
    app = await make_app(budgets={"guest": 100_000})
    app.attach(RecordingAdapter())
    fake_anthropic.script(text_reply("hi"))
    await app.pipeline.handle(message("hi"))
    assert "delegate_task" not in tool_names(fake_anthropic.last_request.body)


async def test_a_child_cannot_spend_past_the_run_cap(make_app, fake_anthropic):
    app = await make_app(
        agent={"subagent_min_role": "guest"},
        budgets={"guest": "unlimited", "run_max_tokens": 20_000},
    )
    app.attach(RecordingAdapter())
    big = FakeUsage(input_tokens=9_000, output_tokens=500)

    def child(task: str, body: dict[str, Any]) -> Any:
        return tool_use_reply(tool_call("delegate_task", {"task": "more"}), usage=big)

    fake_anthropic.responder = Model(
        [tool_use_reply(tool_call("delegate_task", {"task": "spend"}), usage=big)], child
    )
    outcome = await app.pipeline.handle(message("spend it all"))
    assert outcome.status == "refused"
    async with app.store.read() as s:
        (run,) = (await s.exec(select(Run))).all()
    assert run.status == "refused" and run.tokens <= 20_000


@pytest.mark.slow  # waits out a sub-agent's 2 s timeout
async def test_a_failing_or_slow_child_is_an_error_the_run_reads(make_app, fake_anthropic):
    app = await make_app(
        agent={"subagent_min_role": "guest", "subagent_timeout_seconds": 2}, **HELPER_BUDGET
    )
    app.attach(RecordingAdapter())
    hold = threading.Event()

    def child(task: str, body: dict[str, Any]) -> Any:
        if "broken" in task:
            return server_error("the model broke")
        return text_reply("too late", hold=hold)  # answers only after its time cap

    model = Model(
        [
            tool_use_reply(
                tool_call("delegate_task", {"task": "a broken job"}),
                tool_call("delegate_task", {"task": "a slow job"}),
            ),
            text_reply("Neither helper finished."),
        ],
        child,
    )
    fake_anthropic.responder = model
    try:
        outcome = await app.pipeline.handle(message("two jobs"))
    finally:
        hold.set()
    assert outcome.replies[0].text == "Neither helper finished."
    broken, slow = results(model.bodies[-1])
    assert broken.get("is_error") and "the helper could not finish" in broken["content"]
    assert slow.get("is_error") and "ran out of time (2 s)" in slow["content"]
    assert len(model.children()) == 2  # neither child was run again
