"""Loop detection through the real pipeline and the fake model: a model that
repeats one call is warned on the 3rd, stopped on the 5th (the call does not
run, no LLM call follows), the user gets one line, the run's status is "loop"
(its row, its trace, the runs metric) and nothing is charged after the stop;
identical results from other inputs count the same way."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlmodel import col, select

from bot.agent.repeats import LOOP_REPLY, NOT_RUN
from bot.app import App
from bot.store.models import Budget, Run, TokenLog, TraceSpan
from tests.fakes.anthropic import FakeUsage, text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message
from tests.probes import ProbeTool
from tests.web.scrape import parse, value

NOTE = "Repeating it will not give anything new"


def results_sent(body: Mapping[str, Any]) -> list[str]:
    """The tool results of the request's last message."""
    last = body["messages"][-1]["content"]
    return [
        b["content"] if isinstance(b["content"], str) else json.dumps(b["content"])
        for b in last
        if b.get("type") == "tool_result"
    ]


async def rows(app: App) -> tuple[list[Run], list[TokenLog], list[TraceSpan], int]:
    async with app.store.read() as s:
        runs = list((await s.exec(select(Run))).all())
        logs = list((await s.exec(select(TokenLog))).all())
        spans = list((await s.exec(select(TraceSpan).order_by(col(TraceSpan.id)))).all())
        budgets = (await s.exec(select(Budget))).all()
    return runs, logs, spans, sum(b.used + b.overage for b in budgets)


async def test_the_same_call_is_warned_on_the_3rd_and_stopped_on_the_5th(make_app, fake_anthropic):
    lookup = ProbeTool("lookup")
    app = await make_app(tools=(lookup,), budgets={"guest": 200_000})
    adapter = RecordingAdapter()
    app.attach(adapter)
    usage = FakeUsage(input_tokens=1000, output_tokens=20)
    fake_anthropic.script(
        *(tool_use_reply(tool_call("lookup", {"x": "a"}), usage=usage) for _ in range(5)),
        text_reply("never asked for"),
    )
    outcome = await app.pipeline.handle(message("find it"))

    assert len(lookup.calls) == 4  # the 5th did not run
    requests = fake_anthropic.requests
    assert len(requests) == 5 and fake_anthropic.pending == 1  # no call after the stop
    sent = [results_sent(r.body) for r in requests[1:]]
    assert [any(NOTE in t for t in results) for results in sent] == [False, False, True, True]
    assert "3rd time" in sent[2][0] and "4th time" in sent[3][0]
    line = LOOP_REPLY.format(tool="lookup")
    assert adapter.texts == [line] and outcome.replies[0].text == line

    runs, logs, spans, charged = await rows(app)
    assert [r.status for r in runs] == ["loop"]
    assert len(logs) == 5 and charged == 5 * 1020 == runs[0].tokens  # nothing after the stop
    assert [s.kind for s in spans].count("tool") == 4
    samples = parse((await app.metrics.render()).decode())
    assert value(samples, "switchboard_run_duration_seconds_count", status="loop") == 1

    # The next message runs as usual, its history valid (the stopped call answered).
    fake_anthropic.reset()
    fake_anthropic.script(text_reply("Sorry about that."))
    assert (await app.pipeline.handle(message("ok?"))).status == "answered"
    assert NOT_RUN in json.dumps(fake_anthropic.last_request.body)


async def test_the_same_result_from_other_inputs_counts_the_same(make_app, fake_anthropic):
    async def nothing(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        return "No results."

    search = ProbeTool("search", nothing)
    app = await make_app(tools=(search,), budgets={"guest": 200_000})
    adapter = RecordingAdapter()
    app.attach(adapter)
    fake_anthropic.script(
        *(tool_use_reply(tool_call("search", {"x": f"query {i}"})) for i in range(5)),
        text_reply("never asked for"),
    )
    await app.pipeline.handle(message("search for it"))

    assert len(search.calls) == 5  # each ran; the 5th same result ends the run
    requests = fake_anthropic.requests
    assert len(requests) == 5
    notes = [any(NOTE in t for t in results_sent(r.body)) for r in requests[1:]]
    assert notes == [False, False, True, True]
    assert adapter.texts == [LOOP_REPLY.format(tool="search")]
    runs, *_ = await rows(app)
    assert [r.status for r in runs] == ["loop"]


async def test_different_calls_and_results_never_count(make_app, fake_anthropic):
    lookup = ProbeTool("lookup")
    app = await make_app(tools=(lookup,), budgets={"guest": 200_000})
    app.attach(RecordingAdapter())
    fake_anthropic.script(
        *(tool_use_reply(tool_call("lookup", {"x": str(i)})) for i in range(6)),
        text_reply("All six found."),
    )
    outcome = await app.pipeline.handle(message("find six"))
    assert outcome.status == "answered" and outcome.replies[0].text == "All six found."
    assert NOTE not in json.dumps([r.body for r in fake_anthropic.requests])
