"""The service's web server with the admin dashboard on (an `App` on the test
database, the model at `FakeAnthropic`, a recording console adapter), and
clients for it: anonymous, bearer, and a logged-in browser-like session."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from bot.app.service import App
from tests.harness import RecordingAdapter, message

ADMIN_TOKEN = "adm-test-7f3c9a1e5b2d4c6e8a0f"
CSRF = re.compile(r'name="csrf" value="([^"]*)"')


@dataclass
class Dashboard:
    app: App
    adapter: RecordingAdapter
    http: aiohttp.ClientSession
    """No credentials (its own cookie jar stays empty unless a test logs in)."""

    @property
    def url(self) -> str:
        assert self.app.web is not None
        return self.app.web.url

    def bearer(self, token: str = ADMIN_TOKEN) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    async def page(self, path: str, **kwargs: Any) -> tuple[int, str]:
        kwargs.setdefault("allow_redirects", False)
        async with self.http.get(self.url + path, **kwargs) as response:
            return response.status, await response.text()

    async def post(self, path: str, data: dict[str, str], **kwargs: Any) -> tuple[int, str]:
        kwargs.setdefault("allow_redirects", False)
        async with self.http.post(self.url + path, data=data, **kwargs) as response:
            return response.status, await response.text()

    async def login(self) -> str:
        """Log in through the form (the session's jar keeps the cookie); the CSRF token."""
        status, _ = await self.post("/admin/login", {"token": ADMIN_TOKEN})
        assert status == 303
        status, body = await self.page("/admin/users")
        assert status == 200, body
        found = CSRF.search(body)
        assert found is not None and found[1]
        return found[1]

    async def say(self, text: str, user: str = "alice", name: str = "Alice") -> None:
        outcome = await self.app.pipeline.handle(
            message(text, platform_user_id=user, user_display_name=name)
        )
        assert outcome is not None


async def open_dashboard(make_app: Any, token: str | None = ADMIN_TOKEN) -> tuple[App, Any]:
    app: App = await make_app(server={"port": 0, "host": "127.0.0.1"})
    if token is not None:
        app.secrets = app.secrets.model_copy(update={"admin_token": SecretStr(token)})
    adapter = RecordingAdapter()
    await app.start([adapter])
    return app, adapter


@pytest.fixture
async def dash(make_app: Any) -> AsyncIterator[Dashboard]:
    app, adapter = await open_dashboard(make_app)
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        yield Dashboard(app, adapter, http)
