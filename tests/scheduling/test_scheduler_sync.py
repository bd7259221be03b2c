"""Syncing thousands of jobs never holds the event loop: registration goes in
batches with a pass through the loop between them, a sync with nothing
changed loads no rows, and what changes while a sync waits is not undone."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

from bot.scheduling import scheduler as scheduler_module
from bot.store.models import ScheduledJob
from tests.scheduling.rig import FakeClock, add_job, started

JOBS = 7
BATCH = 3


class Ticker:
    """Counts passes through the event loop."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:  # each pass counts, the first one too
            self.ticks += 1
            await asyncio.sleep(0)

    def stop(self) -> None:
        self._task.cancel()


async def test_jobs_register_in_batches_and_an_unchanged_sync_loads_nothing(
    make_app, fake_anthropic, monkeypatch
):
    monkeypatch.setattr(scheduler_module, "REGISTER_BATCH", BATCH)
    clock = FakeClock()
    app, _ = await started(make_app, clock)
    created = [await add_job(app, f"every {i + 1}h") for i in range(JOBS)]
    scheduler = app.scheduler
    await scheduler.stop()  # a restart rebuilds all of them from the table
    ticker = Ticker()
    at_tick: list[int] = []
    register = scheduler.register

    def counting(job: ScheduledJob) -> None:
        at_tick.append(ticker.ticks)
        register(job)

    monkeypatch.setattr(scheduler, "register", counting)
    loaded: list[int] = []
    get_many = scheduler.jobs.get_many

    async def spy(job_ids: Collection[int]) -> list[ScheduledJob]:
        loaded.extend(job_ids)
        return await get_many(job_ids)

    monkeypatch.setattr(scheduler.jobs, "get_many", spy)
    try:
        await scheduler.start(app.pipeline, ["console"], timer=False)
    finally:
        ticker.stop()
    assert len(at_tick) == JOBS
    runs = [at_tick.count(tick) for tick in dict.fromkeys(at_tick)]
    assert max(runs) <= BATCH  # never more than a batch without the loop running
    assert all(scheduler.next_fire(j.id) is not None for j in created)
    assert sorted(loaded) == sorted(j.id for j in created)
    loaded.clear()
    await scheduler.sync()
    assert loaded == [] and len(at_tick) == JOBS  # nothing changed: nothing loaded


async def test_a_sync_does_not_undo_what_changed_while_it_waited(
    make_app, fake_anthropic, monkeypatch
):
    clock = FakeClock()
    app, _ = await started(make_app, clock)
    old = await add_job(app, "every 2h")
    scheduler = app.scheduler
    versions = scheduler.jobs.versions
    late: list[Any] = []

    async def slow_versions(platforms: Collection[str]) -> dict[int, int]:
        found = await versions(platforms)
        # Meanwhile: a job is created, and the old one is paused by a fire.
        late.append(await add_job(app, "every 3h"))
        await scheduler.jobs.change(old.id, "pause", clock.now)
        paused = await scheduler.jobs.get(old.id)
        assert paused is not None
        scheduler.register(paused)
        return found

    monkeypatch.setattr(scheduler.jobs, "versions", slow_versions)
    await scheduler.sync()
    assert scheduler.next_fire(late[0].id) is not None  # created meanwhile: kept
    assert scheduler.next_fire(old.id) is None  # paused meanwhile: not put back
