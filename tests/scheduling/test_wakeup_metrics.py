"""Wakeups are counted for `GET /metrics` by outcome, and their LLM calls by the
fast model they use (the real pipeline, store and anthropic SDK against the
fake API)."""

from __future__ import annotations

from tests.scheduling.rig import FakeClock, add_job, started
from tests.web.scrape import parse, value


async def test_wakeups_are_counted_by_outcome(make_app, fake_anthropic):
    clock = FakeClock()
    app, adapter = await started(make_app, clock)
    answered = await add_job(app, "in 10 minutes", prompt="say hi")
    clock.advance(minutes=10)
    fake_anthropic.script("Hi!")
    assert await app.scheduler.run_due() == {answered.id: "answered"}
    silent = await add_job(app, "in 10 minutes", prompt="only if needed")
    clock.advance(minutes=10)
    fake_anthropic.script("NO_REPLY")
    assert await app.scheduler.run_due() == {silent.id: "silent"}

    s = parse((await app.metrics.render()).decode())
    assert value(s, "switchboard_wakeups_total", outcome="answered") == 1
    assert value(s, "switchboard_wakeups_total", outcome="silent") == 1
    assert value(s, "switchboard_wakeups_total", outcome="failed") == 0
    fast = app.settings.llm.fast_model
    assert value(s, "switchboard_llm_requests_total", model=fast, outcome="ok") == 2
    assert value(s, "switchboard_replies_suppressed_total", platform="console") == 1
    assert len(adapter.sent) == 1
