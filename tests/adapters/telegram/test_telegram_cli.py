"""`switchboard run` with `[telegram] enabled = true`, as a subprocess, against the fake
Bot API and Messages API servers (each in a thread of its own)."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import TEST_API_KEY
from tests.fakes.anthropic import FakeAnthropic, text_reply
from tests.fakes.telegram import TOKEN, FakeTelegram, flood
from tests.fakes.telegram_updates import private
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.e2e

ROOT = REPO_ROOT


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "ANTHROPIC_API_KEY": TEST_API_KEY,
        "SWITCHBOARD__DATABASE__URL": f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}",
        "SWITCHBOARD__SERVER__PORT": "0",
        "SWITCHBOARD__TELEGRAM__ENABLED": "true",
    }
    env.update(extra)
    return env


def wait_until(condition: Callable[[], bool], process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"switchboard exited early:\n{process.communicate()[1]}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"timed out:\n{process.communicate()[1]}")
        time.sleep(0.05)


@pytest.mark.parametrize("library", ["aiogram", "python-telegram-bot"])
def test_run_starts_the_telegram_adapter_and_stops_cleanly(
    tmp_path: Path, fake_anthropic_thread: FakeAnthropic, library: str
):
    fake_anthropic_thread.script(text_reply("Hello from the service."))
    with FakeTelegram() as telegram:
        env = environment(
            tmp_path,
            TELEGRAM_BOT_TOKEN=TOKEN,
            SWITCHBOARD__LLM__BASE_URL=fake_anthropic_thread.base_url,
            SWITCHBOARD__TELEGRAM__API_BASE_URL=telegram.base_url,
            SWITCHBOARD__TELEGRAM__LIBRARY=library,
        )
        process = subprocess.Popen(
            [sys.executable, "-m", "bot", "run"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_until(lambda: bool(telegram.calls_to("getUpdates")), process)
            telegram.push_update(private("hello"))
            wait_until(lambda: bool(telegram.sent()), process)
        finally:
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert [c.visible_text for c in telegram.sent()] == ["Hello from the service."]
    assert f"library={library} mode=polling" in stderr
    assert TOKEN not in stderr and TOKEN.split(":")[1] not in stderr
    assert "Traceback" not in stderr


def run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", "run"],
        env=environment(tmp_path, **env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_missing_token_is_a_one_line_config_error(tmp_path: Path):
    result = run(tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "switchboard: config error: TELEGRAM_BOT_TOKEN is not set (secrets come only from env vars)"
    )
    assert "Traceback" not in result.stderr


def test_webhook_mode_needs_its_url_and_secret(tmp_path: Path):
    result = run(tmp_path, TELEGRAM_BOT_TOKEN=TOKEN, SWITCHBOARD__TELEGRAM__MODE="webhook")
    assert result.returncode == 2
    assert "telegram.webhook_url" in result.stderr.strip().splitlines()[-1]
    result = run(
        tmp_path,
        TELEGRAM_BOT_TOKEN=TOKEN,
        SWITCHBOARD__TELEGRAM__MODE="webhook",
        SWITCHBOARD__TELEGRAM__WEBHOOK_URL="https://bot.example.com/telegram/webhook",
    )
    assert result.returncode == 2
    assert "TELEGRAM_WEBHOOK_SECRET is not set" in result.stderr.strip().splitlines()[-1]


def delivery_failures(db: Path) -> list[tuple[str, str, str]]:
    if not db.exists():
        return []
    with contextlib.closing(sqlite3.connect(db)) as conn:
        try:
            rows = conn.execute("SELECT platform, text, reason FROM delivery_failures").fetchall()
        except sqlite3.OperationalError:  # not migrated yet
            return []
    return [(str(p), str(t), str(r)) for p, t, r in rows]


def test_a_flood_wait_over_the_cap_is_a_recorded_failure_not_an_hour_of_waiting(
    tmp_path: Path, fake_anthropic_thread: FakeAnthropic
):
    fake_anthropic_thread.script(text_reply("This one will not get through."))
    with FakeTelegram() as telegram:
        telegram.fail_next("sendMessage", flood(3600))
        env = environment(
            tmp_path,
            TELEGRAM_BOT_TOKEN=TOKEN,
            SWITCHBOARD__LLM__BASE_URL=fake_anthropic_thread.base_url,
            SWITCHBOARD__TELEGRAM__API_BASE_URL=telegram.base_url,
        )  # [telegram] max_retry_after_seconds: the default, 60
        process = subprocess.Popen(
            [sys.executable, "-m", "bot", "run"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_until(lambda: bool(telegram.calls_to("getUpdates")), process)
            telegram.push_update(private("hello"))
            # Within wait_until's minute, so the 3600 s were not waited out.
            wait_until(lambda: bool(delivery_failures(tmp_path / "db.sqlite")), process)
        finally:
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert [c.status for c in telegram.calls_to("sendMessage")] == [429]  # tried once
    ((platform, text, reason),) = delivery_failures(tmp_path / "db.sqlite")
    assert (platform, text) == ("telegram", "This one will not get through.")
    assert "Telegram asked to wait 3600 s (429)" in reason
    assert "[telegram] max_retry_after_seconds = 60" in reason
    (warning,) = [line for line in stderr.splitlines() if "flood_wait_too_long" in line]
    assert " WARNING " in warning and "retry_after=3600s" in warning
