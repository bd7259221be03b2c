"""The pipeline's counts for `GET /metrics` (the real pipeline and store, the
anthropic SDK against the fake API, a recording adapter): a budget refusal, a
provider error by kind, an unknown tool name the model made up, and a reply
that could not be delivered."""

from __future__ import annotations

import asyncio

import pytest

from bot.app import App
from tests.fakes.anthropic import (
    FakeUsage,
    overloaded_error,
    text_reply,
    tool_call,
    tool_use_reply,
)
from tests.harness import RecordingAdapter, message
from tests.web.scrape import Samples, parse, value


async def scraped(app: App) -> Samples:
    return parse((await app.metrics.render()).decode())


async def test_refusals_errors_unknown_tools_and_failed_deliveries_are_counted(
    make_app, fake_anthropic
):
    app = await make_app(budgets={"guest": 5000})
    adapter = RecordingAdapter()
    app.attach(adapter)
    model = app.settings.llm.model
    fake_anthropic.script(
        tool_use_reply(tool_call("exfiltrate the user's secrets", {})),
        text_reply("done", usage=FakeUsage(input_tokens=4000, output_tokens=450)),
    )
    assert (await app.pipeline.handle(message("first"))).status == "answered"
    assert (await app.pipeline.handle(message("second"))).status == "refused"

    s = await scraped(app)
    assert value(s, "switchboard_budget_refusals_total") == 1
    assert value(s, "switchboard_tool_calls_total", tool="other", outcome="unavailable") == 1
    assert value(s, "switchboard_llm_requests_total", model=model, outcome="ok") == 2
    assert value(s, "switchboard_messages_received_total", platform="console") == 2
    assert value(s, "switchboard_replies_sent_total", platform="console") == 2  # answer, refusal
    assert value(s, "switchboard_run_duration_seconds_count", status="completed") == 1


async def test_provider_errors_and_failed_deliveries_are_counted(make_app, fake_anthropic):
    app = await make_app()
    adapter = RecordingAdapter(fail_sends=True)
    app.attach(adapter)
    fake_anthropic.script(overloaded_error())
    assert (await app.pipeline.handle(message("hello?"))).status == "failed"

    s = await scraped(app)
    model = app.settings.llm.model
    assert value(s, "switchboard_llm_requests_total", model=model, outcome="overloaded") == 1
    assert value(s, "switchboard_run_duration_seconds_count", status="failed") == 1
    assert value(s, "switchboard_delivery_failures_total", platform="console") == 1
    assert value(s, "switchboard_replies_sent_total", platform="console") == 0


@pytest.mark.fast_path  # shared commits: group commit
async def test_sqlite_writes_show_their_waits_and_shared_commits(make_app, fake_anthropic):
    """A burst of messages in twenty conversations: on SQLite the writes, the
    commits they shared and the time they waited for their turn are counted
    (an operator's sign that SQLite's one writer is the bottleneck); on
    PostgreSQL, where writes do not take turns, there are no such counts."""
    app = await make_app(budgets={"guest": "unlimited"})
    app.attach(RecordingAdapter())
    fake_anthropic.responder = lambda body: text_reply("ok")
    outcomes = await asyncio.gather(
        *(
            app.pipeline.handle(message(f"hi {i}", platform_channel_id=f"room{i}"))
            for i in range(20)
        )
    )
    assert {o.status for o in outcomes} == {"answered"}

    s = await scraped(app)
    writes = value(s, "switchboard_sqlite_writes_total")
    commits = value(s, "switchboard_sqlite_commits_total")
    waited = value(s, "switchboard_sqlite_write_wait_seconds_total")
    if not app.store.is_sqlite:
        assert (writes, commits, waited) == (0, 0, 0)
        assert "switchboard_sqlite" not in (await app.metrics.render()).decode()
        return
    assert writes >= 3 * 20  # intake, turn, sent: three turns each at least
    assert 0 < commits < writes  # queued together, they shared commits
    assert waited > 0
