"""Scheduled wakeups end to end: real store (SQLite and PostgreSQL), the real
pipeline and anthropic SDK against the fake API, a recording adapter, and a
controllable clock driving `run_due` (APScheduler registered but paused),
except in the test that proves the real APScheduler timer fires."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from apscheduler.events import EVENT_JOB_MISSED, JobExecutionEvent
from sqlmodel import col, select

from bot.accounts.budgets import Budgets
from bot.scheduling.jobs import Jobs
from bot.scheduling.parse import TriggerSpec
from bot.store.models import DeliveryFailure, Run, TokenLog
from bot.types import IncomingMessage, Outcome, Reply, utcnow
from tests.fakes.anthropic import FakeUsage, overloaded_error, text_reply
from tests.harness import RecordingAdapter, message
from tests.scheduling.rig import T0, FakeClock, add_job, job, started


async def test_interval_job_fires_at_the_right_times(make_app, fake_anthropic):
    clock = FakeClock()
    app, adapter = await started(make_app, clock)
    created = await add_job(app, "every 2h")
    assert created.next_run_at == T0 + timedelta(hours=2)
    assert app.scheduler.next_fire(created.id) == T0 + timedelta(hours=2)

    clock.advance(hours=1, minutes=59, seconds=59)
    assert await app.scheduler.run_due() == {}
    clock.advance(seconds=1)
    fake_anthropic.script("First report.")
    assert await app.scheduler.run_due() == {created.id: "answered"}
    assert adapter.texts == ["First report."]

    row = await job(app, created.id)
    assert row.next_run_at == T0 + timedelta(hours=4)
    assert (row.state, row.last_status, row.run_count) == ("active", "answered", 1)
    assert app.scheduler.next_fire(created.id) == T0 + timedelta(hours=4)
    assert await app.scheduler.run_due() == {}  # nothing more is due
    clock.advance(hours=2)
    fake_anthropic.script("Second report.")
    assert await app.scheduler.run_due() == {created.id: "answered"}
    assert adapter.texts == ["First report.", "Second report."]


async def test_cron_job_fires_on_weekdays_in_its_time_zone(make_app, fake_anthropic):
    clock = FakeClock()  # Friday 11:00 in Paris
    app, adapter = await started(make_app, clock)
    created = await add_job(app, "0 9 * * MON-FRI", timezone="Europe/Paris")
    monday = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)  # 09:00 Paris
    assert created.next_run_at == monday

    clock.now = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)  # Sunday 09:00 Paris
    assert await app.scheduler.run_due() == {}
    clock.now = monday
    assert await app.scheduler.run_due() == {created.id: "answered"}
    assert (await job(app, created.id)).next_run_at == monday + timedelta(days=1)
    assert len(adapter.sent) == 1


async def test_wakeup_posts_into_its_conversation_charged_to_the_owner(make_app, fake_anthropic):
    clock = FakeClock()
    app, adapter = await started(make_app, clock, platform="slack")
    created = await add_job(
        app,
        "in 10 minutes",
        prompt="remind the team about the demo",
        chat_type="group",
        platform="slack",
        platform_user_id="U1",
        platform_channel_id="C9",
        platform_thread_id="1700000000.0001",
        platform_server_id="T1",
    )
    clock.advance(minutes=10)
    fake_anthropic.script(
        text_reply("Demo at 3pm!", usage=FakeUsage(input_tokens=40, output_tokens=10))
    )
    assert await app.scheduler.run_due() == {created.id: "answered"}

    (reply,) = adapter.sent
    assert reply.text == "Demo at 3pm!"
    assert (reply.target.platform, reply.target.channel_id) == ("slack", "C9")
    assert reply.target.thread_id == "1700000000.0001" and reply.target.server_id == "T1"
    request = fake_anthropic.last_request
    assert request.model == app.settings.llm.fast_model  # wakeups use the fast model
    system = " ".join(block["text"] for block in request.system)
    assert "a group chat on slack" in system
    last = " ".join(b.get("text", "") for b in request.messages[-1]["content"])
    assert "remind the team about the demo" in last
    assert "started by a scheduled wakeup" in last  # the turn context, after the cached prefix
    async with app.store.read() as s:
        run = (await s.exec(select(Run))).one()
        log = (await s.exec(select(TokenLog))).one()
    assert run.source == "scheduler" and run.user_id == created.owner_user_id
    assert (log.user_id, log.purpose, log.input_tokens) == (created.owner_user_id, "wakeup", 40)
    row = await job(app, created.id)
    assert (row.state, row.last_status, row.last_run_id) == ("done", "answered", run.id)
    assert app.scheduler.next_fire(created.id) is None


async def test_no_reply_posts_nothing(make_app, fake_anthropic):
    clock = FakeClock()
    app, adapter = await started(make_app, clock)
    created = await add_job(app, "every 1h")
    clock.advance(hours=1)
    fake_anthropic.script("NO_REPLY")
    assert await app.scheduler.run_due() == {created.id: "silent"}
    assert adapter.sent == []
    assert (await job(app, created.id)).last_status == "silent"


async def test_spent_budget_pauses_the_owners_jobs_and_tells_once(make_app, fake_anthropic):
    clock = FakeClock()
    app, adapter = await started(make_app, clock, budgets={"guest": 5000})
    hourly = await add_job(app, "every 1h")
    daily = await add_job(app, "every 1d", platform_channel_id="other-room")
    clock.advance(hours=1)
    fake_anthropic.script(
        text_reply("spent", usage=FakeUsage(input_tokens=4700, output_tokens=300))
    )
    assert await app.scheduler.run_due() == {hourly.id: "answered"}

    clock.advance(hours=1)
    assert await app.scheduler.run_due() == {hourly.id: "refused"}
    assert fake_anthropic.request_count == 1  # refused before any LLM call
    notice = adapter.sent[-1]
    assert notice.kind == "notice" and notice.target.channel_id == "room"
    assert f"#{hourly.id}, #{daily.id}" in notice.text and "paused" in notice.text
    for job_id in (hourly.id, daily.id):
        row = await job(app, job_id)
        assert (row.state, row.pause_reason) == ("paused", "budget")
        assert app.scheduler.next_fire(job_id) is None

    clock.advance(days=1)  # nothing fires, nobody is told again
    assert await app.scheduler.run_due() == {}
    assert len(adapter.sent) == 2

    user = await app.pipeline.s.identity.resolve(message("-"))
    await app.pipeline.s.budgets.grant(user.id, 1000)
    await app.scheduler.sync()  # budget available again: resumed
    row = await job(app, hourly.id)
    assert (row.state, row.next_run_at) == ("active", T0 + timedelta(days=1, hours=3))
    assert app.scheduler.next_fire(hourly.id) == row.next_run_at


async def test_a_restart_rebuilds_jobs_runs_a_missed_one_once_and_skips_late_ones(
    make_app, fake_anthropic
):
    clock = FakeClock()
    first, _ = await started(make_app, clock)
    hourly = await add_job(first, "every 1h")
    once = await add_job(first, "in 30 minutes")
    cron = await add_job(first, "0 12 * * *")  # daily at noon UTC
    await first.close()

    clock.advance(hours=1, minutes=2)  # down for 62 minutes; grace is 5 minutes
    second, adapter = await started(make_app, clock)
    registered = {j.id: j for j in second.scheduler.aps.get_jobs()}
    assert {f"job:{hourly.id}", f"job:{once.id}", f"job:{cron.id}", "sync"} <= set(registered)
    options = registered[f"job:{hourly.id}"]
    assert (options.misfire_grace_time, options.coalesce, options.max_instances) == (300, True, 1)
    assert second.scheduler.next_fire(cron.id) == datetime(2026, 11, 20, 12, tzinfo=UTC)

    results = await second.scheduler.run_due()
    assert results == {hourly.id: "answered", once.id: "missed"}
    assert fake_anthropic.request_count == 1 and len(adapter.sent) == 1
    missed = await job(second, once.id)
    assert (missed.state, missed.last_status, missed.missed_count) == ("done", "missed", 1)
    assert "32m late" in (missed.last_error or "")
    assert (await job(second, hourly.id)).next_run_at == T0 + timedelta(hours=2)

    # Down again over several fires: the latest is within grace, so it runs once.
    await second.close()
    clock.advance(hours=2, minutes=59)  # T0 + 4h01
    third, adapter = await started(make_app, clock)
    assert await third.scheduler.run_due() == {hourly.id: "answered", cron.id: "missed"}
    assert fake_anthropic.request_count == 2 and len(adapter.sent) == 1
    assert (await job(third, hourly.id)).next_run_at == T0 + timedelta(hours=5)


async def test_one_fire_runs_once_in_one_process(make_app, fake_anthropic):
    clock = FakeClock()
    app, adapter = await started(make_app, clock)
    created = await add_job(app, "every 1h")
    clock.advance(hours=1)
    results = await asyncio.gather(*(app.scheduler.run_job(created.id) for _ in range(4)))
    assert sorted(results) == ["answered", "not-due", "not-due", "not-due"]
    assert fake_anthropic.request_count == 1 and len(adapter.sent) == 1


async def test_one_fire_runs_once_across_instances(make_app, fake_anthropic):
    clock = FakeClock()
    first, first_adapter = await started(make_app, clock)
    second, second_adapter = await started(make_app, clock)
    created = await add_job(first, "every 1h")
    await second.scheduler.sync()  # the other instance learns about it
    assert second.scheduler.next_fire(created.id) == T0 + timedelta(hours=1)
    clock.advance(hours=1)
    results = await asyncio.gather(first.scheduler.run_due(), second.scheduler.run_due())
    # The instance that loses either finds the fire claimed ("not-due") or,
    # reading the due jobs after the claim moved the next fire on, not due at all.
    statuses = sorted(r.get(created.id, "not listed") for r in results)
    assert statuses in (["answered", "not-due"], ["answered", "not listed"])
    assert fake_anthropic.request_count == 1
    assert len(first_adapter.sent) + len(second_adapter.sent) == 1


async def test_one_fire_claimed_by_two_instances_at_once_runs_once(make_app, fake_anthropic):
    """Both instances fire the same job at the same moment (each one's
    APScheduler says it is due): the claim in the database lets one run it."""
    clock = FakeClock()
    first, first_adapter = await started(make_app, clock)
    second, second_adapter = await started(make_app, clock)
    created = await add_job(first, "every 1h")
    await second.scheduler.sync()
    clock.advance(hours=1)
    results = await asyncio.gather(
        first.scheduler.run_job(created.id), second.scheduler.run_job(created.id)
    )
    assert sorted(results) == ["answered", "not-due"]
    assert fake_anthropic.request_count == 1
    assert len(first_adapter.sent) + len(second_adapter.sent) == 1


class BlockingSink:
    """The pipeline, with each wakeup held until released."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def handle(self, msg: IncomingMessage, *, deliver: bool = True) -> Outcome:
        self.entered.set()
        await self.release.wait()
        outcome: Outcome = await self.inner.handle(msg, deliver=deliver)
        return outcome

    async def send(self, reply: Reply) -> bool:
        sent: bool = await self.inner.send(reply)
        return sent


