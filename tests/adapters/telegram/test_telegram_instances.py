"""Two `switchboard run` processes with Telegram long polling on one PostgreSQL:
only one polls at a time (Telegram itself refuses two getUpdates at once), the
other takes over within seconds when the poller dies, and no update is
answered twice or skipped."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from sqlmodel import select

from bot.store.models import OutboxItem
from tests.conftest import POSTGRES_URL, TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic, last_user_text, text_reply
from tests.fakes.telegram import TOKEN, FakeTelegram
from tests.fakes.telegram_updates import private
from tests.pipeline.test_crash_recovery import wait_for
from tests.service_rig import Service, free_port

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.postgres,
    pytest.mark.skipif(not POSTGRES_URL, reason="SWITCHBOARD_TEST_POSTGRES_URL not set"),
    pytest.mark.timeout(240),
]


def telegram_env(db: Database, model: FakeAnthropic, telegram: FakeTelegram, port: int) -> dict:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "ANTHROPIC_API_KEY": TEST_API_KEY,
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "SWITCHBOARD__DATABASE__URL": db.url,
        "SWITCHBOARD__DATABASE__SCHEMA_NAME": db.schema or "",
        "SWITCHBOARD__LLM__BASE_URL": model.base_url,
        "SWITCHBOARD__LLM__MAX_RETRIES": "0",
        "SWITCHBOARD__TELEGRAM__ENABLED": "true",
        "SWITCHBOARD__TELEGRAM__API_BASE_URL": telegram.base_url,
        "SWITCHBOARD__SERVER__PORT": str(port),
        "SWITCHBOARD__BUDGETS__GUEST": "unlimited",
        "SWITCHBOARD__INBOX__LEASE_SECONDS": "3",
        "SWITCHBOARD__INBOX__SWEEP_SECONDS": "0.5",
    }
    return env


async def replies_recorded(db: Database, within: float = 30.0) -> None:
    store = db.store()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            async with store.read() as session:
                states = (await session.exec(select(OutboxItem.state))).all()
            if states and all(state == "sent" for state in states):
                return
            if loop.time() > deadline:
                raise AssertionError(f"replies not recorded as sent: {states}")
            await asyncio.sleep(0.05)
    finally:
        await store.dispose()


def poller(services: list[Service]) -> Service:
    for service in services:
        if any("this instance is the poller" in line for line in service.logs):
            return service
    raise AssertionError("nobody polls")


async def test_one_poller_at_a_time_and_a_quick_takeover(pg: Database, tmp_path: Path) -> None:
    with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeTelegram() as telegram:
        model.responder = lambda body: text_reply(f"re: {last_user_text(body)}")
        services = []
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            port = free_port()
            services.append(Service(telegram_env(pg, model, telegram, port), tmp_path / name, port))
        for service in services:
            await service.start()
        a = services[0]

        def answered(text: str) -> bool:
            return any(c.visible_text == f"re: {text}" for c in telegram.sent())

        telegram.push_update(private("one"))
        await wait_for(lambda: answered("one"), "the first answer", a, 60)
        # Telegram has no idempotency key: a kill between its accepting a message
        # and our recording it would send it again on recovery (at least once).
        # This test is about the poller, so kill only once the send is recorded.
        await replies_recorded(pg)
        leader = poller(services)
        standby = next(s for s in services if s is not leader)
        leader.kill()
        await leader.stop()
        telegram.push_update(private("two"))  # arrives while nobody polls
        await wait_for(lambda: answered("two"), "the standby taking over", standby, 60)
        assert any("this instance is the poller" in line for line in standby.logs)

        await leader.start()  # back, now standing by
        telegram.push_update(private("three"))
        await wait_for(lambda: answered("three"), "the third answer", standby, 60)
        await asyncio.sleep(1.5)
        await asyncio.gather(leader.stop(), standby.stop())
        texts = [c.visible_text for c in telegram.sent()]
        conflicts = telegram.poll_conflicts
    assert texts == ["re: one", "re: two", "re: three"]
    assert conflicts == 0  # never two instances polling at once
