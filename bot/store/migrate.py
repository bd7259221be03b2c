"""Alembic, driven programmatically with our engine's connection."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    cfg = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    def _run(connection: Connection) -> None:
        command.upgrade(alembic_config(connection), revision)

    async with engine.begin() as conn:
        await conn.run_sync(_run)


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

    import bot.store.models  # noqa: F401  (registers the tables)

    def _run(connection: Connection) -> list[object]:
        context = MigrationContext.configure(
            connection, opts={"compare_type": True, "render_as_batch": True}
        )
        return list(compare_metadata(context, SQLModel.metadata))

    async with engine.connect() as conn:
        return await conn.run_sync(_run)
