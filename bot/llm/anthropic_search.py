"""The Messages API's server-side web search, mapped for `bot.llm.anthropic`.

The model searches within its own call: the request offers the API's tool
(`WEB_SEARCH_TOOL`) where a `ToolSpec` has `server`; the response carries the
calls (``server_tool_use``), their results (``web_search_tool_result``: pages
with encrypted content, or an error object) and text blocks with citations
(``web_search_result_location``). They become the neutral
`ServerToolUseBlock`, `ServerToolResultBlock` and `Citation`, and go back to
the API as they came when the turn goes on (a paused turn, a tool call after
a search).
"""

from __future__ import annotations

from typing import Literal, cast

import anthropic
from anthropic.types import (
    CacheControlEphemeralParam,
    CitationWebSearchResultLocationParam,
    ServerToolUseBlockParam,
    WebSearchTool20250305Param,
    WebSearchToolResultBlockParam,
)

from bot.llm.types import Citation, ServerTool, ServerToolResultBlock, ServerToolUseBlock

WEB_SEARCH_TOOL: Literal["web_search_20250305"] = "web_search_20250305"
"""The tool's version: the basic one, offered on every current model
(web_search_20260209 adds dynamic filtering on some models, through the code
execution tool)."""

_EPHEMERAL: CacheControlEphemeralParam = {"type": "ephemeral"}


def search_tool_param(server: ServerTool, *, cache: bool) -> WebSearchTool20250305Param:
    search: WebSearchTool20250305Param = {"type": WEB_SEARCH_TOOL, "name": "web_search"}
    if server.max_uses is not None:
        search["max_uses"] = server.max_uses
    if cache:
        search["cache_control"] = _EPHEMERAL
    return search


def server_use_param(block: ServerToolUseBlock, *, cache: bool) -> ServerToolUseBlockParam:
    use: ServerToolUseBlockParam = {
        "type": "server_tool_use",
        "id": block.id,
        "name": cast(Literal["web_search"], block.name),
        "input": dict(block.input),
    }
    if cache:
        use["cache_control"] = _EPHEMERAL
    return use


def server_result_param(
    block: ServerToolResultBlock, *, cache: bool
) -> WebSearchToolResultBlockParam:
    found: WebSearchToolResultBlockParam = {
        "type": "web_search_tool_result",
        "tool_use_id": block.tool_use_id,
        "content": block.payload,  # as it came: the pages' encrypted content
    }
    if cache:
        found["cache_control"] = _EPHEMERAL
    return found


def citation_params(citations: tuple[Citation, ...]) -> list[CitationWebSearchResultLocationParam]:
    return [
        {
            "type": "web_search_result_location",
            "url": c.url,
            "title": c.title,
            "cited_text": c.cited_text,
            "encrypted_index": c.ref,
        }
        for c in citations
    ]


def citations_of(block: anthropic.types.TextBlock) -> tuple[Citation, ...]:
    """A text block's citations of search results (others are not kept)."""
    return tuple(
        Citation(c.url, c.title, c.cited_text, c.encrypted_index)
        for c in block.citations or ()
        if c.type == "web_search_result_location"
    )


def search_result(block: anthropic.types.WebSearchToolResultBlock) -> ServerToolResultBlock:
    """The block kept whole (sent back as it came), with what we may read of it."""
    payload = block.model_dump(mode="json", exclude_none=True)["content"]
    if isinstance(block.content, list):
        hits = tuple((r.title, r.url) for r in block.content)
        return ServerToolResultBlock(block.tool_use_id, "web_search", payload, hits)
    error = str(block.content.error_code)
    return ServerToolResultBlock(block.tool_use_id, "web_search", payload, error=error)
