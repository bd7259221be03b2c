"""Scheduled wakeups from the command line:

    switchboard jobs list [--all]
    switchboard jobs pause|resume|remove ID

Changes are audited as "cli:<os user>"; a running service picks them up at
once on PostgreSQL (their notice), within a few seconds on SQLite (when its
writer next looks for other processes' writes), at worst within
`[scheduler] sync_seconds`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from bot.errors import CommandError

if TYPE_CHECKING:  # what the commands use is imported when one runs (`bot.cli`)
    from bot.config import Secrets, Settings
    from bot.scheduling.jobs import Action


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add `jobs …` to the top-level subparsers."""
    jobs = sub.add_parser("jobs", parents=[common], help="scheduled wakeups")
    j_sub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    listing = j_sub.add_parser("list", parents=[common], help="list scheduled wakeups")
    listing.add_argument("--all", action="store_true", help="include removed ones")
    listing.set_defaults(func=cmd_jobs_list)
    for action, text in (
        ("pause", "pause a job"),
        ("resume", "resume a paused job"),
        ("remove", "remove a job"),
    ):
        parser = j_sub.add_parser(action, parents=[common], help=text)
        parser.add_argument("job_id", type=int)
        parser.set_defaults(func=cmd_jobs_change, action=action)


async def cmd_jobs_list(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.cli.common import opened
    from bot.formatting.text import plural

    async with opened(settings) as tools:
        infos = await tools.jobs.listing(include_closed=args.all)
        owners = {i.job.owner_user_id for i in infos}
        handles = {}
        for owner_id in owners:
            person = await tools.directory.get(owner_id)
            handles[owner_id] = person.handle if person else f"#{owner_id}"
    if not infos:
        print("No scheduled jobs.")
        return 0
    print(f"{'ID':>4}  {'STATE':<16} {'NEXT RUN (UTC)':<16}  {'OWNER':<20} SCHEDULE / WHERE / LAST")
    for info in infos:
        job = info.job
        state = job.state + (f"({job.pause_reason})" if job.pause_reason else "")
        nxt = f"{job.next_run_at:%Y-%m-%d %H:%M}" if job.next_run_at else "-"
        last = job.last_status or "never run"
        if job.failure_count:
            last += f", {plural(job.failure_count, 'failure')}"
        if job.missed_count:
            last += f", {job.missed_count} missed"
        if job.pending_replies:
            last += f", {len(job.pending_replies)} undelivered"
        print(
            f"{job.id:>4}  {state:<16} {nxt:<16}  {handles[job.owner_user_id]:<20} "
            f"{job.description} / {info.conversation_key} / {last}"
        )
        print(f"{'':>6}prompt: {job.prompt[:100]}")
        if job.last_error:
            print(f"{'':>6}error: {job.last_error[:200]}")
    return 0


async def cmd_jobs_change(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.cli.common import actor, opened
    from bot.types import utcnow

    action: Action = args.action
    async with opened(settings) as tools:
        job = await tools.jobs.change(args.job_id, action, utcnow())
        if job is None:
            raise CommandError(f"no open job #{args.job_id} (see: switchboard jobs list)")
        await tools.ops.audit.record(
            actor=actor().handle,
            action=f"jobs {action}",
            target=f"job #{job.id}",
            where="cli",
            details={"state": job.state},
        )
    active = job.state == "active" and job.next_run_at
    nxt = f", next run {job.next_run_at:%Y-%m-%d %H:%M} UTC" if active else ""
    print(f"Job #{job.id} is {job.state}{nxt}.")
    return 0
