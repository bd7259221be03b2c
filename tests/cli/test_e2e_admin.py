"""End to end: the operator CLI (`switchboard admin …`, `switchboard jobs …`)
without any platform or API key, and a wakeup scheduled from `switchboard chat`
printed in that chat while it is open (subprocesses, like test_e2e_chat)."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_e2e_chat import run_cli
from tests.conftest import TEST_API_KEY
from tests.fakes.anthropic import FakeAnthropic, FakeUsage, text_reply, tool_call, tool_use_reply
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.e2e

ROOT = REPO_ROOT


def ok(args: list[str], db: Path) -> str:
    result = run_cli(args, db=db, api_key=None)  # no platform, no API key needed
    assert result.returncode == 0, result.stderr
    return result.stdout


def fails(args: list[str], db: Path) -> str:
    result = run_cli(args, db=db, api_key=None)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    return line


def test_admin_budget_role_usage_and_audit(fake_anthropic_thread: FakeAnthropic, tmp_path: Path):
    db = tmp_path / "db.sqlite"
    fake_anthropic_thread.script(
        text_reply("hi", usage=FakeUsage(input_tokens=300, output_tokens=100))
    )
    chat = run_cli(["chat", "--user", "bob"], "hello\n", fake=fake_anthropic_thread, db=db)
    assert chat.returncode == 0, chat.stderr

    shown = ok(["admin", "budget", "show", "console:bob"], db).splitlines()
    assert "used    400 tokens this month" in shown and "left    4,600 tokens" in shown
    changed = ok(["admin", "budget", "set", "console:bob", "50k"], db).splitlines()
    assert "limit   50,000 tokens a month (fixed)" in changed
    granted = ok(["admin", "budget", "grant", "1", "1000"], db).splitlines()  # by user id
    assert "limit   51,000 tokens a month (fixed + 1,000 granted)" in granted
    assert "used    0 tokens this month" in ok(["admin", "budget", "reset", "console:bob"], db)
    assert "is now admin (was guest)" in ok(["admin", "role", "console:bob", "admin"], db)
    default = ok(["admin", "budget", "set", "console:bob", "default"], db).splitlines()
    assert "limit  unlimited (role default)" in default  # the admin role's default allowance

    usage = ok(["admin", "usage"], db).splitlines()
    assert usage[0].endswith(": 400 tokens, about $0.0024")
    assert "  console  400 tokens  $0.0024" in usage
    assert "Usage of bob" in ok(["admin", "usage", "console:bob"], db)

    log = ok(["admin", "audit"], db).splitlines()
    assert len(log) == 5
    assert "/setbudget    ok  target=console:bob  where=cli" in log[0] and "  cli:" in log[0]
    assert "/role         ok  target=console:bob" in log[3] and '"to": "admin"' in log[3]

    assert fails(["admin", "budget", "show", "console:nobody"], db) == (
        "switchboard: no user has the account console:nobody"
    )
    assert fails(["admin", "budget", "set", "console:bob"], db) == (
        "switchboard: admin budget set needs TOKENS"
    )
    assert "not a token count" in fails(["admin", "budget", "grant", "console:bob", "x"], db)


def test_jobs_list_pause_resume_remove(fake_anthropic_thread: FakeAnthropic, tmp_path: Path):
    db = tmp_path / "db.sqlite"
    ok(["db", "upgrade"], db)
    run_cli(["chat", "--user", "bob"], "/help\n", db=db)
    ok(["admin", "role", "console:bob", "user"], db)
    fake_anthropic_thread.script(
        tool_use_reply(
            tool_call("schedule_add", {"prompt": "Check the backups", "when": "every 2h"})
        ),
        "Scheduled every two hours.",
    )
    chat = run_cli(
        ["chat", "--user", "bob"], "check backups every 2h\n", fake=fake_anthropic_thread, db=db
    )
    assert chat.stdout.strip() == "Scheduled every two hours.", chat.stderr

    listing = ok(["jobs", "list"], db)
    assert "active" in listing and "console:bob" in listing and "every 2h" in listing
    assert "prompt: Check the backups" in listing
    assert ok(["jobs", "pause", "1"], db).strip() == "Job #1 is paused."
    assert "paused(operator)" in ok(["jobs", "list"], db)
    assert ok(["jobs", "resume", "1"], db).startswith("Job #1 is active, next run ")
    assert ok(["jobs", "remove", "1"], db).strip() == "Job #1 is removed."
    assert ok(["jobs", "list"], db).strip() == "No scheduled jobs."
    assert "removed" in ok(["jobs", "list", "--all"], db)
    assert fails(["jobs", "pause", "1"], db) == (
        "switchboard: no open job #1 (see: switchboard jobs list)"
    )
    assert "jobs pause   ok  target=job #1" in ok(["admin", "audit"], db)


def read_until(proc: subprocess.Popen[str], needle: str, deadline_s: float = 300) -> list[str]:
    """Lines of stdout up to the one containing `needle` (fails after the deadline:
    a guard against hanging, not a timing assertion)."""
    assert proc.stdout is not None
    lines: list[str] = []
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if needle in line:
                return lines
    raise AssertionError(f"{needle!r} never printed; got {lines}")


def test_a_wakeup_scheduled_in_the_chat_is_printed_there(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    db = tmp_path / "db.sqlite"
    ok(["db", "upgrade"], db)
    run_cli(["chat", "--user", "bob"], "/help\n", db=db)
    ok(["admin", "role", "console:bob", "user"], db)
    fake_anthropic_thread.script(
        tool_use_reply(
            tool_call("schedule_add", {"prompt": "Tell bob to stretch", "when": "in 1 second"})
        ),
        "Reminder set.",
        "Time to stretch!",
    )
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "ANTHROPIC_API_KEY": TEST_API_KEY,
        "SWITCHBOARD__LLM__BASE_URL": fake_anthropic_thread.base_url,
        "SWITCHBOARD__DATABASE__URL": f"sqlite+aiosqlite:///{db}",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", "chat", "--user", "bob"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write("remind me to stretch in a second\n")
        proc.stdin.flush()
        assert read_until(proc, "Time to stretch!") == ["Reminder set.", "Time to stretch!"]
        proc.stdin.close()
        assert proc.wait(timeout=300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    wakeup = fake_anthropic_thread.last_request
    assert "Tell bob to stretch" in wakeup.messages[-1]["content"][0]["text"]
    assert "done" in ok(["jobs", "list"], db)
