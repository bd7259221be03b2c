"""Wiring of the scheduler, its tools, and the admin commands (used by `bot.app`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from bot.admin import AdminServices, admin_commands
from bot.admin_ops import AdminOps
from bot.audit import Audit
from bot.budget import Budgets
from bot.commands import CommandSpec
from bot.config import Settings
from bot.conversations import Conversations
from bot.directory import Directory
from bot.heartbeat import Heartbeats
from bot.identity import Identity
from bot.jobs import Jobs
from bot.linking import Linking
from bot.personas import PersonaBook
from bot.ports import Tool
from bot.scheduler import Scheduler
from bot.store import Store
from bot.tools.schedule import schedule_tools
from bot.types import utcnow
from bot.usage import UsageBook
from bot.wakeups import Clock, Wakeups


@dataclass(frozen=True, slots=True)
class Extras:
    scheduler: Scheduler
    tools: list[Tool]
    commands: list[CommandSpec]
    ops: AdminOps


def build_extras(
    settings: Settings,
    store: Store,
    identity: Identity,
    budgets: Budgets,
    conversations: Conversations,
    personas: PersonaBook,
    audit: Audit,
    clock: Clock = utcnow,
) -> Extras:
    directory = Directory(store, identity)
    ops = AdminOps(budgets, directory, UsageBook(store), audit)
    jobs = Jobs(store)
    config = settings.scheduler
    scheduler = Scheduler(
        config,
        jobs,
        Wakeups(config, store, jobs, directory, conversations, clock),
        Heartbeats(
            store,
            personas,
            conversations,
            directory,
            timedelta(minutes=config.heartbeat_idle_minutes),
        ),
        directory,
        budgets,
        clock,
    )
    services = AdminServices(
        store, ops, conversations, personas, Linking(store, identity, budgets, audit, clock)
    )
    tools = schedule_tools(scheduler, config) if config.enabled else []
    return Extras(scheduler, tools, admin_commands(services), ops)
