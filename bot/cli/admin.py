"""Operator commands that work without any chat platform:

    switchboard admin audit [--limit N]
    switchboard admin budget show|set|grant|reset USER [TOKENS]
    switchboard admin role USER ROLE
    switchboard admin usage [USER]
    switchboard admin inbox [--all] [--limit N]
    switchboard admin instances

USER is `platform:platform_user_id` (e.g. `console:bob`, `telegram:4242`) or
the internal user id. Changes are audited with the actor "cli:<os user>"; the
operator may do what an owner may. A running service picks up role changes
within 30 s.
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from bot.errors import CommandError

if TYPE_CHECKING:  # what the commands use is imported when one runs (`bot.cli`)
    from bot.config import Secrets, Settings


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add `admin …` to the top-level subparsers."""
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

    inbox = a_sub.add_parser(
        "inbox", parents=[common], help="messages not answered: waiting, running or failed"
    )
    inbox.add_argument("--all", action="store_true", help="also the answered ones")
    inbox.add_argument("--limit", type=int, default=50, help="entries (newest first)")
    inbox.set_defaults(func=cmd_inbox)

    a_sub.add_parser(
        "instances", parents=[common], help="running instances, their leases, the inbox"
    ).set_defaults(func=cmd_instances)


async def cmd_audit(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.cli.common import opened
    from bot.formatting.text import columns

    async with opened(settings) as tools:
        entries = await tools.ops.audit_entries(args.limit)
    rows = [
        [
            f"{e.created_at:%Y-%m-%d %H:%M:%S}",
            e.actor,
            e.action,
            e.outcome,
            f"target={e.target or '-'}",
            f"where={e.where or '-'}",
            json.dumps(e.details, sort_keys=True) if e.details else "",
        ]
        for e in reversed(entries)
    ]
    for line in columns(rows):
        print(line)
    if not entries:
        print("The audit log is empty.")
    return 0


async def cmd_budget(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.cli.common import actor, find_person, opened

    async with opened(settings) as tools:
        person = await find_person(tools, args.user)
        ops = tools.ops
        if args.action in ("set", "grant") and not args.tokens:
            raise CommandError(f"admin budget {args.action} needs TOKENS")
        if args.action == "show":
            text = await ops.budget_text(person)
        elif args.action == "set":
            text = await ops.set_budget(actor(), person, args.tokens)
        elif args.action == "grant":
            text = await ops.grant(actor(), person, args.tokens)
        else:
            text = await ops.reset(actor(), person)
    print(text)
    return 0


async def cmd_role(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.cli.common import actor, find_person, opened

    async with opened(settings) as tools:
        person = await find_person(tools, args.user)
        print(await tools.ops.set_role(actor(), person, args.role))
    return 0


async def cmd_usage(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.cli.common import find_person, opened

    async with opened(settings) as tools:
        if args.user:
            text = await tools.ops.usage_text(await find_person(tools, args.user))
        else:
            text = await tools.ops.report_text()
    print(text)
    return 0


async def cmd_inbox(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    """The durable inbox as an operator sees it: what is waiting or being worked
    on (and for how long), and what failed (and why)."""
    from bot.cli.common import open_store
    from bot.pipeline.intake import Inbox
    from bot.types import utcnow

    store = open_store(settings)
    try:
        await store.upgrade()
        inbox = Inbox(store, owner="cli", lease_seconds=settings.inbox.lease_seconds)
        stats = await inbox.stats()
        states = ALL_STATES if args.all else ("pending", "running", "failed")
        items = await inbox.listing(states, args.limit)
    finally:
        await store.dispose()
    now = utcnow()
    oldest = f", oldest {_age(now - stats.oldest)} old" if stats.oldest else ""
    print(f"{stats.pending} waiting or running{oldest}; {stats.failed} failed")
    if not items:
        return 0
    print(f"{'ID':>6}  {'STATE':<9} {'ATTEMPTS':>8}  {'RECEIVED (UTC)':<19}  CONVERSATION / ERROR")
    for item in items:
        print(
            f"{item.id:>6}  {item.state:<9} {item.attempts:>8}  "
            f"{item.created_at:%Y-%m-%d %H:%M:%S}  {item.conversation_key or '-'}"
        )
        if item.error:
            print(f"{'':>8}error: {item.error[:200]}")
    return 0


ALL_STATES = (
    "pending",
    "running",
    "failed",
    "answered",
    "silent",
    "command",
    "refused",
    "blocked",
    "cancelled",
    "timeout",
)


def _age(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


async def cmd_instances(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    """Live instances (seen within a minute), what each holds, and the inbox."""
    from bot.cli.common import open_store
    from bot.pipeline.intake import Inbox
    from bot.store.instances import Instances
    from bot.store.leases import Leases
    from bot.types import utcnow

    store = open_store(settings)
    try:
        await store.upgrade()
        instances = await Instances(store, "cli").listing()
        leases = await Leases(store, "cli", 0).listing()
        stats = await Inbox(store, "cli", 0).stats()
    finally:
        await store.dispose()
    now = utcnow()
    held: dict[str, list[str]] = {}
    for lease in leases:
        held.setdefault(lease.owner, []).append(lease.name)
    print(f"{'INSTANCE':<44} {'STATE':<6} {'SEEN':>6} {'UP':>6}  PLATFORMS / HOLDS")
    for item in instances:
        age = now - item.seen_at
        state = "live" if age < LIVE_WITHIN else "gone"
        holds = held.get(item.id, [])
        conversations = sum(1 for n in holds if n.startswith("conversation:"))
        others = [n for n in holds if not n.startswith("conversation:")]
        detail = ", ".join(item.platforms or []) or "-"
        detail += f"; running {conversations} conversation{'s' if conversations != 1 else ''}"
        if others:
            detail += "; " + ", ".join(others)
        up = _age(now - item.started_at)
        print(f"{item.id[:44]:<44} {state:<6} {_age(age):>6} {up:>6}  {detail}")
    if not instances:
        print("No instance has run in the last day.")
    oldest = f", oldest {_age(now - stats.oldest)} old" if stats.oldest else ""
    print(f"inbox: {stats.pending} waiting or running{oldest}; {stats.failed} failed")
    return 0


LIVE_WITHIN = timedelta(minutes=1)
