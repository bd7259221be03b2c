"""`switchboard admin inbox` and `switchboard admin instances`: what an operator
sees of the durable path, from the command line, without any platform."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.pipeline.intake import Inbox
from bot.store import Store
from bot.store.instances import Instances
from bot.store.leases import Leases
from bot.types import IncomingMessage
from tests.cli.test_e2e_chat import run_cli

pytestmark = pytest.mark.e2e


def msg(text: str, event_id: str) -> IncomingMessage:
    return IncomingMessage(
        platform="slack",
        platform_user_id="U1",
        platform_channel_id="D1",
        text=text,
        event_id=event_id,
    )


async def prepare(db: Path) -> None:
    store = Store(f"sqlite+aiosqlite:///{db}")
    await store.upgrade()
    inbox = Inbox(store, "host-a:1:abc", 20)
    await inbox.accept(msg("waiting", "e1"))
    await inbox.accept(msg("broken", "e2"))
    await inbox.finish("slack", ["e2"], "failed", error="gave up after 3 attempts")
    await inbox.accept(msg("done", "e3"))
    await inbox.finish("slack", ["e3"], "answered")
    await Instances(store, "host-a:1:abc").register(["slack", "telegram"])
    leases = Leases(store, "host-a:1:abc", 60)
    await leases.acquire("conversation:slack:D1:-")
    await leases.acquire("leader:telegram-polling:42")
    await store.dispose()


def admin(args: list[str], db: Path) -> str:
    result = run_cli(["admin", *args], db=db, api_key=None)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_admin_inbox_shows_what_waits_and_what_failed(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    asyncio.run(prepare(db))
    out = admin(["inbox"], db)
    lines = out.splitlines()
    assert lines[0].startswith("1 waiting or running, oldest ") and lines[0].endswith("; 1 failed")
    assert any("running" in line and "slack:D1:-" in line for line in lines)
    assert any("failed" in line for line in lines)
    assert "error: gave up after 3 attempts" in out
    assert "answered" not in out
    assert "answered" in admin(["inbox", "--all"], db)


def test_admin_instances_shows_the_live_ones_and_what_they_hold(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    asyncio.run(prepare(db))
    out = admin(["instances"], db)
    (row,) = [line for line in out.splitlines() if line.startswith("host-a:1:abc")]
    assert " live " in row
    assert "slack, telegram; running 1 conversation; leader:telegram-polling:42" in row
    assert out.splitlines()[-1].startswith("inbox: 1 waiting or running")
