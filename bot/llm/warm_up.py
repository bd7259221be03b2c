"""Build, before the first message, what the Anthropic SDK builds lazily on
its first streamed reply.

The SDK's response and stream-event models are pydantic models whose schemas
are completed on first use. The first streamed reply of a process paid for
all of them at once: ~180 ms of CPU on this project's 2-core machine (more on
a slow day), inside the event loop, so every other message, webhook and
acknowledgement waited behind the first model call after a start. `warm_up`
makes one streamed call, a text block and a tool use, through
`AnthropicProvider.complete` (the real SDK, parsing and accumulating the
events as it does for the API), answered in memory by an `httpx2`
`MockTransport`: no socket is opened. It runs in an event loop of its own, so
call it from a worker thread (`bot.app.service.import_provider`); once it
returned, the models are complete for every client of the process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import httpx2

from bot.llm.anthropic import AnthropicProvider
from bot.llm.types import ChatMessage, LLMRequest, TextBlock, ToolSpec

log = logging.getLogger("switchboard.llm")

_MODEL = "warm-up"
_NOWHERE = "http://127.0.0.1:9"
"""The base URL of the warm-up's client: never reached (the transport answers
in memory), and were it ever, the discard port of this machine."""


def _event(name: str, **data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n"


def _stream() -> bytes:
    """A streamed answer as the Messages API sends it: text, then a tool use."""
    usage = {"input_tokens": 1, "output_tokens": 1}
    message: dict[str, Any] = {
        "id": "msg_warm_up", "type": "message", "role": "assistant", "model": _MODEL,
        "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage,
    }  # fmt: skip
    tool = {"type": "tool_use", "id": "toolu_warm_up", "name": "warm_up", "input": {}}
    return "".join(
        (
            _event("message_start", message=message),
            _event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
            _event("content_block_delta", index=0, delta={"type": "text_delta", "text": "ok"}),
            _event("content_block_stop", index=0),
            _event("content_block_start", index=1, content_block=tool),
            _event(
                "content_block_delta",
                index=1,
                delta={"type": "input_json_delta", "partial_json": '{"a": 1}'},
            ),
            _event("content_block_stop", index=1),
            _event(
                "message_delta",
                delta={"stop_reason": "tool_use", "stop_sequence": None},
                usage={"output_tokens": 2},
            ),
            _event("message_stop"),
        )
    ).encode()


def _answer(_request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=_stream())


async def _call() -> None:
    provider = AnthropicProvider(
        api_key="warm-up",
        base_url=_NOWHERE,
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(_answer)),
    )
    request = LLMRequest(
        model=_MODEL,
        messages=(ChatMessage("user", (TextBlock("hi"),)),),
        tools=(ToolSpec("warm_up", "a tool", {"type": "object", "properties": {}}),),
    )

    async def on_text(_text: str) -> None:
        return None

    try:
        await provider.complete(request, on_text)
    finally:
        await provider.aclose()


def warm_up() -> None:
    """One streamed call answered in memory (see the module's docstring). A
    failure is logged and ignored: the first real call then builds what this
    did not."""
    started = time.monotonic()
    try:
        asyncio.run(_call())
    except Exception as exc:
        log.warning("llm.warm_up_failed %s: %s", type(exc).__name__, exc)
        return
    log.debug("llm.warmed_up in %.0f ms", (time.monotonic() - started) * 1000)
