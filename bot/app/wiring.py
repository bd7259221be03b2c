"""Wiring of the scheduler, its tools, the admin commands, and the news of
accounts changed elsewhere for the caches (used by `bot.app`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from bot.accounts.audit import Audit
from bot.accounts.budgets import Budgets
from bot.accounts.directory import Directory
from bot.accounts.identity import Identity
from bot.accounts.linking import Linking
from bot.accounts.ops import AdminOps
from bot.accounts.usage import UsageBook
from bot.commands.admin import AdminServices, admin_commands
from bot.commands.registry import CommandSpec
from bot.config import Settings
from bot.conversations import Conversations
from bot.metrics import Metrics
from bot.personas import PersonaBook
from bot.ports import Tool
from bot.scheduling.heartbeat import Heartbeats
from bot.scheduling.jobs import Jobs
from bot.scheduling.scheduler import Scheduler
from bot.scheduling.wakeups import Clock, Wakeups
from bot.store import Store
from bot.store.coordination import ACCOUNT, JOBS, MISSED, Coordination
from bot.store.leases import Leases
from bot.tools.schedule import schedule_tools
from bot.types import utcnow


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
    instance: str = "",
    leases: Leases | None = None,
    metrics: Metrics | None = None,
) -> Extras:
    directory = Directory(store, identity)
    ops = AdminOps(budgets, directory, UsageBook(store), audit)
    jobs = Jobs(store, instance, settings.inbox.lease_seconds)
    config = settings.scheduler
    scheduler = Scheduler(
        config,
        jobs,
        Wakeups(config, store, jobs, directory, conversations, clock, metrics),
        Heartbeats(
            store,
            personas,
            conversations,
            directory,
            timedelta(minutes=config.heartbeat_idle_minutes),
            leases,
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


class Forgetful(Protocol):
    def forget(self, user_id: int | None = None) -> None: ...


def forget_changes_elsewhere(
    store: Store, coordination: Coordination, caches: Sequence[Forgetful]
) -> None:
    """What this process caches of accounts (`caches`) drops what another
    process changed, before this process's next message reads it: on SQLite
    everything, once the writer sees another process's commit
    (`bot.store.outside`); on PostgreSQL the user's entries, when a notice
    says their account changed (`bot.store.coordination.announce_account`)."""

    def everything() -> None:
        for cache in caches:
            cache.forget()

    def heard(kind: str, key: str) -> None:
        if kind == ACCOUNT and key.isdigit():
            for cache in caches:
                cache.forget(int(key))
        elif kind == MISSED:  # listening again: any account may have changed meanwhile
            everything()

    store.outside.watch(everything)
    coordination.subscribe(heard)


def sync_jobs_changed_elsewhere(
    store: Store, coordination: Coordination, scheduler: Scheduler
) -> None:
    """The scheduler syncs as soon as a job may have changed in another
    process (`switchboard jobs resume`, another instance's agent): on SQLite
    when the writer sees another process's commit (at a message's start or
    the recovery sweep's, every few seconds), on PostgreSQL at the job's
    notice (`bot.store.coordination.announce_jobs`), or when notices were
    missed."""

    def heard(kind: str, _key: str) -> None:
        if kind in (JOBS, MISSED):
            scheduler.sync_soon()

    store.outside.watch(scheduler.sync_soon)
    coordination.subscribe(heard)
