"""Alembic, driven programmatically with our engine's connection."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

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
    cfg = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


MIGRATION_LOCK = 0x5357_4D49_4752_4154  # "SWMIGRAT": one migrating process at a time


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Apply migrations. On PostgreSQL, instances starting together take turns
    (a transaction-scoped advisory lock): the first migrates, the others find
    the schema current."""

    def _run(connection: Connection) -> None:
        command.upgrade(alembic_config(connection), revision)

    async with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK})
        await conn.run_sync(_run)


async def absent_tables(engine: AsyncEngine) -> list[str]:
    """The models' tables that the database lacks (sorted; [] = all there)."""
    from sqlalchemy import inspect
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