async def test_a_job_never_runs_twice_at_once(make_app, fake_anthropic):
    clock = FakeClock()
    app: Any = await make_app(clock=clock)
    adapter = RecordingAdapter()
    app.attach(adapter)
    sink = BlockingSink(app.pipeline)
    await app.scheduler.start(sink, ["console"], timer=False)
    created = await add_job(app, "every 20m")
    clock.advance(minutes=20)
    slow = asyncio.create_task(app.scheduler.run_job(created.id))
    await sink.entered.wait()

    clock.advance(minutes=20)  # the next fire comes while the first run is still going
    assert await app.scheduler.run_due() == {created.id: "not-due"}
    sink.release.set()
    assert await slow == "answered"
    row = await job(app, created.id)
    assert row.missed_count == 1  # the overlapping fire was skipped, and recorded
    assert row.next_run_at == T0 + timedelta(minutes=60)
    assert fake_anthropic.request_count == 1


async def test_failed_delivery_is_kept_on_the_job_and_retried(make_app, fake_anthropic):
    clock = FakeClock()
    app, adapter = await started(make_app, clock)
    created = await add_job(app, "every 1d")
    adapter.fail_sends = True
    clock.advance(days=1)
    fake_anthropic.script("Important news.")
    assert await app.scheduler.run_due() == {created.id: "delivery_failed"}
    row = await job(app, created.id)
    assert row.pending_replies == ["Important news."] and row.failure_count == 1
    assert row.retry_at == clock.now + timedelta(seconds=60)
    assert app.scheduler.aps.get_job(f"retry:{created.id}") is not None
    async with app.store.read() as s:
        failure = (await s.exec(select(DeliveryFailure))).one()
    assert failure.text == "Important news." and "platform said no" in failure.reason

    clock.advance(seconds=60)  # still failing: retried later, with backoff
    assert await app.scheduler.run_due() == {created.id: "undelivered"}
    assert (await job(app, created.id)).retry_at == clock.now + timedelta(seconds=120)

    adapter.fail_sends = False
    clock.advance(seconds=120)
    assert await app.scheduler.run_due() == {created.id: "delivered"}
    assert adapter.texts == ["Important news."]
    row = await job(app, created.id)
    assert (row.pending_replies, row.retry_at, row.last_status) == (None, None, "delivered")
    assert app.scheduler.aps.get_job(f"retry:{created.id}") is None
    assert fake_anthropic.request_count == 1  # redelivery never calls the model again


