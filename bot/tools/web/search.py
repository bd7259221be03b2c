"""`web_search(query, max_results?)`: titles, URLs and snippets.

The backend is the operator's choice (`[web.search] backend`): a self-hosted
SearXNG (its JSON API), the Brave Search API (key from the environment
variable `api_key_env` names), or the model provider's own server-side search
(`AnthropicSearch`: offered to the model as the provider's tool, run within
the model's call, its results and citations carried in the response; see
`bot.agent.server_tools`). The backend's URL is the operator's setting, so it
does not pass the fetch guard. Results are content from elsewhere: untrusted
output, like a page's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx2
from lxml import html as lxml_html  # type: ignore[import-untyped]

from bot.config import WebSearchSettings
from bot.errors import ToolFailed
from bot.llm.types import ServerTool
from bot.metrics import Metrics
from bot.ports import ToolContext, ToolOutput
from bot.tools.web.guard import Refused
from bot.types import Role

log = logging.getLogger("switchboard.web")

SNIPPET_CHARS = 400
MAX_QUERY_CHARS = 400
DESCRIPTION = (
    "Search the web. Returns result titles, URLs and snippets; fetch a result with "
    "web_fetch to read it."
)


@dataclass(frozen=True, slots=True)
class Hit:
    title: str
    url: str
    snippet: str


class Backend(Protocol):
    name: str

    async def search(self, query: str, count: int) -> list[Hit]: ...


class SearXNG:
    """A SearXNG instance's JSON API (`GET /search?q=…&format=json`; the
    instance must list `json` in its `search.formats`)."""

    name = "searxng"

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self._http = http
        self._url = url.rstrip("/") + "/search"

    async def search(self, query: str, count: int) -> list[Hit]:
        data = await _get_json(self._http, self._url, {"q": query, "format": "json"}, {}, "SearXNG")
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list):
            raise ToolFailed("SearXNG answered without a results list")
        return _hits(results, "content", count)


class Brave:
    """The Brave Search API (`GET /res/v1/web/search`, `X-Subscription-Token`)."""

    name = "brave"

    def __init__(self, http: httpx2.AsyncClient, url: str, key: str) -> None:
        self._http = http
        self._url = url
        self._headers = {"X-Subscription-Token": key, "Accept": "application/json"}

    async def search(self, query: str, count: int) -> list[Hit]:
        params = {"q": query, "count": str(count)}
        data = await _get_json(self._http, self._url, params, self._headers, "Brave Search")
        web = data.get("web") if isinstance(data, dict) else None
        results = web.get("results", []) if isinstance(web, dict) else []
        if not isinstance(results, list):
            raise ToolFailed("Brave Search answered without a results list")
        return _hits(results, "description", count)


async def _get_json(
    http: httpx2.AsyncClient,
    url: str,
    params: Mapping[str, str],
    headers: Mapping[str, str],
    service: str,
) -> Any:
    try:
        response = await http.get(url, params=params, headers=headers)
    except httpx2.TimeoutException:
        raise Refused("timeout", f"{service} did not answer in time") from None
    except httpx2.HTTPError as exc:
        raise ToolFailed(f"{service} could not be reached ({type(exc).__name__})") from None
    if response.status_code in (401, 403):
        raise ToolFailed(
            f"{service} refused the request (HTTP {response.status_code}): check its key"
        )
    if response.status_code == 429:
        raise ToolFailed(f"{service} is rate limiting searches (HTTP 429); try again later")
    if response.status_code >= 400:
        raise ToolFailed(f"{service} answered HTTP {response.status_code}")
    try:
        return response.json()
    except ValueError:
        raise ToolFailed(f"{service} answered something that is not JSON") from None


def _hits(results: Sequence[Any], snippet_key: str, count: int) -> list[Hit]:
    hits: list[Hit] = []
    for item in results:
        if not isinstance(item, dict):
            continue
        url = str(item.get("url") or "").strip()
        if not url.startswith(("http://", "https://")):
            continue
        title = _plain(str(item.get("title") or url))
        hits.append(Hit(title, url, _plain(str(item.get(snippet_key) or ""))[:SNIPPET_CHARS]))
        if len(hits) >= count:
            break
    return hits


def _plain(text: str) -> str:
    """A snippet's text without its markup (Brave marks matches with <strong>)."""
    if "<" in text or "&" in text:
        with contextlib.suppress(Exception):  # not markup after all (lxml raises several kinds)
            text = lxml_html.fragment_fromstring(text, create_parent="div").text_content()
    return " ".join(str(text).split())


class WebSearch:
    """`web_search` over a `Backend` we call."""

    name = "web_search"
    effect = "read"
    trusted_output = False
    description = DESCRIPTION
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to search for"},
            "max_results": {"type": "integer", "description": "At most this many results"},
        },
        "required": ["query"],
    }
    module = "web"

    def __init__(
        self,
        backend: Backend,
        settings: WebSearchSettings,
        min_role: Role,
        metrics: Metrics | None = None,
    ) -> None:
        self._backend = backend
        self._settings = settings
        self._metrics = metrics
        self.min_role = min_role

    def describe(self, args: Mapping[str, Any]) -> str:
        return f"Search the web for {str(args.get('query') or '')[:200]!r}"

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        query = " ".join(str(args.get("query") or "").split())
        if not query:
            raise ToolFailed("query is required")
        if len(query) > MAX_QUERY_CHARS:
            raise ToolFailed(f"the query is too long ({len(query)} characters, at most 400)")
        count = self._settings.max_results
        if args.get("max_results") is not None:
            try:
                count = max(1, min(int(args["max_results"]), count))
            except (TypeError, ValueError):
                raise ToolFailed("max_results must be a number") from None
        try:
            hits = await self._backend.search(query, count)
        except Refused as refused:
            log.info("web.refused tool=web_search rule=%s run=%s", refused.rule, ctx.run_id)
            self._count("timeout" if refused.rule == "timeout" else "refused")
            raise
        except ToolFailed as failed:
            log.info(
                "web.failed tool=web_search backend=%s run=%s: %s",
                self._backend.name,
                ctx.run_id,
                failed,
            )
            self._count("error")
            raise
        self._count("ok")
        trace = f'search "{query[:300]}" ({self._backend.name}) → {len(hits)} results'
        return ToolOutput(_listed(query, hits), trace=trace)

    def _count(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.web_request(self.name, outcome)


def _listed(query: str, hits: Sequence[Hit]) -> str:
    if not hits:
        return f"No results for {query!r}."
    lines = [f"Results for {query!r}:"]
    for number, hit in enumerate(hits, 1):
        lines.append(f"{number}. {hit.title}\n   {hit.url}")
        if hit.snippet:
            lines.append(f"   {hit.snippet}")
    return "\n".join(lines)


class AnthropicSearch:
    """`web_search` as the Anthropic API's own server-side tool: offered to the
    model in its place (`server`), run by the API within the model's call,
    billed by Anthropic per search (at most `max_uses` a call)."""

    name = "web_search"
    effect = "read"
    trusted_output = False
    description = DESCRIPTION
    input_schema: Mapping[str, Any] = {"type": "object", "properties": {}}
    module = "web"

    def __init__(self, settings: WebSearchSettings, min_role: Role) -> None:
        self.provider_tool = ServerTool("web_search", max_uses=settings.max_uses)
        self.min_role = min_role

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        raise ToolFailed("web_search runs on the model provider's side, not here")
