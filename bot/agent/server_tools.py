"""Tools the provider runs within its own call (its web search): what a run
does with their traces in a response.

The model's search and its results arrive inside the response
(`ServerToolUseBlock`, `ServerToolResultBlock`), already read by the model:
nothing for the executor to run. The run records one span per search (query,
results or error), counts what the model read as untrusted (the run's taint
grows, so an external call after it waits for confirmation), and keeps the
citations of the reply as a Sources line of links.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from bot.agent.traces import Span
from bot.llm.types import Block, ServerToolResultBlock, ServerToolUseBlock, TextBlock

MAX_SOURCES = 8


def server_spans(content: Iterable[Block], started_at: datetime) -> list[Span]:
    """A span per provider-run tool call in `content` (its duration is the LLM call's)."""
    blocks = list(content)
    results = {b.tool_use_id: b for b in blocks if isinstance(b, ServerToolResultBlock)}
    spans: list[Span] = []
    for block in blocks:
        if not isinstance(block, ServerToolUseBlock):
            continue
        query = " ".join(str(block.input.get("query", "")).split())[:300]
        result = results.get(block.id)
        if result is None:
            detail, failed = f'search "{query}" → no result in this response', False
        elif result.error is not None:
            detail, failed = f'search "{query}" → error: {result.error}', True
        else:
            detail, failed = f'search "{query}" → {len(result.hits)} results', False
        spans.append(Span("server_tool", block.name, started_at, 0, is_error=failed, detail=detail))
    return spans


def read_results(content: Iterable[Block]) -> bool:
    """Whether the model read results of a provider-run tool (content from elsewhere)."""
    return any(isinstance(b, ServerToolResultBlock) for b in content)


def sources_line(content: Iterable[Block]) -> str:
    """The cited pages of `content` as a Markdown line of links (empty: none),
    each page once, in the order first cited."""
    seen: dict[str, str] = {}
    for block in content:
        if isinstance(block, TextBlock):
            for citation in block.citations:
                if citation.url and citation.url not in seen:
                    seen[citation.url] = " ".join((citation.title or citation.url).split())
    if not seen:
        return ""
    links = [f"[{_label(title)}]({_target(url)})" for url, title in seen.items()]
    more = len(links) - MAX_SOURCES
    shown = ", ".join(links[:MAX_SOURCES]) + (f" and {more} more" if more > 0 else "")
    return f"Sources: {shown}"


def _label(title: str) -> str:
    return title.replace("[", "(").replace("]", ")")[:120]


def _target(url: str) -> str:
    return url.replace(" ", "%20").replace("(", "%28").replace(")", "%29")
