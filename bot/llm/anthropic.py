"""The Anthropic Messages API behind the `Provider` protocol.

This module (with `bot.llm.anthropic_search`, the server-side web search's
blocks, and `bot.llm.anthropic_errors`, its failures as ours) is the only
code in the project that imports `anthropic`. It maps the
neutral types of `bot.llm.types` to API parameters (placing prompt-cache
breakpoints), always streams (`client.messages.stream`), and turns every SDK
failure into a `bot.errors.ProviderError` subclass built only from the status
code, the error type and the API's own message, so the key never leaks.

Notes on the SDK (2.x):
- the API key is sent as ``Authorization: Bearer …``, not ``x-api-key``;
- `messages.stream()` has no ``temperature`` argument any more, so it goes in
  ``extra_body``;
- an ``error`` event inside a stream is raised as a plain `APIStatusError`
  carrying the stream's HTTP status (200), so errors are classified by the
  API error type as well as by status code;
- transport errors while reading a stream surface as raw `httpx2` exceptions
  (the aiohttp transport maps aiohttp's own to them).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, assert_never, cast

import anthropic
import httpx2
from anthropic.types import (
    CacheControlEphemeralParam,
    ContentBlockParam,
    DocumentBlockParam,
    ImageBlockParam,
    MessageParam,
    TextBlockParam,
    ToolParam,
    ToolResultBlockParam,
    ToolUnionParam,
    ToolUseBlockParam,
)

from bot.errors import (
    ProviderAuthError,
    ProviderBadRequest,
    ProviderEndpoint,
    ProviderError,
    ProviderUnavailable,
)
from bot.llm.anthropic_errors import map_error
from bot.llm.anthropic_search import (
    citation_params,
    citations_of,
    search_result,
    search_tool_param,
    server_result_param,
    server_use_param,
)
from bot.llm.caching import breakpoints, is_blank
from bot.llm.capabilities import Feature
from bot.llm.failures import public_url
from bot.llm.types import (
    Block,
    ChatMessage,
    DocumentBlock,
    ImageBlock,
    LLMRequest,
    LLMResponse,
    ServerToolResultBlock,
    ServerToolUseBlock,
    TextBlock,
    TextCallback,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from bot.tls import client_context
from bot.types import Usage

log = logging.getLogger("switchboard.llm")


def _pin_stream_snapshot_type() -> object:
    """The SDK's stream accumulator evaluates `ParsedMessage[ResponseFormatT]`
    at every message start. pydantic caches generic parametrisations weakly
    (2.13), so once the garbage collector frees that class it is built again:
    ~1.5 ms of CPU on a call. A reference held here keeps it cached. Internal
    names of the SDK: if they move, nothing is pinned and nothing breaks."""
    try:
        from anthropic.lib._parse._response import ResponseFormatT
        from anthropic.types.parsed_message import ParsedMessage

        return ParsedMessage[ResponseFormatT]  # type: ignore[valid-type]
    except Exception:  # pragma: no cover - a future SDK layout
        return None


_STREAM_SNAPSHOT_TYPE = _pin_stream_snapshot_type()

_EPHEMERAL: CacheControlEphemeralParam = {"type": "ephemeral"}
_ImageMediaType = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
_IMAGE_MEDIA_TYPES: frozenset[str] = frozenset(
    ("image/jpeg", "image/png", "image/gif", "image/webp")
)


DEFAULT_POOL = 1000
"""HTTP connections to the API at most, when not given (the SDK's default)."""


class AnthropicProvider:
    """`Provider` over one reused `anthropic.AsyncAnthropic` client.

    `api_key=None` lets the SDK find credentials itself (``ANTHROPIC_API_KEY``
    and friends); `base_url=None` keeps its ``ANTHROPIC_BASE_URL`` handling.
    `max_retries` is the SDK's own retry budget (429, 5xx, 529, connection
    errors; it honours ``retry-after``) before an error reaches the caller.
    `max_connections` sizes the HTTP connection pool, so that many calls in
    flight never queue for a connection; None keeps the SDK's default size
    (1,000). `http_client` replaces that transport and pool altogether
    (`bot.llm.warm_up` answers in memory).

    HTTP goes through the SDK's aiohttp transport (`DefaultAioHttpClient`),
    not its default httpx one: httpcore's pool checks every pooled connection
    (two system calls each) on every request and every response closed, so
    with hundreds of calls in flight the pool's bookkeeping grew with the
    square of the calls (1,000 DMs at once: ~15% of the service's CPU, and
    more the larger the burst). aiohttp's pool takes and returns a connection
    without looking at the others.
    """

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        max_connections: int | None = None,
        http_client: httpx2.AsyncClient | None = None,
        url_setting: str = "llm.base_url",
        key_env: str = "ANTHROPIC_API_KEY",
    ) -> None:
        """`url_setting` and `key_env` name, in the failures people are told
        of, the setting that chose the URL and the variable that holds the key."""
        self._api_key = api_key
        # The SDK's own client class keeps its defaults (timeouts, redirects,
        # proxies from the environment); only the transport and the pool change.
        if http_client is None:
            size = DEFAULT_POOL if max_connections is None else max_connections
            http_client = anthropic.DefaultAioHttpClient(
                limits=httpx2.Limits(max_connections=size, max_keepalive_connections=size),
                verify=client_context(),  # the process's one: loading CAs is slow
            )
        try:
            if base_url is None:
                self._client = anthropic.AsyncAnthropic(
                    api_key=api_key, max_retries=max_retries, timeout=timeout,
                    http_client=http_client,
                )  # fmt: skip
            else:
                self._client = anthropic.AsyncAnthropic(
                    api_key=api_key, base_url=base_url, max_retries=max_retries,
                    timeout=timeout, http_client=http_client,
                )  # fmt: skip
        except anthropic.CredentialsError as exc:  # a broken credentials profile on disk
            raise ProviderAuthError(_credentials_message(exc)) from exc
        url = public_url(str(self._client.base_url))
        self.endpoint = ProviderEndpoint(url, url_setting, key_env)

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse:
        """Stream one completion, calling `on_text` with each text delta."""
        try:
            return await self._complete(request, on_text)
        except ProviderError as exc:  # where the call went, for its wording (bot.llm.failures)
            exc.endpoint, exc.model = self.endpoint, request.model
            raise

    async def _complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse:
        self._check_credentials()
        params = build_params(request)
        started = time.monotonic()
        try:
            async with self._client.messages.stream(
                model=request.model,
                max_tokens=request.max_tokens,
                messages=params.messages,
                system=params.system if params.system else anthropic.omit,
                tools=params.tools if params.tools else anthropic.omit,
                extra_body=params.extra_body or None,
                timeout=request.timeout if request.timeout is not None else anthropic.not_given,
            ) as stream:
                finished = False
                async for event in stream:
                    if event.type == "text":
                        if on_text is not None and event.text:
                            await on_text(event.text)
                    elif event.type == "message_stop":
                        finished = True
                if not finished:
                    raise ProviderUnavailable(
                        "Anthropic API stream ended before the message was complete"
                    )
                message = await stream.get_final_message()
        except anthropic.APIError as exc:
            error = self._map_error(exc)
            log.debug("anthropic call failed after %.2fs: %s", time.monotonic() - started, error)
            raise error from exc
        except anthropic.CredentialsError as exc:
            raise ProviderAuthError(_credentials_message(exc)) from exc
        except httpx2.TimeoutException as exc:
            raise ProviderUnavailable("Anthropic API request timed out") from exc
        except httpx2.RequestError as exc:
            raise ProviderUnavailable(
                f"connection to the Anthropic API failed ({type(exc).__name__})"
            ) from exc

        response = _to_response(message)
        log.debug(
            "anthropic call model=%s stop_reason=%s input=%d output=%d cache_read=%d "
            "cache_write=%d duration=%.2fs",
            response.model,
            response.stop_reason,
            response.usage.input_tokens,
            response.usage.output_tokens,
            response.usage.cache_read_tokens,
            response.usage.cache_write_tokens,
            time.monotonic() - started,
        )
        return response

    def supports(self, model: str, feature: Feature) -> bool:
        """Every current Claude model takes images, PDF documents and tools."""
        return True

    async def aclose(self) -> None:
        await self._client.close()

    def _check_credentials(self) -> None:
        client = self._client
        if client.api_key is None and client.auth_token is None and client.credentials is None:
            raise ProviderAuthError(
                "no Anthropic API key configured (set ANTHROPIC_API_KEY or the provider api_key)"
            )

    def _map_error(self, exc: anthropic.APIError) -> ProviderError:
        error = map_error(exc)
        key = self._api_key
        if key and key in str(error):  # paranoia: the API never echoes it, a proxy might
            redacted = str(error).replace(key, "[redacted]")
            error.args = (redacted, *error.args[1:])
        return error


