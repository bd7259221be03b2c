"""The Discord adapter end to end: the real discord.py client against the fake Discord
(REST + gateway, tests/fakes/discord.py), the real App and pipeline (SQLite and
PostgreSQL), the real anthropic SDK against the fake Messages API.

Nothing here measures time: tests wait for events (a message appearing on the fake,
a gateway barrier, the adapter's in-flight tasks finishing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from adapters.discord import DiscordAdapter, create_adapter
from bot.app import App
from bot.commands.registry import CommandSpec
from tests.adapters.discord.helpers import SECRETS
from tests.fakes.discord import FakeDiscord


@pytest.fixture
async def fake_discord():
    async with FakeDiscord() as fake:
        yield fake


@pytest.fixture
def start_discord(fake_discord: FakeDiscord, make_app):  # type: ignore[no-untyped-def]
    """Open an App wired to both fakes and start the Discord adapter through App.start.
    Replies come whole unless `sections` has a `streaming` section (test_streaming.py):
    the other tests look at the final messages, not at what grew before them."""

    async def start(
        *,
        commands: Sequence[CommandSpec] = (),
        sections: dict[str, Any] | None = None,
        tools: Sequence[Any] = (),
        **discord: Any,
    ) -> tuple[App, DiscordAdapter]:
        sections = {"streaming": {"enabled": False}, **(sections or {})}
        app = await make_app(
            tools=tools,
            server={"port": 0},
            discord={"enabled": True, "api_base_url": fake_discord.api_base_url, **discord},
            **sections,
        )
        for spec in commands:
            app.pipeline.s.commands.add(spec)
        adapter = create_adapter(app.settings, SECRETS)
        await app.start([adapter])
        await fake_discord.sync()  # READY and GUILD_CREATE (the bot's role) are processed
        return app, adapter

    return start
