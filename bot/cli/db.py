"""`switchboard db upgrade | check`: the database schema (Alembic)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the commands use is imported when one runs (`bot.cli`)
    from bot.config import Secrets, Settings


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    db = sub.add_parser("db", parents=[common], help="database schema")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    db_sub.add_parser("upgrade", parents=[common], help="apply migrations").set_defaults(
        func=cmd_db_upgrade
    )
    db_sub.add_parser(
        "check", parents=[common], help="fail if the models and migrations differ"
    ).set_defaults(func=cmd_db_check)


async def cmd_db_upgrade(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.cli.common import open_store
    from bot.store.migrate import current

    store = open_store(settings)
    try:
        await store.upgrade()
        print(f"database at revision {await current(store.engine)}")
    finally:
        await store.dispose()
    return 0


async def cmd_db_check(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.cli.common import open_store
    from bot.store.migrate import drift

    store = open_store(settings)
    try:
        await store.upgrade()
        diff = await drift(store.engine)
    finally:
        await store.dispose()
    if diff:
        print("models and migrations differ:", file=sys.stderr)
        for item in diff:
            print(f"  {item}", file=sys.stderr)
        return 1
    print("models and migrations match")
    return 0
