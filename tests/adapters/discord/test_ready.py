"""The Discord adapter's readiness (`GET /readyz` of the App's web server):
ready once the gateway session is up (READY), not after the client closed."""

from __future__ import annotations

from typing import Any

import aiohttp


async def test_readyz_follows_the_gateway(start_discord: Any) -> None:
    app, adapter = await start_discord()
    assert app.web is not None
    async with aiohttp.ClientSession() as http:
        async with http.get(app.web.url + "/readyz") as response:
            assert response.status == 200
            assert (await response.json())["adapters"] == {"discord": "ok"}
        await adapter.stop()
        async with http.get(app.web.url + "/readyz") as response:
            assert response.status == 503
            assert (await response.json())["adapters"] == {"discord": "not connected"}
