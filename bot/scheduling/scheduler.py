"""Scheduled wakeups on APScheduler 3 (`AsyncIOScheduler`, in-memory job store).

The `scheduled_jobs` table is the source of truth; APScheduler is the alarm
clock. At start, every `sync_seconds`, and as soon as a change made in another
process is seen (`sync_soon`: `switchboard jobs …`, another instance; see
`bot.app.wiring.sync_jobs_changed_elsewhere`), the memory store is rebuilt
from the table for the platforms this process serves. Each job is registered
with its own trigger and the stored `next_run_at`; a job that came due while
the service was down is registered to fire at once, and `Wakeups.run` decides
with the scheduler's clock: within `misfire_grace_seconds` it runs once
(coalesced), otherwise it is recorded as missed.

APScheduler options are explicit: `misfire_grace_time` from config (its 1 s
default silently drops late jobs), `coalesce=True`, `max_instances=1`. A fire
is also claimed in the database before it runs, so it runs once even with
several instances; an APScheduler "missed" event goes through the same claim,
so it is recorded on the job too.

Tests drive it with a controllable clock: `start(timer=False)` keeps
APScheduler paused (jobs are still registered), and `run_due()` fires what the
clock says is due through the same code path.

A sync reads only (id, version) of every job, then loads and registers the
jobs whose version changed in batches of `REGISTER_BATCH`, with a pass
through the event loop between them: thousands of jobs never hold the loop
(and the messages, webhooks and health checks it serves) for more than a
moment, at start or at any later sync.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from bot.accounts.budgets import Budgets
from bot.accounts.directory import Directory
from bot.config import SchedulerSettings
from bot.ports import ToolContext
from bot.scheduling.heartbeat import Heartbeats
from bot.scheduling.jobs import Jobs, spec_of
from bot.scheduling.parse import TriggerSpec
from bot.scheduling.wakeups import Clock, Wakeups, WakeupSink
from bot.store.models import ScheduledJob
from bot.store.transient import log_failure
from bot.types import utcnow

log = logging.getLogger("switchboard.scheduler")

REGISTER_BATCH = 50
"""Jobs registered with APScheduler between two passes through the event loop."""


class Scheduler:
    def __init__(
        self,
        settings: SchedulerSettings,
        jobs: Jobs,
        wakeups: Wakeups,
        heartbeats: Heartbeats,
        directory: Directory,
        budgets: Budgets,
        clock: Clock = utcnow,
    ) -> None:
        self.settings = settings
        self.jobs = jobs
        self.wakeups = wakeups
        self.heartbeats = heartbeats
        self._directory = directory
        self._budgets = budgets
        self.clock = clock
        self.platforms: frozenset[str] = frozenset()
        self._sink: WakeupSink | None = None
        self._aps: AsyncIOScheduler | None = None
        self._known: dict[int, int] = {}  # job id → version registered
        self._tasks: set[asyncio.Task[Any]] = set()
        self._firing: Counter[int] = Counter()
        """Jobs whose fire runs here now: the only fire leases renewed."""
        self._syncing: asyncio.Task[None] | None = None
        self._sync_again = False

    # -- lifecycle ------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._aps is not None

    @property
    def aps(self) -> AsyncIOScheduler:
        if self._aps is None:
            raise RuntimeError("the scheduler is not started")
        return self._aps

    async def start(
        self, sink: WakeupSink, platforms: Sequence[str], *, timer: bool = True
    ) -> None:
        """Rebuild the jobs of `platforms` from the database and start the clock
        (`timer=False`: registered but paused, for tests driving `run_due`)."""
        self._sink = sink
        self.platforms = frozenset(platforms)
        grace = self.settings.misfire_grace_seconds
        self._aps = AsyncIOScheduler(
            timezone=UTC,
            job_defaults={"misfire_grace_time": grace, "coalesce": True, "max_instances": 1},
        )
        self._aps.add_listener(self._on_event, EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)
        self._aps.start(paused=not timer)
        self._aps.add_job(
            self._tracked,
            IntervalTrigger(seconds=self.settings.sync_seconds, timezone=UTC),
            args=[self.sync],
            id="sync",
        )
        for persona in self.heartbeats.declared():
            assert persona.heartbeat_minutes is not None
            self._aps.add_job(
                self._tracked,
                IntervalTrigger(minutes=persona.heartbeat_minutes, timezone=UTC),
                args=[self.heartbeat, persona.name],
                id=f"heartbeat:{persona.name}",
            )
        await self.sync()
        log.info(
            "scheduler.started platforms=%s jobs=%d grace=%ss",
            ",".join(sorted(self.platforms)),
            len(self._known),
            grace,
        )

    async def stop(self, grace: float = 30.0) -> None:
        """Stop firing, let running wakeups finish (up to `grace` s), shut down."""
        if self._aps is None:
            return
        self._aps.pause()
        pending = {t for t in self._tasks if not t.done()}
        if pending:
            await asyncio.wait(pending, timeout=grace)
        self._aps.shutdown(wait=False)
        self._aps = None
        self._known.clear()
        await asyncio.sleep(0)  # AsyncIOScheduler shuts down on the next loop turn

    async def wait_idle(self) -> None:
        """Wait for every wakeup started so far (tests)."""
        while pending := {t for t in self._tasks if not t.done()}:
            await asyncio.wait(pending)

    # -- creating jobs (the schedule tools) ---------------------------------------

    async def create(self, ctx: ToolContext, prompt: str, spec: TriggerSpec) -> ScheduledJob:
        job = await self.jobs.create(
            owner_user_id=ctx.user_id,
            conversation_id=ctx.conversation_id,
            chat_type=ctx.chat_type,
            prompt=prompt,
            spec=spec,
            now=self.clock(),
        )
        if ctx.platform in self.platforms:
            self.register(job)
        log.info("job.created id=%s owner=%s %s", job.id, ctx.user_id, job.description)
        return job

    # -- firing -------------------------------------------------------------------

    async def run_job(self, job_id: int) -> str:
        if self._sink is None:
            raise RuntimeError("the scheduler is not started")
        status = await self.wakeups.run(self._sink, job_id)
        if status == "refused":  # the owner's other jobs were paused too
            await self.sync()
        else:
            await self._refresh(job_id)
        return status

    async def retry_delivery(self, job_id: int) -> bool:
        if self._sink is None:
            raise RuntimeError("the scheduler is not started")
        done = await self.wakeups.deliver_pending(self._sink, job_id)
        await self._refresh(job_id)
        return done

    async def take_over_fires(self) -> int:
        """Run again the fires whose process died mid-way (their lease expired);
        not those still running here (their lease ran out while this process
        was slow to renew it: a loaded start-up), which would fire twice."""
        if self._aps is None or self._sink is None:
            return 0
        found = await self.jobs.orphaned_fires(self.platforms)
        orphaned = [job_id for job_id in found if job_id not in self._firing]
        for job_id in orphaned:
            task = asyncio.create_task(self._tracked(self.run_job, job_id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return len(orphaned)

    async def heartbeat(self, persona_name: str) -> dict[str, str]:
        if self._sink is None:
            raise RuntimeError("the scheduler is not started")
        return await self.heartbeats.run(self._sink, persona_name, self.clock(), self.platforms)

    async def run_due(self) -> dict[int, str]:
        """Fire everything the clock says is due (runs and delivery retries)."""
        runs, retries = await self.jobs.due(self.clock(), self.platforms)
        results: dict[int, str] = {}
        for job_id in retries:
            results[job_id] = "delivered" if await self.retry_delivery(job_id) else "undelivered"
        statuses = await asyncio.gather(*(self._tracked(self.run_job, i) for i in runs))
        results.update(zip(runs, statuses, strict=True))
        return results

    async def _tracked(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run a wakeup as a tracked task (so `stop` can let it finish)."""
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        firing = args[0] if func == self.run_job else None
        if firing is not None:
            self._firing[firing] += 1
        try:
            return await func(*args)
        except Exception as exc:  # a fire left claimed is taken over once its lease ends
            log_failure(
                log, exc, "scheduler.%s_failed args=%s", getattr(func, "__name__", func), args
            )
            return "error"
        finally:
            if task is not None:
                self._tasks.discard(task)
            if firing is not None:
                self._firing[firing] -= 1
                if not self._firing[firing]:
                    del self._firing[firing]

    async def renew_fires(self) -> int:
        """Extend the leases of the fires running here now, and only those: a
        fire left claimed by one that failed (its database cut as it
        committed) ends its lease and is taken over, not kept forever."""
        return await self.jobs.renew(tuple(self._firing))

    def _on_event(self, event: JobEvent) -> None:
        """APScheduler listener (called in the loop): a missed or overlapping fire."""
        if not event.job_id.startswith("job:"):
            return
        job_id = int(event.job_id.split(":", 1)[1])
        if event.code == EVENT_JOB_MAX_INSTANCES:
            log.warning("wakeup.skipped job=%s: the previous run is still going", job_id)
            return
        # Missed by APScheduler's clock: the claim records it (or runs it, if the
        # scheduler's clock says it is still within grace).
        task = asyncio.get_running_loop().create_task(self._tracked(self.run_job, job_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- memory ⇄ database -----------------------------------------------------------

    async def sync(self) -> None:
        """Make memory match the table; resume jobs paused for a budget that has
        tokens again."""
        now = self.clock()
        for job in await self.jobs.paused_for("budget", self.platforms):
            owner = await self._directory.get(job.owner_user_id)
            if owner is None or job.id is None:
                continue
            if not (await self._budgets.status(owner.id, owner.role)).exhausted:
                await self.jobs.change(job.id, "resume", now)
                log.info("job.resumed id=%s (budget available again)", job.id)
        known = set(self._known)  # before the read: a job created meanwhile stays
        versions = await self.jobs.versions(self.platforms)
        # Versions only grow: a row older than what a fire registered meanwhile
        # (while this sync waited on the database) is not put back.
        stale = sorted(i for i, v in versions.items() if v > self._known.get(i, -1))
        for start in range(0, len(stale), REGISTER_BATCH):
            for job in await self.jobs.get_many(stale[start : start + REGISTER_BATCH]):
                assert job.id is not None
                if job.version > self._known.get(job.id, -1):
                    self.register(job)
            await asyncio.sleep(0)  # a pass through the loop between batches
        for job_id in known - set(versions):
            self._unregister(job_id)

    def sync_soon(self) -> None:
        """Sync now, in the background, not at the next `sync_seconds`: a job
        changed in another process (the CLI, another instance). Asked while
        one runs: one more after it."""
        if self._aps is None:
            return
        if self._syncing is not None and not self._syncing.done():
            self._sync_again = True
            return
        self._syncing = asyncio.get_running_loop().create_task(self._sync_until_quiet())

    async def _sync_until_quiet(self) -> None:
        again = True
        while again and self._aps is not None:
            self._sync_again = False
            await self._tracked(self.sync)  # `stop` waits for it; a failure is logged
            again = self._sync_again

    async def _refresh(self, job_id: int) -> None:
        job = await self.jobs.get(job_id)
        if job is None:
            self._unregister(job_id)
        else:
            self.register(job)

    def register(self, job: ScheduledJob) -> None:
        """Put one job (and its delivery retry) in APScheduler's memory, or take
        it out when it should not fire."""
        if self._aps is None or job.id is None:
            return
        key = f"job:{job.id}"
        if job.state == "active" and job.next_run_at is not None:
            spec = spec_of(job)
            trigger = spec.build() if spec.kind != "date" else DateTrigger(job.next_run_at, UTC)
            self._aps.add_job(
                self._tracked,
                trigger,
                args=[self.run_job, job.id],
                id=key,
                next_run_time=max(job.next_run_at, self.clock()),
                replace_existing=True,
            )
        else:
            self._remove(key)
        if job.pending_replies and job.retry_at is not None:
            self._aps.add_job(
                self._tracked,
                DateTrigger(job.retry_at, UTC),
                args=[self.retry_delivery, job.id],
                id=f"retry:{job.id}",
                next_run_time=max(job.retry_at, self.clock()),
                replace_existing=True,
            )
        else:
            self._remove(f"retry:{job.id}")
        self._known[job.id] = job.version

    def _unregister(self, job_id: int) -> None:
        self._remove(f"job:{job_id}")
        self._remove(f"retry:{job_id}")
        self._known.pop(job_id, None)

    def _remove(self, key: str) -> None:
        if self._aps is not None and self._aps.get_job(key) is not None:
            self._aps.remove_job(key)

    def next_fire(self, job_id: int) -> datetime | None:
        """When APScheduler will fire a job (None: not registered)."""
        job = self._aps.get_job(f"job:{job_id}") if self._aps else None
        fire: datetime | None = None if job is None else job.next_run_time
        return fire