async def test_a_failed_one_time_wakeup_is_retried(make_app, fake_anthropic):
    clock = FakeClock()
    app, adapter = await started(make_app, clock)
    created = await add_job(app, "in 5 minutes")
    clock.advance(minutes=5)
    fake_anthropic.script(overloaded_error())
    assert await app.scheduler.run_due() == {created.id: "failed"}
    assert adapter.sent == []  # the error notice is not posted unprompted
    row = await job(app, created.id)
    assert (row.state, row.failure_count) == ("active", 1)
    assert row.next_run_at == clock.now + timedelta(seconds=60)
    assert "Overloaded" in (row.last_error or "")

    clock.advance(seconds=60)
    fake_anthropic.script("Here is your reminder.")
    assert await app.scheduler.run_due() == {created.id: "answered"}
    assert adapter.texts == ["Here is your reminder."]
    row = await job(app, created.id)
    assert (row.state, row.failure_count) == ("done", 0)


async def test_the_real_apscheduler_timer_fires_a_job(make_app, fake_anthropic):
    app: Any = await make_app()  # the real clock
    delivered = asyncio.Event()

    class Signalling(RecordingAdapter):
        async def send(self, reply: Reply, progress: object = None) -> list[str]:
            ids = await super().send(reply)
            delivered.set()
            return ids

    adapter = Signalling()
    app.attach(adapter)
    await app.start_scheduler()
    assert app.scheduler.platforms == {"console"}
    msg = message("-")
    user = await app.pipeline.s.identity.resolve(msg)
    conversation = await app.pipeline.s.conversations.resolve(msg)
    from bot.ports import ToolContext

    ctx = ToolContext(user.id, user.role, conversation.id, conversation.key, "console", "t")
    now = utcnow()
    spec = TriggerSpec("date", (now + timedelta(milliseconds=50)).isoformat(), "UTC", now)
    fake_anthropic.script("Ding.")
    created = await app.scheduler.create(ctx, "ring", spec)

    await asyncio.wait_for(delivered.wait(), timeout=30)
    await app.scheduler.wait_idle()
    assert adapter.texts == ["Ding."]
    row = await job(app, created.id)
    assert (row.state, row.last_status, row.run_count) == ("done", "answered", 1)


