"""`web_fetch(url, max_chars?)`: one page, as text for the model.

Through the guard (`bot.tools.web.guard`, `bot.tools.web.client`): http and
https only, checked addresses and ports, every redirect checked again (at
most `[web] max_redirects`), at most `[web] max_bytes` read (a longer page is
cut there, with a note) and `[web] timeout_seconds` in all. What stops a
fetch on purpose is a `Refused` naming its rule (`refused (rule=loopback):
…`), a deliberate refusal the executor does not retry.

The text is content from elsewhere: the executor marks it as data and the
guard scans it, and a run that has read it is tainted (an external call
after it waits for its owner's confirmation). The effect is `read`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import httpx2

from bot.config import WebSettings
from bot.errors import ToolFailed
from bot.metrics import Metrics
from bot.ports import ToolContext, ToolOutput
from bot.tools.web.client import Opened, WebClient
from bot.tools.web.extract import Extracted, Kind, extract, kind_of
from bot.tools.web.guard import Refused

log = logging.getLogger("switchboard.web")

HEAD_BYTES = 512


class WebFetch:
    name = "web_fetch"
    effect = "read"
    trusted_output = False
    description = (
        "Fetch a web page (http or https) and read it: HTML comes back as its main text "
        "in Markdown with its title and links; plain text and JSON as they are; PDF as "
        "text. Private and local network addresses are refused. Use `max_chars` to read "
        "less of a long page."
    )
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "The page's URL, http:// or https://"},
            "max_chars": {
                "type": "integer",
                "description": "At most this many characters of the page's text",
            },
        },
        "required": ["url"],
    }
    module = "web"

    def __init__(
        self, settings: WebSettings, client: WebClient, metrics: Metrics | None = None
    ) -> None:
        self._settings = settings
        self._client = client
        self._metrics = metrics
        self.min_role = settings.min_role

    def describe(self, args: Mapping[str, Any]) -> str:
        return f"Fetch {str(args.get('url') or '')[:200]}"

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        url = str(args.get("url") or "").strip()
        if not url:
            raise ToolFailed("url is required")
        limit = self._settings.max_chars
        if args.get("max_chars") is not None:
            try:
                limit = max(100, min(int(args["max_chars"]), limit))
            except (TypeError, ValueError):
                raise ToolFailed("max_chars must be a number") from None
        started = time.perf_counter()
        try:
            text, trace, outcome = await self._fetch(url, limit)
        except Refused as refused:
            outcome = _outcome(refused)
            log.info(
                "web.refused tool=web_fetch rule=%s run=%s: %s",
                refused.rule,
                ctx.run_id,
                refused.why,
            )
            self._count(outcome)
            raise
        except ToolFailed as failed:
            log.info("web.failed tool=web_fetch run=%s: %s", ctx.run_id, failed)
            self._count("error")
            raise
        self._count(outcome)
        ms = round((time.perf_counter() - started) * 1000)
        log.debug("web.fetched run=%s %s (%d ms)", ctx.run_id, trace, ms)
        return ToolOutput(text, trace=trace)

    def _count(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.web_request(self.name, outcome)

    async def _fetch(self, url: str, limit: int) -> tuple[str, str, str]:
        """The text for the model, the span's line, the metrics outcome."""
        settings = self._settings
        try:
            async with asyncio.timeout(settings.timeout_seconds):
                async with self._client.open(url, settings.timeout_seconds) as opened:
                    body, cut, kind = await self._body(opened)
        except TimeoutError:
            raise Refused(
                "timeout", f"no complete answer within {settings.timeout_seconds:g} s"
            ) from None
        except httpx2.TimeoutException:
            raise Refused("timeout", "the server did not answer in time") from None
        except httpx2.HTTPError as exc:
            raise ToolFailed(f"could not fetch {url[:200]} ({_reason(exc)})") from None
        extracted = await asyncio.to_thread(
            extract, kind, body, url=opened.url, charset=opened.response.charset_encoding, cut=cut
        )
        text = self._shown(opened, extracted, len(body), cut, limit)
        trace = (
            f"GET {opened.url} → {opened.status} {opened.content_type or '?'}, {len(body):,} bytes"
        )
        if opened.redirects:
            trace += f" (from {opened.redirects[0]}, {len(opened.redirects)} redirects)"
        if cut:
            trace += ", cut at the size cap"
        return text, trace[:1000], "too_large" if cut else "ok"

    async def _body(self, opened: Opened) -> tuple[bytes, bool, Kind]:
        """The body, whether it was cut, and how it is read; refused early by
        its status, its content type or its declared size."""
        max_bytes = self._settings.max_bytes
        if opened.status >= 400:
            phrase = opened.response.reason_phrase
            raise ToolFailed(f"HTTP {opened.status} {phrase} from {opened.url[:200]}")
        declared = opened.content_type
        kind = kind_of(declared) if declared else None
        if declared and kind is None:
            raise Refused("content_type", f"{declared} is not read (only HTML, text, JSON and PDF)")
        length = opened.declared_length
        if kind == "pdf" and length is not None and length > max_bytes:
            raise Refused("too_large", f"the PDF is {length:,} bytes, over the {max_bytes:,} cap")
        body, cut = await opened.read(max_bytes)
        if kind is None:
            kind = kind_of("", body[:HEAD_BYTES])
            if kind is None:
                raise Refused("content_type", "the page has no content type and is not text")
        return body, cut, kind

    def _shown(self, opened: Opened, page: Extracted, size: int, cut: bool, limit: int) -> str:
        lines = [f"URL: {opened.url}"]
        if opened.redirects:
            lines[0] += f" (redirected from {opened.redirects[0]})"
        if page.title:
            lines.append(f"Title: {page.title}")
        about = f"Content-Type: {opened.content_type or 'unknown'}, {size:,} bytes"
        if cut:
            about += (
                f" — only the first {self._settings.max_bytes:,} bytes were read "
                "(the page is larger: it was cut at the size cap)"
            )
        lines.append(about)
        text = page.text or "[no text found on the page]"
        if len(text) > limit:
            text = (
                f"{text[:limit]}\n\n[… cut at {limit:,} of {len(text):,} characters; fetch "
                "again with a larger max_chars to read more]"
            )
        return "\n".join(lines) + "\n\n" + text


def _outcome(refused: Refused) -> str:
    if refused.rule in ("timeout", "too_large"):
        return refused.rule
    return "refused"


def _reason(exc: httpx2.HTTPError) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__
