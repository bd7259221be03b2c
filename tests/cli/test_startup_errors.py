"""`switchboard run` that cannot start: exit status 2 and one line on stderr saying
what is wrong and what to do; no traceback, no INFO lines before it, no secret.

Each test runs the real service as a subprocess (`python -m bot run`) against a
database it cannot use, or a fake platform that rejects the bot token.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.conftest import POSTGRES_URL, TEST_API_KEY
from tests.fakes import discord_payloads
from tests.fakes.discord import FakeDiscord
from tests.fakes.slack import BOT_TOKEN as SLACK_TOKEN
from tests.fakes.slack import SIGNING_SECRET, FakeSlack
from tests.fakes.telegram import TOKEN as TELEGRAM_TOKEN
from tests.fakes.telegram import FakeTelegram
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.e2e

PG_PASSWORD = "pg-secret-never-shown"


async def run(tmp_path: Path, db_url: str | None = None, **extra: str) -> tuple[int, str]:
    """`switchboard run` with `extra` as environment; its exit status and stderr."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": str(REPO_ROOT),
        "ANTHROPIC_API_KEY": TEST_API_KEY,
        "SWITCHBOARD__DATABASE__URL": db_url or f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}",
        "SWITCHBOARD__SERVER__PORT": "0",
        "SWITCHBOARD__LOGGING__LEVEL": "INFO",
        **extra,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "run",
        env=env,
        cwd=tmp_path,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode is not None
    return process.returncode, stderr.decode()


def the_line(status: int, stderr: str, *secrets: str) -> str:
    """The one line a failed start prints (asserting it is alone and clean)."""
    assert status == 2, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    (line,) = lines
    assert line.startswith("switchboard: ")
    for secret in secrets:
        assert secret not in stderr
    return line


# -- the database ---------------------------------------------------------------------------


async def test_postgresql_refusing_connections(tmp_path: Path):
    url = f"postgresql+asyncpg://switchboard:{PG_PASSWORD}@127.0.0.1:1/switchboard"
    line = the_line(*await run(tmp_path, url), PG_PASSWORD)
    assert line == (
        "switchboard: cannot reach the PostgreSQL database switchboard at 127.0.0.1:1 "
        "(connection refused). Check [database] url (SWITCHBOARD__DATABASE__URL) and that "
        "the server is running and accepts connections there."
    )


async def test_a_sqlite_directory_that_cannot_be_created(tmp_path: Path):
    blocker = tmp_path / "data"
    blocker.write_text("a file where the directory should be")
    url = f"sqlite+aiosqlite:///{blocker / 'switchboard.db'}"
    line = the_line(*await run(tmp_path, url))
    assert line == (
        f"switchboard: cannot create the database directory {blocker} (a file is in the way). "
        "Create it, writable by this user, or set [database] url (SWITCHBOARD__DATABASE__URL) "
        "to a path that can be."
    )


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
async def test_an_unwritable_sqlite_path(tmp_path: Path):
    # /proc exists, and nobody (not even root) may create a file in it.
    line = the_line(*await run(tmp_path, "sqlite+aiosqlite:////proc/switchboard.db"))
    assert line == (
        "switchboard: cannot open the SQLite database /proc/switchboard.db (unable to open "
        "database file). Check that /proc exists and this user may write to it, or set "
        "[database] url (SWITCHBOARD__DATABASE__URL) to a writable path."
    )


async def test_a_sqlite_url_naming_a_directory_or_another_kind_of_file(tmp_path: Path):
    folder = tmp_path / "folder.db"
    folder.mkdir()
    line = the_line(*await run(tmp_path, f"sqlite+aiosqlite:///{folder}"))
    assert line == (
        f"switchboard: cannot open the SQLite database {folder}: it is a directory. Check "
        f"[database] url (SWITCHBOARD__DATABASE__URL): it must name a file (e.g. "
        f"{folder / 'switchboard.db'})."
    )
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list\n" * 100)
    notes.chmod(0o600)  # the one line is about what it is, not about its mode
    line = the_line(*await run(tmp_path, f"sqlite+aiosqlite:///{notes}"))
    assert line == (
        f"switchboard: {notes} is not a SQLite database. Check [database] url "
        "(SWITCHBOARD__DATABASE__URL): it must name a SQLite file (or a new one)."
    )


