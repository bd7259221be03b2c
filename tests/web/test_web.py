"""The service's web server: /healthz and adapter routes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from bot.ports import Route
from tests.harness import RecordingAdapter


@dataclass
class HookAdapter(RecordingAdapter):
    hits: int = 0

    def routes(self) -> Sequence[Route]:
        async def hook(request: web.Request) -> web.Response:
            self.hits += 1
            return web.json_response({"ok": True})

        return [Route("POST", "/test/hook", hook)]


async def test_healthz_and_adapter_routes(make_app):
    app = await make_app(server={"port": 0})
    adapter = HookAdapter(platform="test")
    await app.start([adapter])
    assert app.web is not None and adapter.core is app.pipeline
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{app.web.url}/healthz") as response:
            assert response.status == 200
            assert await response.json() == {
                "status": "ok",
                "database": "ok",
                "adapters": ["test"],
            }
        async with http.post(f"{app.web.url}/test/hook", json={}) as response:
            assert response.status == 200
    assert adapter.hits == 1


async def test_healthz_reports_a_broken_database(make_app):
    app = await make_app(server={"port": 0})
    await app.start([])
    assert app.web is not None
    for engine in {app.store.engine, app.store.urgent_engine}:  # PostgreSQL has two pools
        await engine.dispose()
        engine.sync_engine.pool._creator = _refuse  # type: ignore[attr-defined]
    async with aiohttp.ClientSession() as http, http.get(f"{app.web.url}/healthz") as response:
        assert response.status == 503
        assert (await response.json())["status"] == "unhealthy"


def _refuse() -> None:
    raise OSError("database went away")
