"""A database already at the newest revision starts without Alembic
(`bot.store.migrate.at_head`); any other is migrated by Alembic as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import text

from bot.store.migrate import at_head, current, head, upgrade
from tests.conftest import Database
from tests.paths import REPO_ROOT
from tests.store.test_store import head_revision


def test_the_head_read_from_the_files_is_alembics():
    assert head() is not None
    assert head() == head_revision()


def migration(directory: Path, name: str, revision: str, down: str) -> None:
    (directory / f"{name}.py").write_text(
        f'"""{name}"""\n\nrevision: str = "{revision}"\ndown_revision: str | None = {down}\n'
    )


def test_no_head_is_read_where_alembic_must_decide(tmp_path: Path):
    def read() -> str | None:
        head.cache_clear()  # read once per process; here the files change
        return head(tmp_path)

    (tmp_path / "__init__.py").write_text("")
    migration(tmp_path, "a", "0001", "None")
    migration(tmp_path, "b", "0002", '"0001"')
    assert read() == "0002"
    migration(tmp_path, "c", "0003", '"0001"')  # two branches
    assert read() is None
    migration(tmp_path, "d", "0004", '("0002", "0003")')  # merged again
    assert read() == "0004"
    (tmp_path / "e.py").write_text('revision = "0005"\n')  # no down_revision: unreadable
    assert read() is None
    head.cache_clear()


async def test_a_database_behind_is_migrated_and_one_at_head_is_left_as_it_is(
    database: Database,
):
    from alembic.script import ScriptDirectory

    from bot.store.migrate import alembic_config

    newest = head()
    behind = ScriptDirectory.from_config(alembic_config()).get_revision(newest).down_revision
    assert isinstance(behind, str)
    store = database.store()
    try:
        assert not await at_head(store.engine)  # empty: no alembic_version yet
        await upgrade(store.engine, behind)
        assert not await at_head(store.engine)
        await store.upgrade()
        assert await current(store.engine) == newest
        assert await at_head(store.engine)
        async with store.engine.begin() as conn:  # marked ahead: Alembic must say so
            await conn.execute(text("UPDATE alembic_version SET version_num = 'from_the_future'"))
        assert not await at_head(store.engine)
    finally:
        await store.dispose()


@pytest.mark.slow  # a Python process importing the service
def test_a_start_on_a_database_at_head_imports_no_alembic(tmp_path: Path):
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"
    code = textwrap.dedent(
        f"""
        import asyncio, json, sys
        from bot.store import Store

        async def main():
            store = Store({url!r})
            await store.upgrade()
            await store.dispose()

        asyncio.run(main())
        print(json.dumps("alembic" in sys.modules))
        """
    )

    def start() -> bool:
        result = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")},
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        loaded: bool = json.loads(result.stdout.splitlines()[-1])
        return loaded

    assert start() is True  # a new database: Alembic creates the schema
    assert start() is False  # at head: nothing to do, Alembic not even imported


@pytest.fixture
def no_head(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bot.store.migrate.head", lambda: None)


async def test_without_a_head_read_alembic_decides(database: Database, no_head: None):
    store = database.store()
    try:
        await store.upgrade()
        assert not await at_head(store.engine)
        await store.upgrade()  # Alembic: nothing to do
        assert await current(store.engine) == head_revision()
    finally:
        await store.dispose()
