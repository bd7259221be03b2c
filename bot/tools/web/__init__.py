"""The "web" tools: `web_fetch` (behind the SSRF guard) and `web_search`.

`web_tools(settings, environ)` builds what `[web]` asks for: `web_fetch`
unless `[web] fetch = false`, `web_search` when `[web.search] backend` names
one. Both have effect `read` and untrusted output, and are offered from
`[web] min_role` up, to personas whose tools include the "web" module.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx2

from bot.config import WebSettings
from bot.config.web import BRAVE_URL
from bot.errors import ConfigError
from bot.metrics import Metrics
from bot.ports import Tool
from bot.tools.web.client import WebClient
from bot.tools.web.fetch import WebFetch
from bot.tools.web.guard import Guard, Resolver, system_resolver
from bot.tools.web.search import AnthropicSearch, Brave, SearXNG, WebSearch

__all__ = ["WebTools", "web_tools"]


@dataclass
class WebTools:
    tools: list[Tool] = field(default_factory=list)
    _closers: list[WebClient | httpx2.AsyncClient] = field(default_factory=list)

    async def aclose(self) -> None:
        for closer in self._closers:
            await closer.aclose()
        self._closers.clear()


def web_tools(
    settings: WebSettings,
    environ: Mapping[str, str],
    metrics: Metrics | None = None,
    *,
    resolver: Resolver = system_resolver,
    ssl_context: ssl.SSLContext | None = None,
) -> WebTools:
    """The web tools `settings` ask for. `ConfigError` when the search backend's
    key is missing from the environment."""
    search = settings.search
    key = environ.get(search.api_key_env, "").strip()
    if search.backend == "brave" and not key:
        raise ConfigError(
            f"web.search.api_key_env: {search.api_key_env} is not set (the Brave Search API "
            "key; secrets come only from environment variables)"
        )
    made = WebTools()
    if settings.fetch:
        guard = Guard(ports=settings.ports, allow=settings.allowed_pairs(), resolver=resolver)
        client = WebClient(
            guard,
            user_agent=settings.user_agent,
            max_redirects=settings.max_redirects,
            ssl_context=ssl_context,
        )
        made._closers.append(client)
        made.tools.append(WebFetch(settings, client, metrics))
    if search.backend == "anthropic":
        made.tools.append(AnthropicSearch(search, settings.min_role))
    elif search.backend in ("searxng", "brave"):
        http = httpx2.AsyncClient(
            timeout=search.timeout_seconds, headers={"User-Agent": settings.user_agent}
        )
        made._closers.append(http)
        if search.backend == "searxng":
            assert search.url is not None  # the settings' validator
            backend: SearXNG | Brave = SearXNG(http, search.url)
        else:
            backend = Brave(http, search.url or BRAVE_URL, key)
        made.tools.append(WebSearch(backend, search, settings.min_role, metrics))
    return made