async def test_a_database_without_its_tables(tmp_path: Path):
    db = tmp_path / "db.sqlite"
    status, stderr = await run(tmp_path)
    assert status == 1, stderr  # no platform enabled: the schema was created, then it stopped
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        for table in ("delivery_failures", "audit_log"):
            conn.execute(f"DROP TABLE {table}")
        (revision,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    line = the_line(*await run(tmp_path))
    assert line == (
        f"switchboard: the schema of the SQLite database {db} is incomplete: 2 tables are "
        f"missing (audit_log, delivery_failures) though it is marked as migrated to "
        f"'{revision}'. Restore it from a backup, or move it aside and run "
        "`switchboard db upgrade` to create a new one."
    )


async def test_a_database_migrated_by_a_newer_version(tmp_path: Path):
    with sqlite3.connect(tmp_path / "db.sqlite") as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        conn.execute("INSERT INTO alembic_version VALUES ('from_the_future')")
    (tmp_path / "db.sqlite").chmod(0o600)  # as switchboard creates it (no mode warning)
    line = the_line(*await run(tmp_path))
    assert line.endswith(
        "is at schema revision 'from_the_future', which this version of switchboard does not "
        "know (a newer version migrated it?). Run the switchboard version that migrated it, "
        "or restore a backup from before."
    )


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES_URL, reason="SWITCHBOARD_TEST_POSTGRES_URL not set")
async def test_a_missing_postgresql_schema(tmp_path: Path):
    assert POSTGRES_URL
    engine = create_async_engine(POSTGRES_URL)
    async with engine.connect() as conn:
        await conn.execute(text("DROP SCHEMA IF EXISTS sb_never_created CASCADE"))
        await conn.commit()
    await engine.dispose()
    line = the_line(
        *await run(tmp_path, POSTGRES_URL, SWITCHBOARD__DATABASE__SCHEMA_NAME="sb_never_created")
    )
    assert line.startswith("switchboard: the schema 'sb_never_created' does not exist in ")
    assert line.endswith(
        "Create it (CREATE SCHEMA sb_never_created) or fix [database] schema_name, "
        "then run `switchboard db upgrade`."
    )


# -- the platforms ----------------------------------------------------------------------------


@pytest.mark.parametrize("library", ["aiogram", "python-telegram-bot"])
async def test_telegram_rejecting_the_bot_token(tmp_path: Path, library: str):
    async with FakeTelegram(token="987654321:AAAAotherOTHERotherOTHERother_other1") as telegram:
        status, stderr = await run(
            tmp_path,
            TELEGRAM_BOT_TOKEN=TELEGRAM_TOKEN,
            SWITCHBOARD__TELEGRAM__ENABLED="true",
            SWITCHBOARD__TELEGRAM__LIBRARY=library,
            SWITCHBOARD__TELEGRAM__API_BASE_URL=telegram.base_url,
        )
    line = the_line(status, stderr, TELEGRAM_TOKEN.split(":")[1])
    assert line == (
        "switchboard: Telegram rejected the bot token (getMe: 401 Unauthorized). "
        "Check TELEGRAM_BOT_TOKEN: it must be the current token from @BotFather."
    )


async def test_slack_rejecting_the_bot_token(tmp_path: Path):
    async with FakeSlack(bot_token="xoxb-9999-8888-someoneelse") as slack:
        status, stderr = await run(
            tmp_path,
            SLACK_BOT_TOKEN=SLACK_TOKEN,
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SWITCHBOARD__SLACK__ENABLED="true",
            SWITCHBOARD__SLACK__MODE="http",
            SWITCHBOARD__SLACK__API_BASE_URL=slack.api_url,
        )
    line = the_line(status, stderr, SLACK_TOKEN, SIGNING_SECRET)
    assert line == (
        "switchboard: Slack refused SLACK_BOT_TOKEN (auth.test): invalid_auth. "
        "Check SLACK_BOT_TOKEN: the app's Bot User OAuth Token (xoxb-...)."
    )


async def test_discord_rejecting_the_bot_token(tmp_path: Path):
    async with FakeDiscord(token="another-token") as discord:
        status, stderr = await run(
            tmp_path,
            DISCORD_BOT_TOKEN=discord_payloads.TOKEN,
            SWITCHBOARD__DISCORD__ENABLED="true",
            SWITCHBOARD__DISCORD__API_BASE_URL=discord.api_base_url,
        )
    line = the_line(status, stderr, discord_payloads.TOKEN)
    assert line == (
        "switchboard: Discord rejected the bot token (401 Unauthorized). "
        "Check DISCORD_BOT_TOKEN: the bot's token from the developer portal (Bot page)."
    )


async def test_debug_shows_what_was_held_back(tmp_path: Path):
    """With debug logging, the INFO lines of the steps that worked are shown too."""
    async with FakeTelegram(token="987654321:AAAAotherOTHERotherOTHERother_other1") as telegram:
        env = {
            "TELEGRAM_BOT_TOKEN": TELEGRAM_TOKEN,
            "SWITCHBOARD__TELEGRAM__ENABLED": "true",
            "SWITCHBOARD__TELEGRAM__API_BASE_URL": telegram.base_url,
            "SWITCHBOARD__LOGGING__LEVEL": "DEBUG",
        }
        status, stderr = await run(tmp_path, **env)
    assert status == 2
    assert " INFO " in stderr and "personas.synced" in stderr
    assert stderr.splitlines()[-1].startswith("switchboard: Telegram rejected the bot token")
