"""A Telegram test rig: the real App (pipeline, store, the anthropic SDK against the fake
Messages API) with the Telegram adapter of one library, talking to the fake Bot API."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adapters.telegram import WEBHOOK_PATH, TelegramAdapter
from adapters.telegram.factory import make_transport
from bot.app import App
from bot.config import Secrets
from tests.conftest import TEST_API_KEY, Database, make_settings
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.telegram import TOKEN, FakeTelegram
from tests.fakes.telegram_updates import FakeClock

LIBRARIES = ["aiogram", "python-telegram-bot"]
WEBHOOK_SECRET = "s3cret_webhook-token"
PUBLIC_URL = "https://bot.example.com/telegram/webhook"


@dataclass
class Rig:
    database: Database
    anthropic: FakeAnthropic
    telegram: FakeTelegram
    clock: FakeClock
    apps: list[App] = field(default_factory=list)
    app: App | None = None
    adapter: TelegramAdapter | None = None

    def secrets(self, **values: Any) -> Secrets:
        base = {
            "anthropic_api_key": TEST_API_KEY,
            "telegram_bot_token": TOKEN,
            "telegram_webhook_secret": WEBHOOK_SECRET,
        }
        return Secrets.model_validate(base | values)

    async def open(
        self,
        library: str,
        *,
        mode: str = "polling",
        sections: dict[str, Any] | None = None,
        **telegram: Any,
    ) -> App:
        """Open the App and start the adapter (own transport, the rig's clock);
        `sections` are further settings sections. Streaming is off unless
        `sections` has a `streaming` section (the tests that are not about it
        assert one message per reply, not what a live view showed meanwhile)."""
        settings = make_settings(
            self.database,
            self.anthropic,
            **({"streaming": {"enabled": False}} | (sections or {})),
            server={"port": 0},
            telegram={
                "enabled": True,
                "library": library,
                "mode": mode,
                "api_base_url": self.telegram.base_url,
                "webhook_url": PUBLIC_URL,
                **telegram,
            },
        )
        app = App(settings, self.secrets())
        await app.open()
        self.apps.append(app)
        self.app = app
        self.adapter = self.new_adapter()
        await app.start([self.adapter])
        if mode == "webhook":
            assert app.web is not None
            self.telegram.webhook_target = f"{app.web.url}{WEBHOOK_PATH}"
        return app

    def new_adapter(self) -> TelegramAdapter:
        assert self.app is not None
        config = self.app.settings.telegram
        transport = make_transport(config.library, TOKEN, config.api_base_url)
        secret = WEBHOOK_SECRET if config.mode == "webhook" else None
        return TelegramAdapter(
            config, transport, webhook_secret=secret, clock=self.clock, poll_timeout=5
        )

    async def restart_adapter(self) -> TelegramAdapter:
        """Stop the adapter and start a fresh one on the same App (a process restart
        as far as Telegram and the database are concerned)."""
        assert self.app is not None and self.adapter is not None
        await self.adapter.stop()
        self.app.adapters.remove(self.adapter)
        self.adapter = self.new_adapter()
        self.app.attach(self.adapter)
        await self.adapter.start(self.app.pipeline)
        return self.adapter

    async def deliver(self, update: dict[str, Any]) -> int:
        """Push an update, wait until the adapter has handed it over and the pipeline
        has finished with it (answered, ignored, ...)."""
        update_id = self.telegram.push_update(update)
        await self.telegram.wait_taken(update_id)
        assert self.app is not None
        await self.app.pipeline.drain(60)
        return update_id

    async def close(self) -> None:
        for app in self.apps:
            await app.close(drain_timeout=5)
