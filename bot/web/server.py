"""The service's own web server (aiohttp): `GET /healthz` (liveness: the
process answers and the database is alive), `GET /readyz` (readiness: the
database answers and every adapter is connected; 503 naming what is not),
`GET /metrics` (Prometheus text, `bot.metrics`; 404 when `[server] metrics` is
off) and the HTTP routes adapters ask for (Telegram webhook, Slack events, ...)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from bot.metrics import CONTENT_TYPE, Metrics
from bot.ports import Route
from bot.web.guards import input_guard

log = logging.getLogger("switchboard.web")

HealthCheck = Callable[[], Awaitable[dict[str, object]]]
ReadinessCheck = Callable[[], Awaitable[tuple[bool, dict[str, object]]]]
"""Whether the service is ready, and the body that says why (or why not)."""


class WebServer:
    def __init__(
        self,
        host: str,
        port: int,
        health: HealthCheck | None = None,
        *,
        max_body_bytes: int = 1024 * 1024,
        readiness: ReadinessCheck | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self._health = health
        self._readiness = readiness
        self._metrics = metrics
        self._app = web.Application(
            client_max_size=max_body_bytes, middlewares=[input_guard(max_body_bytes)]
        )
        self._app.router.add_get("/healthz", self._healthz)
        self._app.router.add_get("/readyz", self._readyz)
        self._paths: list[str] = ["GET /healthz", "GET /readyz"]
        if metrics is not None:
            self._app.router.add_get("/metrics", self._metrics_text)
            self._paths.append("GET /metrics")
        self._runner: web.AppRunner | None = None

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

    async def _readyz(self, request: web.Request) -> web.Response:
        if self._readiness is None:
            return web.json_response({"ready": True})
        try:
            ready, body = await self._readiness()
        except Exception as exc:
            log.warning("readiness.failed: %s", type(exc).__name__)
            return web.json_response({"ready": False, "error": type(exc).__name__}, status=503)
        return web.json_response({"ready": ready, **body}, status=200 if ready else 503)

    async def _metrics_text(self, request: web.Request) -> web.Response:
        assert self._metrics is not None
        body = await self._metrics.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