def _credentials_message(exc: anthropic.CredentialsError) -> str:
    return f"Anthropic credentials could not be loaded ({type(exc).__name__})"


# --- request mapping ---------------------------------------------------------


@dataclass(slots=True)
class ApiParams:
    """The request parts that need mapping; the rest go to the SDK as they are."""

    messages: list[MessageParam]
    system: list[TextBlockParam] = field(default_factory=list)
    tools: list[ToolUnionParam] = field(default_factory=list)
    extra_body: dict[str, object] = field(default_factory=dict)


def build_params(request: LLMRequest) -> ApiParams:
    """Map an `LLMRequest` to API parameters, placing cache breakpoints.

    With `request.cache`, breakpoint candidates are, by priority: the last
    content block of the last message, the last block of the stored history
    (`history_end`), the last tool, and each system block marked `cache` (or
    the last system block when none is marked), latest first. A candidate whose
    prefix (tools → system → messages) is estimated below `cache_min_tokens` is
    dropped, as the API would not cache it; at most four are kept. `volatile`
    text is appended to a final user message after its breakpoint. Blank text
    blocks are left out of messages (the API rejects them) unless a message
    would be empty.
    """
    system_blocks = [b for b in request.system if b.text.strip()]
    messages = [_clean(m) for m in request.messages]
    points = breakpoints(request, system_blocks, messages) if request.cache else set()

    tools = [
        _tool_param(spec, cache=("tool", i, 0) in points) for i, spec in enumerate(request.tools)
    ]

    system: list[TextBlockParam] = []
    for i, block in enumerate(system_blocks):
        param: TextBlockParam = {"type": "text", "text": block.text}
        if ("system", i, 0) in points:
            param["cache_control"] = _EPHEMERAL
        system.append(param)

    api_messages: list[MessageParam] = []
    for mi, message in enumerate(messages):
        content = [
            _block_param(block, cache=("message", mi, bi) in points)
            for bi, block in enumerate(message.content)
        ]
        if message.role == "user":
            if mi == len(messages) - 1 and request.volatile.strip():
                content.append({"type": "text", "text": request.volatile})
            api_messages.append({"role": "user", "content": content})
        else:
            api_messages.append({"role": "assistant", "content": content})

    extra_body: dict[str, object] = {}
    if request.temperature is not None:
        extra_body["temperature"] = request.temperature
    if request.tool_choice is not None and request.tools:
        extra_body["tool_choice"] = {"type": request.tool_choice}
    return ApiParams(messages=api_messages, system=system, tools=tools, extra_body=extra_body)


