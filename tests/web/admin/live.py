"""The real service (`switchboard run` as a subprocess, Slack in HTTP mode
against `FakeSlack`, the model at `FakeAnthropic`) with the admin dashboard on,
after three Slack DMs were answered: for the end-to-end and browser tests."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from tests.conftest import TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.slack import FakeSlack
from tests.pipeline.test_crash_recovery import dm_event
from tests.service_rig import Service, SlackSender, free_port, service_env
from tests.web.admin.conftest import ADMIN_TOKEN

MESSAGES = (
    ("UALICE0001", "hello from alice"),
    ("UBOB000002", "hello from bob"),
    ("UALICE0001", "alice again, a longer message to use more tokens than bob did"),
)
BEARER = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def figure(body: str, element_id: str) -> str | None:
    found = re.search(rf'id="{element_id}">([^<]*)<', body)
    return None if found is None else found[1]


@dataclass
class Live:
    service: Service
    http: aiohttp.ClientSession
    model: FakeAnthropic
    slack: FakeSlack

    @property
    def url(self) -> str:
        return self.service.url

    async def overview(self) -> str:
        async with self.http.get(self.url + "/admin", headers=BEARER) as response:
            assert response.status == 200, await response.text()
            return await response.text()


async def _settled(live: Live, within: float = 90.0) -> str:
    """The overview once every message is answered and counted."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        body = await live.overview()
        done = (
            figure(body, "messages-total") == str(len(MESSAGES))
            and figure(body, "inbox-depth") == "0"
            and len(live.slack.messages) >= 2  # alice's second message may join her run
        )
        if done:
            return body
        if loop.time() > deadline:
            raise AssertionError("the overview never settled:\n" + live.service.log_text)
        await asyncio.sleep(0.2)


@asynccontextmanager
async def live_service(tmp_path: Path) -> AsyncIterator[Live]:
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        port = free_port()
        env = service_env(
            Database("sqlite", tmp_path), model, slack, port, SWITCHBOARD_ADMIN_TOKEN=ADMIN_TOKEN
        )
        service = Service(env, tmp_path, port)
        await service.start()
        try:
            async with aiohttp.ClientSession() as http:
                live = Live(service, http, model, slack)
                sender = SlackSender(http, [service.url])
                for k, (user, text) in enumerate(MESSAGES, 1):
                    await sender.deliver(dm_event(f"D{user}", user, text, f"170000000{k}.000001"))
                await _settled(live)
                yield live
        finally:
            await service.stop()