async def test_a_fire_apscheduler_reports_missed_is_recorded(make_app, fake_anthropic):
    clock = FakeClock()
    app, adapter = await started(make_app, clock)
    created = await add_job(app, "every 1h")
    clock.advance(hours=1, minutes=10)  # beyond the 5 minutes of grace
    app.scheduler._on_event(JobExecutionEvent(EVENT_JOB_MISSED, f"job:{created.id}", "default", T0))
    await app.scheduler.wait_idle()
    row = await job(app, created.id)
    assert (row.last_status, row.missed_count) == ("missed", 1)
    assert row.next_run_at == T0 + timedelta(hours=2)
    assert fake_anthropic.request_count == 0 and adapter.sent == []


async def test_operator_changes_reach_a_running_scheduler(make_app, fake_anthropic):
    clock = FakeClock()
    app, _ = await started(make_app, clock)
    created = await add_job(app, "every 1h")
    # Another process (switchboard jobs pause) changes the table only.
    await app.scheduler.jobs.change(created.id, "pause", clock.now)
    clock.advance(hours=1)
    assert await app.scheduler.run_due() == {}
    await app.scheduler.sync()
    assert app.scheduler.next_fire(created.id) is None
    await app.scheduler.jobs.change(created.id, "resume", clock.now)
    await app.scheduler.sync()
    assert app.scheduler.next_fire(created.id) == T0 + timedelta(hours=2)
    async with app.store.read() as s:
        assert (await s.exec(select(col(Run.id)))).all() == []


