"""`GET /readyz` of the real service: 200 while the database answers and every
adapter is connected; 503 naming what is not — Telegram once its long polling
fails (the fake Telegram stopped), the database once its schema is gone —
while `/healthz` (liveness) stays 200 for a platform outage."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.conftest import POSTGRES_URL, TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import TOKEN, FakeTelegram
from tests.service_rig import Service, free_port, service_env
from tests.web.scrape import readyz_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


async def test_readyz_names_telegram_when_its_polling_fails(tmp_path: Path) -> None:
    async with (
        FakeAnthropic(api_key=TEST_API_KEY) as model,
        FakeSlack() as slack,
        FakeTelegram() as telegram,
    ):
        port = free_port()
        env = service_env(
            Database("sqlite", tmp_path),
            model,
            slack,
            port,
            TELEGRAM_BOT_TOKEN=TOKEN,
            SWITCHBOARD__TELEGRAM__ENABLED="true",
            SWITCHBOARD__TELEGRAM__MODE="polling",
            SWITCHBOARD__TELEGRAM__API_BASE_URL=telegram.base_url,
        )
        service = Service(env, tmp_path, port)
        await service.start()
        try:
            async with aiohttp.ClientSession() as http:
                up = await readyz_until(http, service, 200, "everything up")
                await telegram.wait_for(lambda: bool(telegram.calls_to("getUpdates")))
                await telegram.close()  # Telegram is gone: polling fails
                down = await readyz_until(http, service, 503, "Telegram down")
                async with http.get(service.url + "/healthz") as response:
                    alive = response.status
        finally:
            await service.stop()
    assert up == {
        "ready": True,
        "database": "ok",
        "adapters": {"slack": "ok", "telegram": "ok"},
    }
    assert down == {
        "ready": False,
        "database": "ok",
        "adapters": {"slack": "ok", "telegram": "not connected"},
    }
    assert alive == 200  # the process itself is fine: no restart for a platform outage


@pytest.mark.skipif(not POSTGRES_URL, reason="SWITCHBOARD_TEST_POSTGRES_URL not set")
async def test_readyz_names_the_database_when_its_schema_is_gone(tmp_path: Path) -> None:
    db = Database("postgres", tmp_path)
    await db.create()
    try:
        async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
            port = free_port()
            service = Service(service_env(db, model, slack, port), tmp_path, port)
            await service.start()
            try:
                async with aiohttp.ClientSession() as http:
                    await readyz_until(http, service, 200, "everything up")
                    await db.drop()  # the database answers, but our tables are gone
                    down = await readyz_until(http, service, 503, "the schema dropped")
            finally:
                await service.stop(grace=30)
    finally:
        await db.drop()
    assert down["ready"] is False
    assert str(down["database"]).startswith("not answering"), down
    assert down["adapters"] == {"slack": "ok"}
