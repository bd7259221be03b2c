"""Helpers for scheduler tests: a controllable clock, and jobs created the way
the schedule_add tool creates them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.app import App
from bot.ports import ToolContext
from bot.scheduling.parse import parse_when
from bot.store.models import ScheduledJob
from bot.types import Role
from tests.harness import RecordingAdapter, message

T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
"""A Friday, 10:00 UTC (11:00 in Paris)."""


@dataclass
class FakeClock:
    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


async def started(
    make_app: Any, clock: FakeClock, platform: str = "console", **sections: Any
) -> tuple[App, RecordingAdapter]:
    """An app on the controllable clock with a recording adapter, its scheduler
    started with APScheduler paused (`run_due` drives firing)."""
    app: App = await make_app(clock=clock, **sections)
    adapter = RecordingAdapter(platform=platform)
    app.attach(adapter)
    await app.scheduler.start(app.pipeline, [platform], timer=False)
    return app, adapter


async def add_job(
    app: App,
    when: str,
    *,
    prompt: str = "check the build",
    timezone: str = "UTC",
    role: Role | None = None,
    chat_type: str = "direct",
    **fields: Any,
) -> ScheduledJob:
    """Create a job as `schedule_add` would, for the sender of `message(**fields)`."""
    msg = message("-", **fields)
    services = app.pipeline.s
    user = await services.identity.resolve(msg)
    conversation = await services.conversations.resolve(msg)
    ctx = ToolContext(
        user_id=user.id,
        role=role or user.role,
        conversation_id=conversation.id,
        conversation_key=conversation.key,
        platform=msg.platform,
        run_id="test",
        chat_type="group" if chat_type == "group" else "direct",
    )
    spec = parse_when(when, timezone=timezone, now=app.scheduler.clock())
    return await app.scheduler.create(ctx, prompt, spec)


async def job(app: App, job_id: int | None) -> ScheduledJob:
    assert job_id is not None
    row = await app.scheduler.jobs.get(job_id)
    assert row is not None
    return row