@pytest.mark.parametrize("how", ["operator", "budget", "orphaned"])
async def test_a_job_changed_in_another_process_is_synced_as_soon_as_it_is_seen(
    make_app, fake_anthropic, database, how
):
    """A job paused in another process (`switchboard jobs pause`; another
    instance pausing a spent owner's jobs, or an orphaned one): the running
    scheduler syncs when it sees the change (SQLite: the writer's next look,
    as a message's start makes; PostgreSQL: the job's notice), not at
    `sync_seconds`."""
    clock = FakeClock()
    app, _ = await started(make_app, clock)
    await app.pipeline.s.coordination.listen(lambda *_: None)  # as the service does
    created = await add_job(app, "every 1h")
    assert created.id is not None and app.scheduler.next_fire(created.id) is not None
    other = database.store()
    try:
        jobs = Jobs(other)
        if how == "operator":
            await jobs.change(created.id, "pause", clock.now)
        elif how == "budget":  # spent: a sync keeps it paused
            await Budgets(other, app.settings.budgets).set_limit(created.owner_user_id, "fixed", 0)
            assert await jobs.pause_owner(created.owner_user_id, "budget", clock.now)
        else:
            await jobs.update(created.id, state="paused", pause_reason="orphaned")
    finally:
        await other.dispose()
    await app.store.look_elsewhere()  # SQLite: what the next message's intake does
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5  # well within sync_seconds (30 s)
    while app.scheduler.next_fire(created.id) is not None:
        assert loop.time() < deadline, "the change was not synced"
        await asyncio.sleep(0.02)


async def test_syncs_asked_meanwhile_make_one_more_and_a_failed_one_is_logged(
    make_app, fake_anthropic, monkeypatch, caplog
):
    clock = FakeClock()
    app, _ = await started(make_app, clock)
    scheduler = app.scheduler
    real, runs = scheduler.sync, []

    async def sync() -> None:
        runs.append(1)
        if len(runs) == 1:
            await asyncio.sleep(0.05)  # still running when the others ask
            raise OSError("database is locked")
        await real()

    monkeypatch.setattr(scheduler, "sync", sync)
    with caplog.at_level(logging.ERROR, logger="switchboard.scheduler"):
        for _ in range(3):
            scheduler.sync_soon()
        await asyncio.sleep(0)
        scheduler.sync_soon()
        await app.scheduler.stop()  # lets the syncs under way finish
    assert len(runs) == 2  # the first, then one for all asked while it ran
    assert "scheduler.sync_failed" in caplog.text and "database is locked" in caplog.text