def _tool_param(spec: ToolSpec, *, cache: bool) -> ToolUnionParam:
    if spec.server is not None:  # the API's own web search
        return search_tool_param(spec.server, cache=cache)
    tool: ToolParam = {
        "name": spec.name,
        "description": spec.description,
        "input_schema": dict(spec.input_schema),
    }
    if cache:
        tool["cache_control"] = _EPHEMERAL
    return tool


def _clean(message: ChatMessage) -> ChatMessage:
    kept = tuple(b for b in message.content if not is_blank(b))
    if not kept or len(kept) == len(message.content):
        return message
    return ChatMessage(role=message.role, content=kept)


def _block_param(block: Block, *, cache: bool) -> ContentBlockParam:
    if isinstance(block, TextBlock):
        text: TextBlockParam = {"type": "text", "text": block.text}
        if block.citations:
            text["citations"] = citation_params(block.citations)
        if cache:
            text["cache_control"] = _EPHEMERAL
        return text
    if isinstance(block, ImageBlock):
        image = _image_param(block)
        if cache:
            image["cache_control"] = _EPHEMERAL
        return image
    if isinstance(block, DocumentBlock):
        if block.media_type != "application/pdf":
            raise ProviderBadRequest(f"unsupported document type for Anthropic: {block.media_type}")
        document: DocumentBlockParam = {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": block.data_b64},
        }
        if block.name:
            document["title"] = block.name
        if cache:
            document["cache_control"] = _EPHEMERAL
        return document
    if isinstance(block, ToolUseBlock):
        use: ToolUseBlockParam = {
            "type": "tool_use",
            "id": block.id,
            "name": block.name,
            "input": dict(block.input),
        }
        if cache:
            use["cache_control"] = _EPHEMERAL
        return use
    if isinstance(block, ToolResultBlock):
        result: ToolResultBlockParam = {
            "type": "tool_result",
            "tool_use_id": block.tool_use_id,
            "content": block.content,
        }
        if block.images:  # text first, then the tool's images
            parts: list[TextBlockParam | ImageBlockParam] = []
            if block.content.strip():
                parts.append({"type": "text", "text": block.content})
            parts += [_image_param(image) for image in block.images]
            result["content"] = parts
        if block.is_error:
            result["is_error"] = True
        if cache:
            result["cache_control"] = _EPHEMERAL
        return result
    if isinstance(block, ServerToolUseBlock):
        return server_use_param(block, cache=cache)
    if isinstance(block, ServerToolResultBlock):
        return server_result_param(block, cache=cache)
    assert_never(block)


def _image_param(block: ImageBlock) -> ImageBlockParam:
    if block.media_type not in _IMAGE_MEDIA_TYPES:
        raise ProviderBadRequest(f"unsupported image type for Anthropic: {block.media_type}")
    return {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": cast(_ImageMediaType, block.media_type),
            "data": block.data_b64,
        },
    }


# --- response mapping --------------------------------------------------------


def _to_response(message: anthropic.types.Message) -> LLMResponse:
    content: list[Block] = []
    for block in message.content:
        if block.type == "text":
            content.append(TextBlock(text=block.text, citations=citations_of(block)))
        elif block.type == "tool_use":
            raw = block.input
            args: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
            content.append(ToolUseBlock(id=block.id, name=block.name, input=args))
        elif block.type == "server_tool_use":
            raw = block.input
            server_args: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
            content.append(ServerToolUseBlock(id=block.id, name=block.name, input=server_args))
        elif block.type == "web_search_tool_result":
            content.append(search_result(block))
        else:
            log.debug("ignoring %s content block from the API", block.type)
    usage = message.usage
    return LLMResponse(
        content=tuple(content),
        stop_reason=message.stop_reason or "end_turn",
        usage=Usage(
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
            cache_read_tokens=usage.cache_read_input_tokens or 0,
            cache_write_tokens=usage.cache_creation_input_tokens or 0,
        ),
        model=str(message.model),
    )
