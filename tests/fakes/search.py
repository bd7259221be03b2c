"""Fake search APIs on 127.0.0.1: a SearXNG instance's JSON API
(``GET /search?q=…&format=json``: ``{"query", "results": [{"title", "url",
"content", "engine"}]}``) and the Brave Search API (``GET
/res/v1/web/search?q=…&count=N`` with ``X-Subscription-Token``: ``{"web":
{"results": [{"title", "url", "description"}]}}``, matches marked with
``<strong>``; 401 for another key). Every request is recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from aiohttp import web

BRAVE_KEY = "brv-test-0123456789abcdef"
RESULTS = [
    ("Otters return to the Rhine", "https://news.example/otters", "Otters were seen near Basel."),
    ("Eurasian otter", "https://wiki.example/Eurasian_otter", "The Eurasian otter is a mammal."),
    ("Rhine wildlife survey 2026", "https://basel.example/survey", "Fourteen otters counted."),
]


@dataclass
class Request:
    path: str
    query: dict[str, str]
    headers: dict[str, str]


@dataclass
class FakeSearch:
    requests: list[Request] = field(default_factory=list)
    status: int = 200
    """Answer this instead (an outage, a rate limit)."""
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def brave_url(self) -> str:
        return self.base + "/res/v1/web/search"

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_get("/search", self._searxng)
        app.router.add_get("/res/v1/web/search", self._brave)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self._runner = runner
        self.port = runner.addresses[0][1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _record(self, request: web.Request) -> Request:
        found = Request(
            request.path, dict(request.query), {k.lower(): v for k, v in request.headers.items()}
        )
        self.requests.append(found)
        return found

    async def _searxng(self, request: web.Request) -> web.Response:
        found = self._record(request)
        if self.status != 200:
            return web.json_response({"error": "unavailable"}, status=self.status)
        if found.query.get("format") != "json":
            return web.Response(status=403, text="format not allowed")
        results: list[dict[str, Any]] = [
            {"title": t, "url": u, "content": c, "engine": "duckduckgo", "score": 1.0}
            for t, u, c in RESULTS
        ]
        return web.json_response(
            {"query": found.query.get("q", ""), "number_of_results": 0, "results": results}
        )

    async def _brave(self, request: web.Request) -> web.Response:
        found = self._record(request)
        if found.headers.get("x-subscription-token") != BRAVE_KEY:
            return web.json_response(
                {"type": "ErrorResponse", "error": {"code": "SUBSCRIPTION_TOKEN_INVALID"}},
                status=401,
            )
        if self.status != 200:
            return web.json_response({"type": "ErrorResponse"}, status=self.status)
        count = int(found.query.get("count", "20"))
        results = [
            {"title": t, "url": u, "description": c.replace("otter", "<strong>otter</strong>")}
            for t, u, c in RESULTS[:count]
        ]
        return web.json_response({"type": "search", "web": {"type": "search", "results": results}})
