"""Slack fixtures (a pytest plugin: `pytest_plugins = ("tests.adapters.slack.fixtures",)`):
the fake Slack, and Apps wired to it with the real Slack adapter."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from adapters.slack import SlackAdapter
from bot.app import App
from tests.adapters.slack.support import Rig, slack_secrets
from tests.conftest import Database, make_settings
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.slack import FakeSlack


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
async def rig_factory(
    database: Database, fake_anthropic: FakeAnthropic, slack: FakeSlack
) -> AsyncIterator[Any]:
    """Open an App on the test database with the Slack adapter started against
    the fake Slack (`mode` http by default), its web server on a free port;
    `sections` adds other settings sections (e.g. `streaming`), `tools` extra tools."""
    rigs: list[Rig] = []
    http = aiohttp.ClientSession()

    async def factory(
        mode: str = "http",
        *,
        sections: dict[str, Any] | None = None,
        tools: Any = (),
        **slack_settings: Any,
    ) -> Rig:
        settings = make_settings(
            database,
            fake_anthropic,
            server={"port": 0},
            slack={"enabled": True, "mode": mode, "api_base_url": slack.api_url, **slack_settings},
            **(sections or {}),
        )
        app = App(settings, slack_secrets(), extra_tools=tools)
        rig = Rig(app, None, slack, http)  # type: ignore[arg-type]
        rigs.append(rig)
        await app.open()
        await app.start_adapters(["slack"])
        adapter = app.adapters[0]
        assert isinstance(adapter, SlackAdapter)
        rig.adapter = adapter
        return rig

    try:
        yield factory
    finally:
        for rig in rigs:
            await rig.close()
        await http.close()
