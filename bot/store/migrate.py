"""Alembic, driven programmatically with our engine's connection.

Every start asks for an upgrade. A database already at the newest revision
(`at_head`: its `alembic_version` names the head of migrations/versions, read
from the files' text) is left as it is without Alembic: importing and running
it to find nothing to do was a second of `switchboard chat`'s start on this
project's loaded 2-core machine. Anything else (a new database, one behind,
one ahead, branches) goes to Alembic, which migrates or says what is wrong.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"

UNMODELED_TABLE_PREFIXES = ("memories_fts",)
"""SQLite FTS5 tables (and their shadow tables) behind memory search."""
UNMODELED_INDEXES = frozenset({"ix_memories_text_search"})
"""The PostgreSQL GIN expression index behind memory search."""


def include_object(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    """Autogenerate filter: leave out the full-text objects migrations create by
    hand (models cannot describe them), so drift checks stay meaningful."""
    if type_ == "table" and name and name.startswith(UNMODELED_TABLE_PREFIXES):
        return False
    return not (type_ == "index" and name in UNMODELED_INDEXES)


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


MIGRATION_LOCK = 0x5357_4D49_4752_4154  # "SWMIGRAT": one migrating process at a time


_REVISION = re.compile(r"""^revision\b[^=\n]*=\s*["']([^"']+)["']""", re.MULTILINE)
_DOWN_REVISION = re.compile(r"^down_revision\b[^=\n]*=(.*)$", re.MULTILINE)
_QUOTED = re.compile(r"""["']([^"']+)["']""")


@functools.cache
def head(versions: Path = MIGRATIONS_DIR / "versions") -> str | None:
    """The newest revision in `versions`, read from the files' text: the one
    that no other names as its down_revision. None when that is not exactly
    one (branches) or a file does not read as a migration: Alembic decides."""
    revisions: set[str] = set()
    earlier: set[str] = set()
    for path in versions.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        revision, down = _REVISION.search(source), _DOWN_REVISION.search(source)
        if revision is None and down is None:
            continue  # not a migration (__init__.py)
        if revision is None or down is None:
            return None
        revisions.add(revision.group(1))
        earlier.update(_QUOTED.findall(down.group(1)))
    heads = revisions - earlier
    return heads.pop() if len(heads) == 1 else None


async def at_head(engine: AsyncEngine) -> bool:
    """Whether the database is migrated to the newest revision (`head`). A
    database that cannot be reached raises, as Alembic would."""
    newest = head()
    if newest is None:
        return False

    def _run(connection: Connection) -> list[str]:
        if not inspect(connection).has_table("alembic_version"):
            return []
        return list(connection.execute(text("SELECT version_num FROM alembic_version")).scalars())

    async with engine.connect() as conn:
        return await conn.run_sync(_run) == [newest]


class MigrationError(Exception):
    """Alembic could not migrate (its `CommandError`: a revision it does not
    know, ...); the message is Alembic's."""


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Apply migrations. On PostgreSQL, instances starting together take turns
    (a transaction-scoped advisory lock): the first migrates, the others find
    the schema current."""
    from alembic import command
    from alembic.util.exc import CommandError

    def _run(connection: Connection) -> None:
        try:
            command.upgrade(alembic_config(connection), revision)
        except CommandError as exc:
            raise MigrationError(str(exc)) from exc

    async with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK})
        await conn.run_sync(_run)


async def absent_tables(engine: AsyncEngine) -> list[str]:
    """The models' tables that the database lacks (sorted; [] = all there)."""
    from sqlmodel import SQLModel

    import bot.store.models  # noqa: F401  (registers the tables)

    def _run(connection: Connection) -> list[str]:
        present = set(inspect(connection).get_table_names())
        return sorted(set(SQLModel.metadata.tables) - present)

    async with engine.connect() as conn:
        return await conn.run_sync(_run)


async def current(engine: AsyncEngine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    def _run(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    async with engine.connect() as conn:
        return await conn.run_sync(_run)


async def drift(engine: AsyncEngine) -> list[object]:
    """Differences between the models and the migrated schema ([] = no drift)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from sqlmodel import SQLModel

    import bot.store.actions
    import bot.store.models  # noqa: F401

    def _run(connection: Connection) -> list[object]:
        context = MigrationContext.configure(
            connection,
            opts={
                "compare_type": True,
                "render_as_batch": True,
                "include_object": include_object,
            },
        )
        return list(compare_metadata(context, SQLModel.metadata))

    async with engine.connect() as conn:
        return await conn.run_sync(_run)
