"""The service's own web server (aiohttp): `GET /healthz` and the HTTP routes
adapters ask for (Telegram webhook, Slack events, ...)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from bot.ports import Route
from bot.web.guards import input_guard

log = logging.getLogger("switchboard.web")

HealthCheck = Callable[[], Awaitable[dict[str, object]]]


class WebServer:
    def __init__(
        self,
        host: str,
        port: int,
        health: HealthCheck | None = None,
        *,
        max_body_bytes: int = 1024 * 1024,
    ) -> None:
        self.host = host
        self.port = port
        self._health = health
        self._app = web.Application(
            client_max_size=max_body_bytes, middlewares=[input_guard(max_body_bytes)]
        )
        self._app.router.add_get("/healthz", self._healthz)
        self._runner: web.AppRunner | None = None
        self._paths: list[str] = ["GET /healthz"]

    def add_routes(self, routes: Sequence[Route]) -> None:
        for route in routes:
            self._app.router.add_route(route.method, route.path, route.handler)
            self._paths.append(f"{route.method} {route.path}")

    async def start(self) -> None:
        self._runner = web.AppRunner(self._app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        addresses = self._runner.addresses
        if addresses:  # the real port when configured as 0
            self.port = int(addresses[0][1])
        log.info("web.started url=%s routes=%s", self.url, ", ".join(self._paths))

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def _healthz(self, request: web.Request) -> web.Response:
        body: dict[str, object] = {"status": "ok"}
        if self._health is not None:
            try:
                body.update(await self._health())
            except Exception as exc:
                log.warning("health.failed: %s", exc)
                return web.json_response(
                    {"status": "unhealthy", "error": type(exc).__name__}, status=503
                )
        return web.json_response(body)
