"""Helpers shared by the Discord adapter tests."""

from __future__ import annotations

from sqlmodel import select

from adapters.discord import DiscordAdapter
from bot.app import App
from bot.config import Secrets
from bot.store.models import DeliveryFailure
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import TOKEN

SECRETS = Secrets(discord_bot_token=TOKEN)  # type: ignore[arg-type]


async def settle(fake: FakeDiscord, adapter: DiscordAdapter) -> None:
    """Every frame sent so far has been read by discord.py, and handled by the adapter."""
    await fake.sync()
    await adapter.idle()


async def failures(app: App) -> list[DeliveryFailure]:
    async with app.store.read() as session:
        return list((await session.exec(select(DeliveryFailure))).all())
