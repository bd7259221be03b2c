"""What the command groups share: the command signature, opening the store
and the admin services without any chat platform, and the CLI's actor."""

from __future__ import annotations

import argparse
import contextlib
import getpass
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from bot.accounts.audit import Audit
from bot.accounts.budgets import Budgets
from bot.accounts.directory import Directory, Person, UnknownUser
from bot.accounts.identity import Identity
from bot.accounts.ops import Actor, AdminOps, operator
from bot.accounts.usage import UsageBook
from bot.config import Secrets, Settings
from bot.errors import CommandError
from bot.scheduling.jobs import Jobs
from bot.store import Store

Command = Callable[[argparse.Namespace, Settings, Secrets], Coroutine[Any, Any, int]]


def open_store(settings: Settings) -> Store:
    db = settings.database
    return Store(
        db.url,
        echo=db.echo,
        busy_timeout_ms=db.busy_timeout_ms,
        schema=db.schema_name,
        fast_path=db.fast_path,
    )


@dataclass(frozen=True, slots=True)
class AdminTools:
    ops: AdminOps
    jobs: Jobs
    directory: Directory


@contextlib.asynccontextmanager
async def opened(settings: Settings) -> AsyncIterator[AdminTools]:
    store = open_store(settings)
    try:
        await store.upgrade()
        identity = Identity(store, settings.admin.owners)
        directory = Directory(store, identity)
        ops = AdminOps(
            Budgets(store, settings.budgets),
            directory,
            UsageBook(store),
            Audit(store),
            plain=True,  # a terminal: aligned text, no Markdown
        )
        yield AdminTools(ops, Jobs(store), directory)
    finally:
        await store.dispose()


async def find_person(tools: AdminTools, token: str) -> Person:
    try:
        return await tools.directory.lookup(token)
    except UnknownUser as exc:
        raise CommandError(str(exc)) from None


def actor() -> Actor:
    try:
        return operator(getpass.getuser())
    except (KeyError, OSError):
        return operator()
