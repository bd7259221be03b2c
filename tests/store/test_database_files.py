"""The SQLite files are the owner's alone, and `echo` prints each statement
once: `switchboard db upgrade` and `switchboard run` as subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic, text_reply
from tests.fakes.slack import FakeSlack, event_body
from tests.paths import REPO_ROOT
from tests.service_rig import Service, SlackSender, free_port, service_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def db_files(db: Path) -> list[Path]:
    return [db, Path(f"{db}-wal"), Path(f"{db}-shm")]


@contextlib.contextmanager
def umask(value: int) -> Iterator[None]:
    """The usual umask, so a strict one in the test environment proves nothing."""
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def switchboard(db: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    with umask(0o022):
        return subprocess.run(
            [sys.executable, "-m", "bot", *args],
            capture_output=True,
            text=True,
            env={
                "PATH": os.environ["PATH"],
                "HOME": os.environ.get("HOME", "/tmp"),
                "SWITCHBOARD__DATABASE__URL": f"sqlite+aiosqlite:///{db}",
                **env,
            },
            cwd=REPO_ROOT,
            timeout=120,
        )


def test_db_upgrade_creates_the_database_for_its_owner_only(tmp_path: Path):
    db = tmp_path / "data" / "switchboard.db"
    result = switchboard(db, "db", "upgrade")
    assert result.returncode == 0, result.stderr
    assert mode(db) == 0o600
    for file in db_files(db)[1:]:
        assert not file.exists() or mode(file) == 0o600
    assert "database.file_mode" not in result.stderr


def test_a_url_with_parameters_opens_the_same_private_file_or_says_which_is_wrong(
    tmp_path: Path,
):
    db = tmp_path / "params.db"
    result = switchboard(Path(f"{db}?timeout=5"), "db", "upgrade")
    assert result.returncode == 0, result.stderr
    assert mode(db) == 0o600
    assert sqlite3.connect(db).execute("SELECT count(*) FROM users").fetchone() == (0,)

    bad = switchboard(Path(f"{db}?timeout=soon"), "db", "upgrade")
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines() == [
        "switchboard: the SQLite database URL has a parameter that is not valid (could not"
        " convert string to float: 'soon'). Fix the parameters after '?' in [database] url"
        " (SWITCHBOARD__DATABASE__URL)."
    ]


def test_existing_files_readable_by_others_are_left_with_one_warning(tmp_path: Path):
    db = tmp_path / "old.db"
    sqlite3.connect(db).close()
    db.chmod(0o644)
    result = switchboard(db, "db", "upgrade")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "database.file_mode" in line]
    assert len(warnings) == 1, result.stderr
    assert "WARNING" in warnings[0] and "old.db:0644" in warnings[0]
    assert mode(db) == 0o644  # the operator's file: not changed behind their back


def test_echo_prints_each_statement_once(tmp_path: Path):
    db = tmp_path / "echo.db"
    result = switchboard(db, "db", "upgrade", SWITCHBOARD__DATABASE__ECHO="true")
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert output.count("CREATE TABLE alembic_version") == 1, output
    assert output.count("CREATE TABLE users") == 1, output
    assert "sqlalchemy.engine" in result.stderr  # through our handler (redacted, formatted)


async def test_a_running_service_keeps_db_wal_and_shm_private_and_logs_json(
    sqlite_database: Database, tmp_path: Path
):
    db = tmp_path / "test.db"
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        model.script(text_reply("Hello there."))
        env = service_env(
            sqlite_database, model, slack, port := free_port(), SWITCHBOARD__LOGGING__FORMAT="json"
        )
        service = Service(env, tmp_path, port)
        with umask(0o022):
            await service.start()
        try:
            async with aiohttp.ClientSession() as http:
                event = {"type": "message", "channel": "D1", "channel_type": "im", "user": "U1"}
                ts = "1700000001.000100"
                body = event_body({**event, "text": "hi", "ts": ts, "event_ts": ts})
                await SlackSender(http, [service.url]).deliver(body)
                for _ in range(600):
                    if slack.messages:
                        break
                    await asyncio.sleep(0.1)
            assert [m["text"] for m in slack.messages] == ["Hello there."], service.log_text
            modes = {file.name: mode(file) for file in db_files(db)}  # all three while it runs
        finally:
            code = await service.stop()

    assert code == 0, service.log_text
    assert modes == {"test.db": 0o600, "test.db-wal": 0o600, "test.db-shm": 0o600}
    lines = [json.loads(line) for line in service.logs if line.strip()]
    (done,) = [line for line in lines if line.get("event") == "run.completed"]
    assert done["run_id"] == done["run"] and done["tokens_in"] > 0
    assert done["conversation"].startswith("slack:")
