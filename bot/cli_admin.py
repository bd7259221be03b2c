"""Operator commands that work without any chat platform:

    switchboard admin audit [--limit N]
    switchboard admin budget show|set|grant|reset USER [TOKENS]
    switchboard admin role USER ROLE
    switchboard admin usage [USER]
    switchboard jobs list [--all]
    switchboard jobs pause|resume|remove ID

USER is `platform:platform_user_id` (e.g. `console:bob`, `telegram:4242`) or
the internal user id. Changes are audited with the actor "cli:<os user>"; the
operator may do what an owner may. A running service picks up job changes
within `[scheduler] sync_seconds`, role changes within 30 s.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from bot.admin_ops import Actor, AdminOps, operator
from bot.audit import Audit
from bot.budget import Budgets
from bot.config import Secrets, Settings
from bot.directory import Directory, Person, UnknownUser
from bot.errors import CommandError
from bot.identity import Identity
from bot.jobs import Action, Jobs
from bot.store import Store
from bot.types import utcnow
from bot.usage import UsageBook

Command = Callable[[argparse.Namespace, Settings, Secrets], Coroutine[Any, Any, int]]


@dataclass(frozen=True, slots=True)
class _Tools:
    ops: AdminOps
    jobs: Jobs
    directory: Directory


@contextlib.asynccontextmanager
async def _opened(settings: Settings) -> AsyncIterator[_Tools]:
    db = settings.database
    store = Store(db.url, busy_timeout_ms=db.busy_timeout_ms, schema=db.schema_name)
    try:
        await store.upgrade()
        identity = Identity(store, settings.admin.owners)
        directory = Directory(store, identity)
        ops = AdminOps(Budgets(store, settings.budgets), directory, UsageBook(store), Audit(store))
        yield _Tools(ops, Jobs(store), directory)
    finally:
        await store.dispose()


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add `admin …` and `jobs …` to the top-level subparsers."""
    admin = sub.add_parser("admin", parents=[common], help="budgets, roles, usage, audit log")
    a_sub = admin.add_subparsers(dest="admin_command", required=True, metavar="ACTION")
    audit = a_sub.add_parser("audit", parents=[common], help="print the audit log")
    audit.add_argument("--limit", type=int, default=50, help="entries (newest first)")
    audit.set_defaults(func=cmd_audit)

    budget = a_sub.add_parser("budget", parents=[common], help="show or change a budget")
    budget.add_argument("action", choices=["show", "set", "grant", "reset"])
    budget.add_argument("user", help="platform:user_id or internal user id")
    budget.add_argument("tokens", nargs="?", help="set: tokens|unlimited|default; grant: tokens")
    budget.set_defaults(func=cmd_budget)

    role = a_sub.add_parser("role", parents=[common], help="set a user's role")
    role.add_argument("user", help="platform:user_id or internal user id")
    role.add_argument("role", choices=["guest", "user", "admin"])
    role.set_defaults(func=cmd_role)

    usage = a_sub.add_parser("usage", parents=[common], help="usage this month")
    usage.add_argument("user", nargs="?", help="one user (default: everyone)")
    usage.set_defaults(func=cmd_usage)

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


async def _person(tools: _Tools, token: str) -> Person:
    try:
        return await tools.directory.lookup(token)
    except UnknownUser as exc:
        raise CommandError(str(exc)) from None


def _actor() -> Actor:
    try:
        return operator(getpass.getuser())
    except (KeyError, OSError):
        return operator()


async def cmd_audit(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    async with _opened(settings) as tools:
        entries = await tools.ops.audit_entries(args.limit)
    for e in reversed(entries):
        details = f" {json.dumps(e.details, sort_keys=True)}" if e.details else ""
        print(
            f"{e.created_at:%Y-%m-%d %H:%M:%S} {e.actor} {e.action} {e.outcome}"
            f" target={e.target or '-'} where={e.where or '-'}{details}"
        )
    if not entries:
        print("The audit log is empty.")
    return 0


async def cmd_budget(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    async with _opened(settings) as tools:
        person = await _person(tools, args.user)
        ops = tools.ops
        if args.action in ("set", "grant") and not args.tokens:
            raise CommandError(f"admin budget {args.action} needs TOKENS")
        if args.action == "show":
            text = await ops.budget_text(person)
        elif args.action == "set":
            text = await ops.set_budget(_actor(), person, args.tokens)
        elif args.action == "grant":
            text = await ops.grant(_actor(), person, args.tokens)
        else:
            text = await ops.reset(_actor(), person)
    print(text)
    return 0


async def cmd_role(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    async with _opened(settings) as tools:
        person = await _person(tools, args.user)
        print(await tools.ops.set_role(_actor(), person, args.role))
    return 0


async def cmd_usage(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    async with _opened(settings) as tools:
        if args.user:
            text = await tools.ops.usage_text(await _person(tools, args.user))
        else:
            text = await tools.ops.report_text()
    print(text)
    return 0


async def cmd_jobs_list(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    async with _opened(settings) as tools:
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
            last += f", {job.failure_count} failures"
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
    action: Action = args.action
    async with _opened(settings) as tools:
        job = await tools.jobs.change(args.job_id, action, utcnow())
        if job is None:
            raise CommandError(f"no open job #{args.job_id} (see: switchboard jobs list)")
        await tools.ops.audit.record(
            actor=_actor().handle,
            action=f"jobs {action}",
            target=f"job #{job.id}",
            where="cli",
            details={"state": job.state},
        )
    active = job.state == "active" and job.next_run_at
    nxt = f", next run {job.next_run_at:%Y-%m-%d %H:%M} UTC" if active else ""
    print(f"Job #{job.id} is {job.state}{nxt}.")
    return 0
