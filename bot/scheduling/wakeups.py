"""Running one scheduled wakeup through the pipeline, and recording what happened.

A fire is claimed in the database first (`Jobs.claim`), so it runs once. The
wakeup is an `IncomingMessage(source="scheduler")` for the job's conversation,
sent by the owner's account on that platform (after `/link` a user has
accounts on several), handled with `deliver=False` so that the replies are
sent here and a failed delivery is known: the text is kept on the job and
retried with backoff (each failure is also in `delivery_failures`).

Outcomes: answered → posted; silent (NO_REPLY) → nothing posted; refused
(spent budget) → every active job of the owner is paused and the owner told
once, in this conversation (jobs paused for the budget resume by themselves
when there are tokens again, see `Scheduler.sync`); failed (provider error) →
recorded on the job; a one-time wakeup is retried with backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from bot.accounts.directory import Directory
from bot.config import SchedulerSettings
from bot.conversations import ConversationRecord, Conversations
from bot.logs import run_scope
from bot.metrics import Metrics
from bot.scheduling.jobs import Jobs, spec_of
from bot.store import Store
from bot.store.models import Run, ScheduledJob
from bot.types import IncomingMessage, Outcome, Reply, Target

log = logging.getLogger("switchboard.scheduler")

DELIVERY_LEASE = timedelta(minutes=5)
"""Owed replies being retried are held this long, in case the process stops mid-way."""

BUDGET_PAUSED = (
    "Your scheduled wakeups here and elsewhere are paused because your token allowance "
    "for this month is spent: {jobs}. They resume by themselves when you have tokens "
    "again (an admin can /grant more)."
)


class WakeupSink(Protocol):
    """What the scheduler needs of the pipeline."""

    async def handle(self, msg: IncomingMessage, *, deliver: bool = True) -> Outcome: ...

    async def send(self, reply: Reply) -> bool: ...


Clock = Callable[[], datetime]


@dataclass(frozen=True, slots=True)
class Backoff:
    first: timedelta
    limit: timedelta
    max_retries: int

    def after(self, failures: int) -> timedelta:
        return min(self.first * (1 << min(max(failures - 1, 0), 30)), self.limit)

    @classmethod
    def of(cls, settings: SchedulerSettings) -> Backoff:
        return cls(
            timedelta(seconds=settings.retry_seconds),
            timedelta(seconds=settings.retry_max_seconds),
            settings.max_retries,
        )


@dataclass(frozen=True, slots=True)
class _Result:
    status: str
    run_id: str | None = None
    error: str | None = None
    failed: bool = False
    owe: tuple[str, ...] = ()
    """Reply texts that could not be delivered."""
    ours: bool = True
    """False: another instance took the fire over; the row is its to finish."""


class Wakeups:
    def __init__(
        self,
        settings: SchedulerSettings,
        store: Store,
        jobs: Jobs,
        directory: Directory,
        conversations: Conversations,
        clock: Clock,
        metrics: Metrics | None = None,
    ) -> None:
        self._clock = clock
        self._metrics = metrics
        self._store = store
        self._jobs = jobs
        self._directory = directory
        self._conversations = conversations
        self._grace = timedelta(seconds=settings.misfire_grace_seconds)
        self._backoff = Backoff.of(settings)

    async def run(self, sink: WakeupSink, job_id: int) -> str:
        """Run the job's due fire. Returns what happened (for logs and tests).
        Its lines, and those of the run it starts, carry one run id."""
        with run_scope():
            outcome = await self._fire(sink, job_id)
        if self._metrics is not None and outcome != "not-due":  # not-due: another took it
            self._metrics.wakeup(outcome)
        return outcome

    async def _fire(self, sink: WakeupSink, job_id: int) -> str:
        now = self._clock()
        claim = await self._jobs.claim(job_id, now, self._grace)
        if claim is None:
            return "not-due"
        if claim.missed:
            log.warning("wakeup.missed job=%s %s", job_id, claim.job.last_error)
            return "missed"
        if claim.takeover:
            log.info(
                "wakeup.taken_over job=%s fire=%s (its process stopped mid-fire)",
                job_id,
                f"{claim.scheduled_for:%Y-%m-%d %H:%M:%S}",
            )
        try:
            result = await self._run_claimed(sink, claim.job, now)
        except Exception as exc:  # never leave a job marked running
            log.exception("wakeup.crashed job=%s", job_id)
            result = _Result("failed", error=f"{type(exc).__name__}: {exc}", failed=True)
        if result.ours:
            await self._finish(job_id, result, now)
        return result.status

    async def _run_claimed(self, sink: WakeupSink, job: ScheduledJob, now: datetime) -> _Result:
        job_id = job.id or 0
        conversation = await self._conversations.by_id(job.conversation_id)
        if conversation is None:
            return await self._orphaned(job_id, "its conversation is gone", now)
        account = await self._directory.account_on(job.owner_user_id, conversation.platform)
        if account is None:
            reason = f"its owner has no {conversation.platform} account any more"
            return await self._orphaned(job_id, reason, now)
        if job.pending_replies:  # deliver what is owed first, in order
            await self.deliver_pending(sink, job_id, force=True)
        log.info("wakeup.run job=%s conversation=%s owner=%s", job_id, conversation.key, account)
        outcome = await sink.handle(self._message(job, conversation, account, now), deliver=False)
        run_id = outcome.run_id
        if not await self._jobs.confirm(job_id):
            log.warning(
                "wakeup.lease_lost job=%s run=%s: another instance took this fire over "
                "(its lease ran out meanwhile); not sent",
                job_id,
                run_id,
            )
            return _Result("lease_lost", run_id, ours=False)
        if outcome.status == "answered":
            undelivered = await _send_all(sink, outcome.replies)
            if undelivered:
                return _Result("delivery_failed", run_id, owe=tuple(undelivered))
            return _Result("answered", run_id)
        if outcome.status == "silent":
            return _Result("silent", run_id)
        if outcome.status == "refused":
            await self._pause_for_budget(sink, job, outcome, now)
            return _Result("refused", run_id)
        error = await self._run_error(run_id) or f"pipeline outcome {outcome.status}"
        return _Result("failed", run_id, error=error, failed=True)

    async def _orphaned(self, job_id: int, reason: str, now: datetime) -> _Result:
        await self._jobs.update(job_id, state="paused", pause_reason="orphaned")
        log.error("wakeup.orphaned job=%s: %s", job_id, reason)
        return _Result("failed", error=f"paused: {reason}")

    def _message(
        self, job: ScheduledJob, conversation: ConversationRecord, account: str, now: datetime
    ) -> IncomingMessage:
        return IncomingMessage(
            platform=conversation.platform,
            platform_user_id=account,
            platform_channel_id=conversation.channel_id,
            platform_thread_id=conversation.thread_id,
            platform_server_id=conversation.server_id,
            text=f"[Scheduled wakeup #{job.id}, {job.description}]\n{job.prompt}",
            chat_type="group" if job.chat_type == "group" else "direct",
            source="scheduler",
            received_at=now,
        )

    async def _finish(self, job_id: int, result: _Result, started: datetime) -> None:
        """Record the run on the (freshly read, locked) row."""
        now = self._clock()
        async with self._store.write() as session:
            row = await session.get(ScheduledJob, job_id, with_for_update=True)
            if row is None:
                return
            row.running_since = row.fire_at = None
            row.lease_owner = row.lease_expires_at = None
            row.last_run_at, row.last_status = started, result.status
            row.last_run_id = result.run_id or row.last_run_id
            row.run_count += 1
            if result.owe:
                row.failure_count += 1
                row.pending_replies = [*(row.pending_replies or []), *result.owe]
                row.retry_at = now + self._backoff.after(row.failure_count)
                row.last_error = "delivery failed (see delivery_failures); will retry"
            elif result.failed:
                row.failure_count += 1
                row.last_error = result.error
                if row.trigger_kind == "date" and row.state == "active":
                    if row.failure_count <= self._backoff.max_retries:
                        row.next_run_at = now + self._backoff.after(row.failure_count)
                    else:
                        row.state = "failed"
            elif result.error:
                row.last_error = result.error
            else:
                row.failure_count, row.last_error = 0, None
            if row.state == "active" and row.next_run_at is None:
                row.state = "done"
            elif (
                row.state == "active"
                and row.next_run_at is not None
                and row.next_run_at <= now
                and row.trigger_kind != "date"
            ):
                row.missed_count += 1  # fires that came while it was still running
                row.next_run_at = spec_of(row).next_after(now)
            row.version += 1
            row.updated_at = now
            session.add(row)
        log.info("wakeup.finished job=%s status=%s", job_id, result.status)

    async def deliver_pending(self, sink: WakeupSink, job_id: int, *, force: bool = False) -> bool:
        """Try again to deliver a job's undelivered replies (when their retry is
        due, or `force`). True when none are left."""
        now = self._clock()
        async with self._store.write() as session:  # take them: nobody else retries now
            row = await session.get(ScheduledJob, job_id, with_for_update=True)
            if row is None or not row.pending_replies:
                return True
            if not force and (row.retry_at is None or row.retry_at > now):
                return False
            texts = list(row.pending_replies)
            row.retry_at = now + DELIVERY_LEASE  # a lease, in case we stop mid-way
            row.version += 1
            session.add(row)
        conversation = await self._conversations.by_id(row.conversation_id)
        if conversation is None:
            return False
        target = Target(
            conversation.platform,
            conversation.channel_id,
            conversation.thread_id,
            server_id=conversation.server_id,
        )
        left = await _send_all(sink, [Reply(t, target) for t in texts])
        async with self._store.write() as session:
            row = await session.get(ScheduledJob, job_id, with_for_update=True)
            if row is None:
                return False
            remaining = [*left, *(row.pending_replies or [])[len(texts) :]]
            row.pending_replies = remaining or None
            row.version += 1
            if not remaining:
                row.retry_at, row.failure_count = None, 0
                row.last_status, row.last_error = "delivered", None
            else:
                row.failure_count += 1
                if row.failure_count > self._backoff.max_retries:
                    row.retry_at, row.last_status = None, "undelivered"
                    row.last_error = f"{len(remaining)} replies undelivered after retries"
                else:
                    row.retry_at = now + self._backoff.after(row.failure_count)
            session.add(row)
        log.info(
            "wakeup.redelivery job=%s sent=%d left=%d", job_id, len(texts) - len(left), len(left)
        )
        return not remaining

    async def _pause_for_budget(
        self, sink: WakeupSink, job: ScheduledJob, outcome: Outcome, now: datetime
    ) -> None:
        paused = await self._jobs.pause_owner(job.owner_user_id, "budget", now)
        log.info("wakeup.budget_paused owner=%s jobs=%s", job.owner_user_id, paused)
        if not paused or not outcome.replies:
            return
        names = ", ".join(f"#{i}" for i in paused)
        target = outcome.replies[0].target
        notice = Reply(BUDGET_PAUSED.format(jobs=names), target, "notice", private=True)
        if not await sink.send(notice):
            log.error("wakeup.budget_notice_undelivered owner=%s", job.owner_user_id)

    async def _run_error(self, run_id: str | None) -> str | None:
        if run_id is None:
            return None
        async with self._store.read() as session:
            run = await session.get(Run, run_id)
        return None if run is None else run.error


async def _send_all(sink: WakeupSink, replies: Sequence[Reply]) -> list[str]:
    """Send in order; the texts that could not be delivered."""
    failed: list[str] = []
    for reply in replies:
        if not await sink.send(reply):
            failed.append(reply.text)
    return failed
