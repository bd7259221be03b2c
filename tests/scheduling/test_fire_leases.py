"""Only the fires running in this process have their leases renewed. A fire
left claimed by one that failed (the soak: PostgreSQL's backends cut as the
claim committed, "cannot switch to state 12; another operation is in
progress") used to be renewed by its live instance forever, never finished
and never taken over; now its lease ends and another sweep takes it over."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

from sqlalchemy import update
from sqlmodel import col

from bot.accounts.identity import Identity
from bot.conversations import Conversations
from bot.scheduling.jobs import Jobs
from bot.scheduling.parse import parse_when
from bot.store import Store
from bot.store.models import ScheduledJob
from bot.types import IncomingMessage, utcnow
from tests.fakes.anthropic import text_reply
from tests.scheduling.rig import FakeClock, add_job, started


async def claimed_job(store: Store, jobs: Jobs) -> int:
    msg = IncomingMessage(
        platform="slack", platform_user_id="U1", platform_channel_id="D1", text="-"
    )
    user = await Identity(store, ()).resolve(msg)
    conversation = await Conversations(store).resolve(msg)
    now = utcnow()
    job = await jobs.create(
        owner_user_id=user.id,
        conversation_id=conversation.id,
        chat_type="direct",
        prompt="Say good morning.",
        spec=parse_when((now + timedelta(seconds=1)).isoformat(), timezone="UTC", now=now),
        now=now,
    )
    assert job.id is not None
    assert await jobs.claim(job.id, now + timedelta(seconds=2), timedelta(minutes=5)) is not None
    return job.id


async def lease_of(store: Store, job_id: int):  # type: ignore[no-untyped-def]
    async with store.read() as session:
        job = await session.get(ScheduledJob, job_id)
        assert job is not None
        return job.lease_expires_at


async def expire(store: Store, job_id: int) -> None:
    async with store.write() as session:
        await session.exec(
            update(ScheduledJob)
            .where(col(ScheduledJob.id) == job_id)
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )


async def test_a_fire_no_longer_running_here_is_not_renewed_and_is_taken_over(
    make_app,
) -> None:  # type: ignore[no-untyped-def]
    app = await make_app()
    store, jobs = app.pipeline.s.store, app.scheduler.jobs
    job_id = await claimed_job(store, jobs)  # claimed here; nothing runs it any more
    await expire(store, job_id)
    ended = await lease_of(store, job_id)

    await app.housekeeper.sweep()  # renews what this process holds
    assert await lease_of(store, job_id) == ended
    other = Jobs(store, owner="instance-b", lease_seconds=5)
    assert await other.orphaned_fires(["slack"]) == [job_id]
    taken = await other.claim(job_id, utcnow(), timedelta(minutes=5))
    assert taken is not None and taken.takeover


async def test_a_fire_running_here_is_renewed(store: Store) -> None:
    jobs = Jobs(store, owner="instance-a", lease_seconds=5)
    job_id = await claimed_job(store, jobs)
    await expire(store, job_id)
    ended = await lease_of(store, job_id)
    assert await jobs.renew([]) == 0
    assert await jobs.renew([job_id]) == 1
    assert await lease_of(store, job_id) > ended


async def test_a_fire_still_running_here_is_not_taken_over_by_this_process(
    make_app, fake_anthropic
) -> None:  # type: ignore[no-untyped-def]
    """The soak: an instance restarted under load fired its missed wakeups at
    once, and its first sweep (seconds later, past the 5-second lease) took
    those same fires over as if their process had died: each wakeup ran, and
    was shown, twice. A fire running here is ours, whatever its lease says."""
    clock = FakeClock(utcnow())
    app, adapter = await started(make_app, clock, platform="slack")
    created = await add_job(app, "in 1 minute", platform="slack")
    clock.advance(minutes=1)
    answer = threading.Event()
    fake_anthropic.script(text_reply("Good morning.", hold=answer))
    firing = asyncio.create_task(app.scheduler.run_due())
    await fake_anthropic.wait_for_requests(1)
    await expire(app.pipeline.s.store, created.id)  # its lease ran out meanwhile

    assert await app.scheduler.take_over_fires() == 0
    answer.set()
    assert await firing == {created.id: "answered"}
    await app.scheduler.wait_idle()
    assert adapter.texts == ["Good morning."]
    assert fake_anthropic.request_count == 1


async def test_a_fire_taken_over_elsewhere_while_it_ran_here_is_not_sent_here(
    make_app, fake_anthropic
) -> None:  # type: ignore[no-untyped-def]
    """The soak: an instance restarted under load fired its missed wakeups,
    and did not renew their 5-second leases before the other instance's
    sweep took them over: both ran each wakeup and both sent it. Now the
    fire's replies go out only while it is still this process's (its lease
    extended as that is confirmed); the instance that took it over sends it
    and finishes it."""
    clock = FakeClock(utcnow())
    app, adapter = await started(make_app, clock, platform="slack")
    store = app.pipeline.s.store
    created = await add_job(app, "in 1 minute", platform="slack")
    clock.advance(minutes=1)
    answer = threading.Event()
    fake_anthropic.script(text_reply("Good morning.", hold=answer))
    firing = asyncio.create_task(app.scheduler.run_due())
    await fake_anthropic.wait_for_requests(1)
    await expire(store, created.id)
    other = Jobs(store, owner="instance-b", lease_seconds=30)
    taken = await other.claim(created.id, utcnow(), timedelta(minutes=5))
    assert taken is not None and taken.takeover

    answer.set()
    assert await firing == {created.id: "lease_lost"}
    assert adapter.texts == []  # the other instance sends it
    async with store.read() as session:
        row = await session.get(ScheduledJob, created.id)
    assert row is not None and row.lease_owner == "instance-b" and row.running_since is not None
    assert row.run_count == 0  # not finished here: the other instance records its run
