"""Alembic environment.

Programmatic use (`bot.store.migrate`) passes an open connection in
`config.attributes["connection"]`; command-line use builds an async engine from
SWITCHBOARD_DATABASE_URL.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from bot.store import actions, models  # noqa: F401  (both register tables)
from bot.store.migrate import include_object

target_metadata = models.SQLModel.metadata


def _configure_and_run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
        include_object=include_object,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_online_from_url(url: str) -> None:
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.run_sync(_configure_and_run)
    await engine.dispose()


connection = context.config.attributes.get("connection")
if connection is not None:
    _configure_and_run(connection)
elif context.is_offline_mode():
    context.configure(
        url=os.environ.get("SWITCHBOARD_DATABASE_URL", "sqlite:///switchboard.db"),
        target_metadata=target_metadata,
        literal_binds=True,
        include_object=include_object,
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    url = os.environ.get("SWITCHBOARD_DATABASE_URL")
    if not url:
        raise SystemExit("set SWITCHBOARD_DATABASE_URL to run Alembic from the command line")
    asyncio.run(_run_online_from_url(url))
