"""Several instances in one process, on one database: /stop given to one
instance stops the run going on in another (through the conversation's lease;
a notification on PostgreSQL, the next lease renewal on SQLite), and only the
person the run answers (or an admin) may stop it."""

from __future__ import annotations

import asyncio
import threading

from tests.fakes.anthropic import text_reply
from tests.harness import RecordingAdapter, message


async def two_instances(make_app):  # type: ignore[no-untyped-def]
    apps = []
    for _ in range(2):
        app = await make_app(inbox={"sweep_seconds": 0.2})
        app.attach(RecordingAdapter())
        app.start_recovery(["console"])
        apps.append(app)
    return apps


async def test_stop_on_one_instance_stops_the_run_on_the_other(make_app, fake_anthropic):
    a, b = await two_instances(make_app)
    stuck = threading.Event()
    fake_anthropic.script(text_reply("never sent", hold=stuck))
    running = asyncio.create_task(a.pipeline.handle(message("a long question")))
    try:
        await fake_anthropic.wait_for_requests(1)
        stopped = await b.pipeline.handle(message("/stop"))
        assert [r.text for r in stopped.replies] == ["Stopped."]
        outcome = await asyncio.wait_for(running, 20)
    finally:
        stuck.set()
    assert outcome.status == "cancelled"


async def test_only_the_asker_or_an_admin_stops_it_from_another_instance(make_app, fake_anthropic):
    a, b = await two_instances(make_app)
    stuck = threading.Event()
    fake_anthropic.script(text_reply("finished", hold=stuck))
    running = asyncio.create_task(a.pipeline.handle(message("a long question")))
    try:
        await fake_anthropic.wait_for_requests(1)
        refused = await b.pipeline.handle(message("/stop", platform_user_id="mallory"))
        assert "Only the person it answers" in refused.replies[0].text
        assert not running.done()
    finally:
        stuck.set()
    assert (await asyncio.wait_for(running, 20)).status == "answered"
