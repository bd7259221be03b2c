"""The Messages API's server-side web search, for the fake (`tests.fakes.anthropic`).

A reply that searched carries, as the real API's does, a ``server_tool_use``
block (``name: "web_search"``, ``input: {"query": …}``), its
``web_search_tool_result`` (the results: title, URL, ``encrypted_content``,
or an error object) and text blocks whose ``citations`` point into those
results (``web_search_result_location``: url, title, cited_text,
``encrypted_index``). Streamed, a server tool call is a
``content_block_start`` with empty input and its ``input_json_delta``s, a
result arrives whole in its ``content_block_start``, and a text block's
citations arrive as ``citations_delta`` events before its text.

What the fake checks of requests that carry them (the API's rules as its
SDK types state them): a server tool is defined by a known ``type`` and its
fixed name; a result follows its own call in the same assistant message;
a citation has every field the API requires.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

SEARCH_TOOL_TYPES = frozenset({"web_search_20250305", "web_search_20260209", "web_search_20260318"})
CITATION_FIELDS = ("type", "url", "title", "cited_text", "encrypted_index")


def opaque(text: str) -> str:
    """Stands in for the API's encrypted strings (the client never reads them)."""
    return base64.b64encode(f"enc:{text}".encode()).decode()


def search_blocks(
    query: str, results: Sequence[tuple[str, str]], *, error: str | None = None
) -> list[dict[str, Any]]:
    """A search call and its result: `results` are (title, url) pairs; `error`
    (e.g. "max_uses_exceeded") answers with the API's error object instead."""
    use_id = f"srvtoolu_{uuid.uuid4().hex[:24]}"
    content: Any
    if error is not None:
        content = {"type": "web_search_tool_result_error", "error_code": error}
    else:
        content = [
            {
                "type": "web_search_result",
                "title": title,
                "url": url,
                "encrypted_content": opaque(f"{title} {url}"),
                "page_age": "2 days ago",
            }
            for title, url in results
        ]
    return [
        {"type": "server_tool_use", "id": use_id, "name": "web_search", "input": {"query": query}},
        {"type": "web_search_tool_result", "tool_use_id": use_id, "content": content},
    ]


def cited(text: str, url: str, title: str, quote: str) -> dict[str, Any]:
    """A text block citing one search result."""
    citation = {
        "type": "web_search_result_location",
        "url": url,
        "title": title,
        "cited_text": quote,
        "encrypted_index": opaque(quote),
    }
    return {"type": "text", "text": text, "citations": [citation]}


def block_events(index: int, block: Mapping[str, Any], chunk_size: int) -> Iterator[dict[str, Any]]:
    """The stream events of a server tool call, its result, or a text block
    with citations (`content_block_start` … its deltas; not the stop)."""
    kind = block.get("type")
    if kind == "server_tool_use":
        start = {**block, "input": {}}
        yield _event("content_block_start", index=index, content_block=start)
        text = json.dumps(block.get("input", {}))
        for piece in ["", *(text[i : i + chunk_size] for i in range(0, len(text), chunk_size))]:
            delta = {"type": "input_json_delta", "partial_json": piece}
            yield _event("content_block_delta", index=index, delta=delta)
    elif kind == "web_search_tool_result":
        yield _event("content_block_start", index=index, content_block=dict(block))
    else:  # text, with its citations first
        yield _event("content_block_start", index=index, content_block={"type": "text", "text": ""})
        for citation in block.get("citations") or ():
            delta = {"type": "citations_delta", "citation": citation}
            yield _event("content_block_delta", index=index, delta=delta)
        text = str(block.get("text", ""))
        for i in range(0, len(text), max(1, chunk_size)):
            delta = {"type": "text_delta", "text": text[i : i + chunk_size]}
            yield _event("content_block_delta", index=index, delta=delta)


def is_server_block(block: Mapping[str, Any]) -> bool:
    return block.get("type") in ("server_tool_use", "web_search_tool_result") or bool(
        block.get("type") == "text" and block.get("citations")
    )


def tool_problem(i: int, tool: Mapping[str, Any]) -> str | None:
    """What the API would say of a server tool's definition (None: fine)."""
    kind = tool.get("type")
    if kind not in SEARCH_TOOL_TYPES:
        return f"tools.{i}.type: unknown tool type {kind!r}"
    if tool.get("name") != "web_search":
        return f"tools.{i}.name: Input should be 'web_search'"
    uses = tool.get("max_uses")
    if uses is not None and (not isinstance(uses, int) or uses < 1):
        return f"tools.{i}.max_uses: Input should be greater than or equal to 1"
    return None


def message_problem(i: int, message: Mapping[str, Any]) -> str | None:
    """What the API would say of the server blocks of one message."""
    content = message.get("content")
    if not isinstance(content, list):
        return None
    calls: set[str] = set()
    for j, block in enumerate(b for b in content if isinstance(b, dict)):
        kind = block.get("type")
        if kind in ("server_tool_use", "web_search_tool_result") and message["role"] != "assistant":
            return f"messages.{i}.content.{j}: `{kind}` is not allowed in `user` messages"
        if kind == "server_tool_use":
            calls.add(str(block.get("id")))
        elif kind == "web_search_tool_result" and block.get("tool_use_id") not in calls:
            return (
                f"messages.{i}.content.{j}: `web_search_tool_result` block must follow its "
                f"`server_tool_use` block ({block.get('tool_use_id')})"
            )
        elif kind == "text":
            for k, citation in enumerate(block.get("citations") or ()):
                missing = [f for f in CITATION_FIELDS if f not in citation]
                if missing:
                    return f"messages.{i}.content.{j}.citations.{k}.{missing[0]}: Field required"
    return None


def _event(name: str, **fields: Any) -> dict[str, Any]:
    return {"type": name, **fields}
