"""Databases the migrations made once per test process, copied for each test
that starts from a migrated one (the `store` and `make_app` fixtures; tests of
migrating itself take `database`): the SQLite file is copied, and a
PostgreSQL schema's DDL (`pg_dump` of a migrated schema) is replayed in one
round trip. Running every migration costs ~0.15 s of CPU a test on SQLite and
seconds of the server's time on PostgreSQL; the copies, milliseconds and about
half a second."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from bot.store import Store

if TYPE_CHECKING:
    from tests.conftest import Database

PLACEHOLDER = "t_migrated_template"


@dataclass(frozen=True)
class Migrated:
    sqlite: Path
    """A SQLite database at head, in one file."""
    postgres: str | None
    """The DDL (and rows) of a schema at head, `PLACEHOLDER` for its name;
    None without PostgreSQL or pg_dump (the test runs the migrations)."""

    async def into(self, db: Database) -> None:
        """Make `db` (created, still empty) a copy."""
        if db.backend == "sqlite":
            self._copy(Path(db.url.removeprefix("sqlite+aiosqlite:///")))
        elif self.postgres is not None and db.schema:
            engine = create_async_engine(db.url)
            try:
                async with engine.connect() as conn:
                    raw = (await conn.get_raw_connection()).driver_connection
                    await raw.execute(self.postgres.replace(PLACEHOLDER, db.schema))
            finally:
                await engine.dispose()

    def _copy(self, path: Path) -> None:
        if not path.exists():
            shutil.copyfile(self.sqlite, path)
            path.chmod(0o600)


def make(tmp: Path, postgres_url: str | None) -> Migrated:
    return Migrated(_sqlite(tmp), _postgres(postgres_url))


async def _upgraded(url: str, schema: str | None = None) -> None:
    store = Store(url, schema=schema)
    try:
        await store.upgrade()
    finally:
        await store.dispose()


def _sqlite(tmp: Path) -> Path:
    path = tmp / "migrated.db"
    asyncio.run(_upgraded(f"sqlite+aiosqlite:///{path}"))
    assert not Path(f"{path}-wal").exists(), "the template must be whole in one file"
    return path


def _postgres(url: str | None) -> str | None:
    pg_dump = shutil.which("pg_dump")
    if url is None or pg_dump is None:
        return None
    schema = f"{PLACEHOLDER}_{secrets.token_hex(4)}"
    asyncio.run(_schema(url, f'CREATE SCHEMA "{schema}"'))
    try:
        asyncio.run(_upgraded(url, schema))
        libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        dump = subprocess.run(
            [pg_dump, f"--dbname={libpq}", f"--schema={schema}", "--no-owner",
             "--no-privileges", "--inserts"],
            capture_output=True, text=True, check=True, timeout=120,
        ).stdout  # fmt: skip
    finally:
        asyncio.run(_schema(url, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    lines = [
        line
        for line in dump.splitlines()
        if not line.startswith("\\") and line.strip() != f"CREATE SCHEMA {schema};"
    ]  # psql's meta-commands, and the schema: the test's exists
    return "\n".join(lines).replace(schema, PLACEHOLDER)


async def _schema(url: str, statement: str) -> None:
    from sqlalchemy import text

    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()
