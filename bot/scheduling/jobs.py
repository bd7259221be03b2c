"""The `scheduled_jobs` table: the source of truth of wakeups.

Every change happens in a write transaction that locks the row (`FOR UPDATE`
on PostgreSQL; SQLite has one writer at a time) and bumps `version`, so the
scheduler's memory can tell what changed, and a fire is claimed by exactly one
runner even with several instances: the claim moves `next_run_at` on before
the run starts.

A claimed fire is leased to the instance running it (`lease_owner`,
`lease_expires_at`, renewed while it runs, handed back at shutdown). When its
process dies, the lease expires and the next claim takes the same fire over
(`Claim.takeover`): a crash mid-fire costs seconds, not the next fire, and a
one-time wakeup is run again rather than left active with no next run.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import func, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.scheduling.parse import TriggerKind, TriggerSpec
from bot.store import Store
from bot.store.budget_rows import release_dead_holds
from bot.store.coordination import announce_jobs
from bot.store.models import Conversation, ScheduledJob
from bot.types import utcnow

OPEN_STATES = ("active", "paused")

Action = Literal["pause", "resume", "remove"]


def spec_of(job: ScheduledJob) -> TriggerSpec:
    kind: TriggerKind = job.trigger_kind  # type: ignore[assignment]
    return TriggerSpec(kind, job.trigger_expr, job.timezone, job.anchor_at)


@dataclass(frozen=True, slots=True)
class Claim:
    """A fire claimed for running (or recorded as missed)."""

    job: ScheduledJob
    scheduled_for: datetime
    missed: bool
    takeover: bool = False
    """The fire was claimed before by a process that died; it runs again."""


@dataclass(frozen=True, slots=True)
class JobInfo:
    job: ScheduledJob
    conversation_key: str
    platform: str


class Jobs:
    def __init__(self, store: Store, owner: str = "", lease_seconds: float = 20.0) -> None:
        self._store = store
        self.owner = owner
        """This instance, in the leases of the fires it runs."""
        self.lease = timedelta(seconds=lease_seconds)

    async def create(
        self,
        *,
        owner_user_id: int,
        conversation_id: int,
        chat_type: str,
        prompt: str,
        spec: TriggerSpec,
        now: datetime,
    ) -> ScheduledJob:
        job = ScheduledJob(
            owner_user_id=owner_user_id,
            conversation_id=conversation_id,
            chat_type=chat_type,
            prompt=prompt,
            trigger_kind=spec.kind,
            trigger_expr=spec.expr,
            timezone=spec.timezone,
            anchor_at=spec.anchor,
            description=spec.describe()[:200],
            next_run_at=spec.first_from(now),
            created_at=now,
            updated_at=now,
        )
        async with self._store.write() as session:
            session.add(job)
            await session.flush()
            assert job.id is not None
            await announce_jobs(session, self._store, job.id)
        return job

    async def get(self, job_id: int) -> ScheduledJob | None:
        async with self._store.read() as session:
            return await session.get(ScheduledJob, job_id)

    async def count_open(self, owner_user_id: int) -> int:
        async with self._store.read() as session:
            count = (
                await session.exec(
                    select(func.count())
                    .select_from(ScheduledJob)
                    .where(
                        ScheduledJob.owner_user_id == owner_user_id,
                        col(ScheduledJob.state).in_(OPEN_STATES),
                    )
                )
            ).one()
        return int(count)

    async def listing(
        self, *, owner_user_id: int | None = None, include_closed: bool = False
    ) -> list[JobInfo]:
        query = select(ScheduledJob, Conversation.key, Conversation.platform).join(
            Conversation, col(Conversation.id) == col(ScheduledJob.conversation_id)
        )
        if owner_user_id is not None:
            query = query.where(ScheduledJob.owner_user_id == owner_user_id)
        if not include_closed:
            query = query.where(col(ScheduledJob.state) != "removed")
        async with self._store.read() as session:
            rows = (await session.exec(query.order_by(col(ScheduledJob.id)))).all()
        return [JobInfo(job, key, platform) for job, key, platform in rows]

    async def versions(self, platforms: Collection[str]) -> dict[int, int]:
        """Job id → version of the open jobs on `platforms` and the closed ones
        with replies still to deliver: two small columns, so a sync can tell
        what changed without loading thousands of rows (then `get_many`)."""
        query = (
            select(ScheduledJob.id, ScheduledJob.version)
            .join(Conversation, col(Conversation.id) == col(ScheduledJob.conversation_id))
            .where(
                col(Conversation.platform).in_(list(platforms)),
                col(ScheduledJob.state).in_(OPEN_STATES) | col(ScheduledJob.retry_at).is_not(None),
            )
        )
        async with self._store.read() as session:
            return {
                job_id: version for job_id, version in (await session.exec(query)).all() if job_id
            }

    async def get_many(self, job_ids: Collection[int]) -> list[ScheduledJob]:
        query = (
            select(ScheduledJob)
            .where(col(ScheduledJob.id).in_(list(job_ids)))
            .order_by(col(ScheduledJob.id))
        )
        # A batch of whole rows (the scheduler loads them fifty at a time at
        # start and after changes): read on a worker thread, so the loop runs
        # while it is read.
        async with self._store.read(heavy=True) as session:
            return list((await session.exec(query)).all())

    async def due(self, now: datetime, platforms: Collection[str]) -> tuple[list[int], list[int]]:
        """Ids of jobs due to run, and of jobs with replies due to be retried."""
        on_platforms = col(ScheduledJob.conversation_id).in_(
            select(Conversation.id).where(col(Conversation.platform).in_(list(platforms)))
        )
        async with self._store.read() as session:
            runs = (
                await session.exec(
                    select(ScheduledJob.id).where(
                        ScheduledJob.state == "active",
                        col(ScheduledJob.next_run_at) <= now,
                        on_platforms,
                    )
                )
            ).all()
            retries = (
                await session.exec(
                    select(ScheduledJob.id).where(col(ScheduledJob.retry_at) <= now, on_platforms)
                )
            ).all()
        return [i for i in runs if i is not None], [i for i in retries if i is not None]

    async def claim(self, job_id: int, now: datetime, grace: timedelta) -> Claim | None:
        """Take the due fire of a job: move `next_run_at` to the next fire after
        `now` and mark it running — or, when it is later than `grace`, record it
        as missed. None when it is not due (or already taken, or still running).
        A fire is its owner's next message: what another process changed (an
        operator's CLI) is known before it runs (`Store.write(fresh=True)`)."""
        async with self._store.write(fresh=True) as session:
            job = await _locked(session, job_id)
            if job is None:
                return None
            if job.running_since is not None:  # leases run on the wall clock
                if job.lease_expires_at is not None and job.lease_expires_at >= utcnow():
                    return None  # running, and its process is alive
                return await self._take_over(session, job, now)
            if job.state != "active" or job.next_run_at is None or job.next_run_at > now:
                return None
            spec = spec_of(job)
            scheduled = job.next_run_at
            in_grace = now - scheduled <= grace
            if not in_grace:  # a later fire may still be within grace (coalesced)
                latest = spec.first_from(max(scheduled, now - grace))
                in_grace = latest is not None and latest <= now
            job.next_run_at = spec.next_after(now)
            job.version += 1
            job.updated_at = now
            if in_grace:
                job.running_since, job.fire_at = now, scheduled
                job.lease_owner, job.lease_expires_at = self.owner, utcnow() + self.lease
            else:
                job.last_status = "missed"
                job.missed_count += 1
                job.last_error = (
                    f"due {scheduled:%Y-%m-%d %H:%M:%S} UTC, {_ago(now - scheduled)} late "
                    f"(grace {_ago(grace)}): skipped"
                )
                if job.next_run_at is None:
                    job.state = "done"
            session.add(job)
            await session.flush()
            return Claim(job, scheduled, not in_grace)

    async def _take_over(self, session: AsyncSession, job: ScheduledJob, now: datetime) -> Claim:
        if job.lease_owner and job.lease_owner != self.owner:  # the dead run's budget holds
            key = select(Conversation.key).where(Conversation.id == job.conversation_id)
            found = (await session.exec(key)).first()
            if found is not None:
                await release_dead_holds(session, [(job.lease_owner, found)], utcnow())
        scheduled = job.fire_at or job.running_since or now
        job.running_since = now
        job.lease_owner, job.lease_expires_at = self.owner, utcnow() + self.lease
        job.version += 1
        job.updated_at = now
        session.add(job)
        await session.flush()
        return Claim(job, scheduled, missed=False, takeover=True)

    async def orphaned_fires(self, platforms: Collection[str]) -> list[int]:
        """Jobs with a claimed fire whose process died (its lease expired)."""
        now = utcnow()
        on_platforms = col(ScheduledJob.conversation_id).in_(
            select(Conversation.id).where(col(Conversation.platform).in_(list(platforms)))
        )
        expired = col(ScheduledJob.lease_expires_at).is_(None) | (
            col(ScheduledJob.lease_expires_at) < now
        )
        async with self._store.read() as session:
            rows = await session.exec(
                select(ScheduledJob.id).where(
                    col(ScheduledJob.running_since).is_not(None), expired, on_platforms
                )
            )
            return [i for i in rows.all() if i is not None]

    async def confirm(self, job_id: int) -> bool:
        """Whether this process still holds the fire of `job_id` it claimed
        (another did not take it over while this one stalled past its lease),
        its lease extended if so: a fire's replies are sent only then, and in
        the lease it gets here nobody takes it over."""
        if not self.owner:
            return True
        return bool(await self._set_leases(self.lease, (job_id,)))

    async def renew(self, job_ids: Collection[int] | None = None) -> int:
        """Extend the leases of the fires this instance is running (of
        `job_ids` only, when given)."""
        return await self._set_leases(self.lease, job_ids)

    async def release(self) -> int:
        """Hand this instance's running fires to the next process (shutdown)."""
        return await self._set_leases(timedelta(0))

    async def _set_leases(self, ahead: timedelta, job_ids: Collection[int] | None = None) -> int:
        if not self.owner or (job_ids is not None and not job_ids):
            return 0
        which = () if job_ids is None else (col(ScheduledJob.id).in_(list(job_ids)),)
        async with self._store.write() as session:
            result = await session.exec(
                update(ScheduledJob)
                .where(
                    col(ScheduledJob.lease_owner) == self.owner,
                    col(ScheduledJob.running_since).is_not(None),
                    *which,
                )
                .values(lease_expires_at=utcnow() + ahead)
            )
        return int(result.rowcount or 0)

    async def update(self, job_id: int, **values: object) -> ScheduledJob | None:
        async with self._store.write() as session:
            job = await _locked(session, job_id)
            if job is None:
                return None
            for name, value in values.items():
                setattr(job, name, value)
            job.version += 1
            session.add(job)
            await session.flush()
            await announce_jobs(session, self._store, job_id)
            return job

    async def change(
        self,
        job_id: int,
        action: Action,
        now: datetime,
        *,
        reason: str = "operator",
        owner_user_id: int | None = None,
    ) -> ScheduledJob | None:
        """Pause, resume or remove a job (only the owner's when `owner_user_id`
        is given). None when there is no such (open) job."""
        async with self._store.write() as session:
            job = await _locked(session, job_id)
            if job is None or job.state not in OPEN_STATES:
                return None
            if owner_user_id is not None and job.owner_user_id != owner_user_id:
                return None
            if action == "pause":
                job.state, job.pause_reason = "paused", reason
            elif action == "remove":
                job.state, job.next_run_at = "removed", None
            elif job.state == "paused":
                job.state, job.pause_reason = "active", None
                job.next_run_at = resume_time(job, now)
                if job.next_run_at is None:
                    job.state = "done"
            job.version += 1
            job.updated_at = now
            session.add(job)
            await session.flush()
            await announce_jobs(session, self._store, job_id)
            return job

    async def pause_owner(self, owner_user_id: int, reason: str, now: datetime) -> list[int]:
        """Pause every active job of a user; the ids paused."""
        async with self._store.write() as session:
            jobs = (
                await session.exec(
                    select(ScheduledJob)
                    .where(
                        ScheduledJob.owner_user_id == owner_user_id,
                        ScheduledJob.state == "active",
                    )
                    .with_for_update()
                )
            ).all()
            for job in jobs:
                job.state, job.pause_reason = "paused", reason
                job.version += 1
                job.updated_at = now
                session.add(job)
            paused = [job.id for job in jobs if job.id is not None]
            if paused:  # one notice: a scheduler syncs every job at it
                await announce_jobs(session, self._store, paused[0])
        return paused

    async def paused_for(self, reason: str, platforms: Collection[str]) -> Sequence[ScheduledJob]:
        async with self._store.read() as session:
            return (
                await session.exec(
                    select(ScheduledJob)
                    .join(Conversation, col(Conversation.id) == col(ScheduledJob.conversation_id))
                    .where(
                        ScheduledJob.state == "paused",
                        ScheduledJob.pause_reason == reason,
                        col(Conversation.platform).in_(list(platforms)),
                    )
                )
            ).all()


def resume_time(job: ScheduledJob, now: datetime) -> datetime | None:
    """When a resumed job next runs: its next fire; a one-time wakeup whose
    time passed while paused runs at once."""
    spec = spec_of(job)
    if spec.kind == "date":
        return max(spec.first_from(job.anchor_at) or now, now)
    return spec.next_after(now)


async def _locked(session: AsyncSession, job_id: int) -> ScheduledJob | None:
    return (
        await session.exec(select(ScheduledJob).where(ScheduledJob.id == job_id).with_for_update())
    ).first()


def _ago(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
