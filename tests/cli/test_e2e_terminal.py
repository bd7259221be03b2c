"""End to end: `switchboard chat` as a subprocess, the way people use it: the
operator at the machine (owner on a fresh database), input read while replies
run (`/stop`, a line typed meanwhile), logs kept off stdout. The fake Messages
API streams slowly where the test needs a reply still running."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from tests.conftest import TEST_API_KEY
from tests.fakes.anthropic import FakeAnthropic, FakeUsage, text_reply
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.e2e

LONG = " ".join(f"word{i}" for i in range(200)) + " THE-END"


def child_env(fake: FakeAnthropic, db: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "USER": "operator",
        "LOGNAME": "operator",
        "ANTHROPIC_API_KEY": TEST_API_KEY,
        "SWITCHBOARD__LLM__BASE_URL": fake.base_url,
        "SWITCHBOARD__DATABASE__URL": f"sqlite+aiosqlite:///{db}",
        **extra,
    }


def chat(
    fake: FakeAnthropic, db: Path, stdin: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", "chat", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=child_env(fake, db, **env),
        cwd=REPO_ROOT,
        timeout=120,
    )


def start_chat(fake: FakeAnthropic, db: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bot", "chat", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(fake, db),
        cwd=REPO_ROOT,
    )


def wait_until(condition: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.02)


def send_line(stdin: IO[str] | None, line: str) -> None:
    assert stdin is not None
    stdin.write(line + "\n")
    stdin.flush()


def is_log_line(line: str) -> bool:
    return any(level in line for level in (" INFO ", " WARNING ", " ERROR ", " DEBUG "))


def test_ten_messages_in_a_row_as_the_owner_with_logs_off_stdout(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    db = tmp_path / "db.sqlite"
    # 2,000 tokens each: a guest (5,000 a month) would be locked out after three.
    usage = FakeUsage(input_tokens=1500, output_tokens=500)
    fake_anthropic_thread.script(*(text_reply(f"Answer {n}.", usage=usage) for n in range(10)))
    result = chat(fake_anthropic_thread, db, "".join(f"question {n}\n" for n in range(10)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"Answer {n}." for n in range(10)]
    assert fake_anthropic_thread.request_count == 10
    assert "console:operator (you, at this terminal) is now the owner" in result.stderr
    assert not [line for line in result.stderr.splitlines() if " INFO " in line]
    with sqlite3.connect(db) as conn:
        roles = conn.execute(
            "SELECT u.role FROM users u JOIN platform_links l ON l.user_id = u.id"
            " WHERE l.platform = 'console' AND l.platform_user_id = 'operator'"
        ).fetchall()
        audit = conn.execute("SELECT actor, action, target FROM audit_log").fetchall()
    assert roles == [("owner",)]
    assert audit == [("cli:operator", "first-owner", "console:operator")]

    # Once there is an owner, nobody else becomes one; --as grants nothing; -v logs INFO,
    # to stderr only.
    fake_anthropic_thread.script("Hi guest.")
    again = chat(fake_anthropic_thread, db, "hello\n/budget\n", "--as", "visitor", "-v")
    assert again.returncode == 0, again.stderr
    assert "is now the owner" not in again.stderr
    assert any(" INFO " in line for line in again.stderr.splitlines())
    assert not [line for line in again.stdout.splitlines() if is_log_line(line)]
    assert again.stdout.splitlines()[0] == "Hi guest."
    assert "of 5,000 tokens this month" in again.stdout  # a guest's allowance
    with sqlite3.connect(db) as conn:
        owners = conn.execute("SELECT count(*) FROM users WHERE role = 'owner'").fetchone()
    assert owners == (1,)


def test_stop_mid_reply(fake_anthropic_thread: FakeAnthropic, tmp_path: Path):
    fake_anthropic_thread.script(text_reply(LONG, chunk_size=4, chunk_delay=0.1))
    proc = start_chat(fake_anthropic_thread, tmp_path / "db.sqlite")
    try:
        send_line(proc.stdin, "tell me a long story")
        wait_until(lambda: fake_anthropic_thread.request_count == 1)
        send_line(proc.stdin, "/stop")
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "Stopped." in out.splitlines()
    assert "THE-END" not in out
    assert not [line for line in out.splitlines() if is_log_line(line)]


def test_a_line_typed_during_a_reply_is_answered(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    fake_anthropic_thread.script(
        text_reply("First answer, slowly.", chunk_size=2, chunk_delay=0.1), "Second answer."
    )
    proc = start_chat(fake_anthropic_thread, tmp_path / "db.sqlite")
    try:
        send_line(proc.stdin, "first")
        wait_until(lambda: fake_anthropic_thread.request_count == 1)
        send_line(proc.stdin, "second")  # typed while the first reply streams
        # EOF (communicate closes stdin): the chat ends once both replies are out.
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.splitlines() == ["First answer, slowly.", "Second answer."]
    texts = [r.messages[-1]["content"][0]["text"] for r in fake_anthropic_thread.requests]
    assert texts == ["first", "second"]


def test_logs_go_to_the_configured_file(fake_anthropic_thread: FakeAnthropic, tmp_path: Path):
    log_file = tmp_path / "logs" / "switchboard.log"
    fake_anthropic_thread.script("Logged elsewhere.")
    result = chat(
        fake_anthropic_thread,
        tmp_path / "db.sqlite",
        "hello\n",
        "-v",
        SWITCHBOARD__LOGGING__FILE=str(log_file),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Logged elsewhere.\n"
    assert not [line for line in result.stderr.splitlines() if is_log_line(line)]
    logged = log_file.read_text()
    assert " INFO " in logged and "run." in logged
    assert TEST_API_KEY not in logged
