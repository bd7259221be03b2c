"""End to end: `switchboard chat` as a subprocess, stdin piped, against the
fake Messages API (the real anthropic SDK inside the child process)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TEST_API_KEY
from tests.fakes.anthropic import FakeAnthropic, FakeUsage, auth_error, text_reply
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.e2e

ROOT = REPO_ROOT


def run_cli(
    args: list[str],
    stdin: str = "",
    *,
    fake: FakeAnthropic | None = None,
    db: Path | None = None,
    env: dict[str, str] | None = None,
    api_key: str | None = TEST_API_KEY,
) -> subprocess.CompletedProcess[str]:
    child_env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    if api_key:
        child_env["ANTHROPIC_API_KEY"] = api_key
    if fake:
        child_env["SWITCHBOARD__LLM__BASE_URL"] = fake.base_url
    if db:
        child_env["SWITCHBOARD__DATABASE__URL"] = f"sqlite+aiosqlite:///{db}"
    child_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=child_env,
        cwd=ROOT,
        timeout=300,  # a hang guard: a start takes seconds, on a busy machine a minute
    )


def test_replies_are_printed_in_order_and_no_reply_prints_nothing(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    fake_anthropic_thread.script(text_reply("Hello **there**."), "NO_REPLY", "Third answer.")
    result = run_cli(
        ["chat", "--user", "bob"],
        "hi\nok\nlast one\n",
        fake=fake_anthropic_thread,
        db=tmp_path / "db.sqlite",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["Hello **there**.", "Third answer."]
    assert fake_anthropic_thread.request_count == 3
    assert "Traceback" not in result.stderr


def test_history_survives_a_restart(fake_anthropic_thread: FakeAnthropic, tmp_path: Path):
    db = tmp_path / "db.sqlite"
    fake_anthropic_thread.script("Nice to meet you, Bob.")
    first = run_cli(
        ["chat", "--user", "bob"], "my name is Bob\n", fake=fake_anthropic_thread, db=db
    )
    assert first.returncode == 0, first.stderr

    fake_anthropic_thread.script("Your name is Bob.")
    second = run_cli(
        ["chat", "--user", "bob"], "what is my name?\n", fake=fake_anthropic_thread, db=db
    )
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "Your name is Bob."
    sent = fake_anthropic_thread.last_request.messages
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"][0]["text"] == "my name is Bob"
    assert sent[1]["content"][0]["text"] == "Nice to meet you, Bob."


def test_guest_with_spent_budget_is_refused_without_llm_call(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    fake_anthropic_thread.script(
        text_reply("ok", usage=FakeUsage(input_tokens=4500, output_tokens=450))
    )
    result = run_cli(
        ["chat", "--user", "guest1"],
        "first\nsecond\n",
        fake=fake_anthropic_thread,
        db=tmp_path / "db.sqlite",
        env={"SWITCHBOARD__BUDGETS__GUEST": "5000"},
    )
    assert result.returncode == 0, result.stderr
    assert fake_anthropic_thread.request_count == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "ok"
    assert "of your 5,000 tokens this month" in lines[1]


def test_commands_work_in_the_terminal(fake_anthropic_thread: FakeAnthropic, tmp_path: Path):
    result = run_cli(
        ["chat", "--user", "bob"],
        "/help\n/budget\n",
        fake=fake_anthropic_thread,
        db=tmp_path / "db.sqlite",
    )
    assert result.returncode == 0, result.stderr
    assert "/budget" in result.stdout and "of 5,000 tokens this month" in result.stdout
    assert fake_anthropic_thread.request_count == 0


def test_a_failed_reply_makes_a_piped_chat_exit_non_zero(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    # The key is rejected for the second question only: the others are answered, and
    # the script learns from the exit status that one of its questions was not.
    fake_anthropic_thread.script("First answer.", auth_error(), "Third answer.")
    result = run_cli(
        ["chat", "--user", "bob"],
        "one\ntwo\nthree\n",
        fake=fake_anthropic_thread,
        db=tmp_path / "db.sqlite",
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines() == ["First answer.", "Third answer."]
    assert fake_anthropic_thread.request_count == 3
    assert result.stderr.strip() and "Traceback" not in result.stderr


# -- startup errors: one line, non-zero status, no traceback -------------------------------


def assert_one_line_error(
    result: subprocess.CompletedProcess[str], status: int, *needles: str
) -> None:
    assert result.returncode == status, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("switchboard:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0]


def test_missing_api_key(tmp_path: Path):
    result = run_cli(["chat"], "hi\n", db=tmp_path / "db.sqlite", api_key=None)
    assert_one_line_error(result, 2, "ANTHROPIC_API_KEY is not set")


def test_invalid_config_file(tmp_path: Path):
    config = tmp_path / "bad.toml"
    config.write_text('[llm]\nmax_iterations = "many"\n')
    result = run_cli(["--config", str(config), "chat"], "hi\n")
    assert_one_line_error(result, 2, str(config), "llm.max_iterations", "valid integer")

    result = run_cli(["chat", "--config", str(tmp_path / "missing.toml")], "hi\n")
    assert_one_line_error(result, 2, "missing.toml: file not found")


def test_unreachable_database(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = run_cli(["chat"], "hi\n", db=blocker / "sub" / "db.sqlite")
    assert_one_line_error(result, 2, "cannot create the database directory")


def test_failed_migration(tmp_path: Path):
    db = tmp_path / "db.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        conn.execute("INSERT INTO alembic_version VALUES ('from_the_future')")
    result = run_cli(["chat"], "hi\n", db=db)
    assert_one_line_error(result, 2, "schema revision 'from_the_future'")
    debug = run_cli(["chat", "--debug"], "hi\n", db=db)
    assert "Traceback" in debug.stderr  # --debug shows it


def test_db_upgrade_and_check(tmp_path: Path):
    db = tmp_path / "db.sqlite"
    upgrade = run_cli(["db", "upgrade"], db=db)
    assert upgrade.returncode == 0 and "database at revision 0" in upgrade.stdout
    check = run_cli(["db", "check"], db=db)
    assert check.returncode == 0 and "match" in check.stdout


@pytest.mark.parametrize("args", [["--version"], ["personas", "list"]])
def test_other_commands(args: list[str]):
    result = run_cli(args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_run_without_platforms_says_so(tmp_path: Path):
    result = run_cli(["run"], db=tmp_path / "db.sqlite")
    assert result.returncode == 1
    assert "no chat platform is enabled" in result.stderr
