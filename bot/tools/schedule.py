"""The "schedule" tools: the agent schedules its own wakeups.

`schedule_add(prompt, when, timezone?)`, `schedule_list()`,
`schedule_remove(job_id)`. Arguments are validated and every problem is a
`ToolFailed` whose message says what to send instead. Limits per role (number
of open jobs, shortest repeat interval) come from `[scheduler]`; the tools are
offered only to roles allowed at least one job.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from bot.config import SchedulerSettings
from bot.errors import ToolFailed
from bot.ports import Tool, ToolContext
from bot.scheduling.jobs import Jobs
from bot.scheduling.parse import FORMS, ScheduleError, format_duration, parse_when, zone
from bot.scheduling.scheduler import Scheduler
from bot.types import Role

MAX_PROMPT_CHARS = 2000


def lowest_role(settings: SchedulerSettings) -> Role:
    """The lowest role allowed at least one job (the tools' minimum role)."""
    for role in (Role.GUEST, Role.USER, Role.ADMIN):
        limit = settings.max_jobs.for_role(role)
        if limit is None or limit > 0:
            return role
    return Role.OWNER


class ScheduleAdd:
    name = "schedule_add"
    effect = "external"
    trusted_output = True
    description = (
        "Schedule a wakeup: at `when` you are run again in this conversation with `prompt` "
        "as your instruction, and your answer is posted here (answer NO_REPLY then if "
        f"there is nothing worth saying). `when` is {FORMS}. Times without an offset are "
        "in `timezone` (the user's IANA zone if you know it) or the configured default."
    )
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "prompt": {
                "type": "string",
                "description": "What to do at the wakeup, as an instruction to yourself",
            },
            "when": {"type": "string", "description": "When (see the description)"},
            "timezone": {"type": "string", "description": "IANA time zone, e.g. Europe/Paris"},
        },
        "required": ["prompt", "when"],
    }
    module = "schedule"

    def __init__(self, scheduler: Scheduler, settings: SchedulerSettings) -> None:
        self._scheduler = scheduler
        self._settings = settings
        self.min_role = lowest_role(settings)

    def describe(self, args: Mapping[str, Any]) -> str:
        prompt = " ".join(str(args.get("prompt") or "").split())
        shown = prompt if len(prompt) <= 120 else prompt[:119] + "…"
        return f"Schedule a wakeup ({str(args.get('when') or '').strip()}): “{shown}”"

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        prompt = str(args.get("prompt") or "").strip()
        if not prompt:
            raise ToolFailed("`prompt` is empty: say what you should do at the wakeup")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise ToolFailed(f"`prompt` is too long ({len(prompt)} chars, at most 2000)")
        timezone = str(args.get("timezone") or self._settings.timezone).strip()
        now = self._scheduler.clock()
        try:
            spec = parse_when(str(args.get("when") or ""), timezone=timezone, now=now)
        except ScheduleError as exc:
            raise ToolFailed(str(exc)) from None
        minimum = timedelta(minutes=self._settings.min_interval_minutes.for_role(ctx.role))
        gap = spec.min_gap(now)
        if gap is not None and gap < minimum:
            raise ToolFailed(
                f"too frequent: repeats every {format_duration(int(gap.total_seconds()))}, "
                f"the minimum for role {ctx.role.value} is "
                f"{format_duration(int(minimum.total_seconds()))}"
            )
        limit = self._settings.max_jobs.for_role(ctx.role)
        if limit is not None:
            count = await self._scheduler.jobs.count_open(ctx.user_id)
            if count >= limit:
                raise ToolFailed(
                    f"limit reached: {count} of {limit} wakeups for role {ctx.role.value}; "
                    "remove one with schedule_remove first"
                )
        job = await self._scheduler.create(ctx, prompt, spec)
        assert job.next_run_at is not None
        local = job.next_run_at.astimezone(zone(spec.timezone))
        return (
            f"Scheduled wakeup #{job.id}: {job.description}; next run "
            f"{local:%Y-%m-%d %H:%M %Z} ({spec.timezone}). It will post in this conversation."
        )


class ScheduleList:
    name = "schedule_list"
    effect = "read"
    trusted_output = True  # the requester's own jobs, each created or confirmed by them
    description = "List this user's scheduled wakeups (id, when, next run, state, prompt)."
    input_schema: Mapping[str, Any] = {"type": "object", "properties": {}}
    module = "schedule"

    def __init__(self, jobs: Jobs, settings: SchedulerSettings) -> None:
        self._jobs = jobs
        self.min_role = lowest_role(settings)

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        lines = []
        for info in await self._jobs.listing(owner_user_id=ctx.user_id):
            job = info.job
            if job.state not in ("active", "paused"):
                continue
            where = "here" if info.job.conversation_id == ctx.conversation_id else info.platform
            when = (
                f"next {job.next_run_at:%Y-%m-%d %H:%M} UTC"
                if job.next_run_at and job.state == "active"
                else f"paused ({job.pause_reason})"
                if job.state == "paused"
                else job.state
            )
            last = f", last: {job.last_status}" if job.last_status else ""
            lines.append(
                f"#{job.id} {job.description}, {when}{last}, in {where}: {job.prompt[:200]}"
            )
        return "\n".join(lines) if lines else "No scheduled wakeups."


class ScheduleRemove:
    name = "schedule_remove"
    effect = "external"
    trusted_output = True
    description = "Remove one of this user's scheduled wakeups by its id (from schedule_list)."
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {"job_id": {"type": "integer", "description": "e.g. 12"}},
        "required": ["job_id"],
    }
    module = "schedule"

    def __init__(self, scheduler: Scheduler, settings: SchedulerSettings) -> None:
        self._scheduler = scheduler
        self.min_role = lowest_role(settings)

    def describe(self, args: Mapping[str, Any]) -> str:
        return f"Remove scheduled wakeup #{str(args.get('job_id', '')).strip().lstrip('#')}"

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        raw = str(args.get("job_id", "")).strip().lstrip("#")
        if not raw.isdigit():
            raise ToolFailed(f"job_id must be a number like 12 (got {raw!r})")
        job = await self._scheduler.jobs.change(
            int(raw), "remove", self._scheduler.clock(), owner_user_id=ctx.user_id
        )
        if job is None:
            raise ToolFailed(f"no wakeup #{raw} of this user; call schedule_list for the ids")
        self._scheduler.register(job)
        return f"Removed scheduled wakeup #{raw} ({job.description})."


def schedule_tools(scheduler: Scheduler, settings: SchedulerSettings) -> list[Tool]:
    return [
        ScheduleAdd(scheduler, settings),
        ScheduleList(scheduler.jobs, settings),
        ScheduleRemove(scheduler, settings),
    ]
