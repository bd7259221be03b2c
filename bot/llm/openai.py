"""OpenAI Chat Completions behind the `Provider` protocol: OpenAI itself and
every server that speaks its API (OpenRouter, Groq, vLLM, Ollama, LM Studio).

The only code that imports `openai` (loaded when a provider of kind "openai"
is first used, so a start without one never pays for it). It maps the
neutral types of `bot.llm.types` both ways: the system prompt becomes the
first message, tool definitions functions, tool calls the assistant's
`tool_calls` and tool results `tool` messages (with the images a tool
returned in a user message after them), images data URLs; documents go as
their text (the API takes no PDFs). Calls always stream and ask for usage
(`stream_options.include_usage`), so every call's tokens are charged;
cached prompt tokens count as cache reads. Every SDK failure becomes a
`bot.errors.ProviderError` built from the status and the API's own message,
never the key.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
from openai.types.chat import ChatCompletionChunk

from bot.errors import (
    ContextWindowExceeded,
    ModelNotFound,
    Overloaded,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderEndpoint,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
    ProviderUnreachable,
)
from bot.llm.capabilities import Feature
from bot.llm.failures import public_url
from bot.llm.retry_after import retry_after
from bot.llm.types import (
    Block,
    ChatMessage,
    DocumentBlock,
    ImageBlock,
    LLMRequest,
    LLMResponse,
    ServerToolResultBlock,
    TextBlock,
    TextCallback,
    ToolResultBlock,
    ToolUseBlock,
)
from bot.types import Usage

log = logging.getLogger("switchboard.llm")

STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
_CONTEXT_CODES = ("context_length_exceeded", "string_above_max_length")
_TAKES = {"images": True, "documents": False, "tools": True}
NO_KEY = "none"
"""Sent when a provider has no key (a local server): the SDK insists on one."""


class OpenAIProvider:
    """`Provider` over one reused `openai.AsyncOpenAI` client. `label` names
    the provider in errors ("openrouter"); `max_completion_tokens` sends the
    output cap under that name (OpenAI's own API) instead of `max_tokens`
    (what every compatible server takes)."""

    def __init__(
        self,
        *,
        label: str,
        api_key: str | None,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        max_connections: int | None = None,
        url_setting: str = "base_url",
        key_env: str = "(no key)",
    ) -> None:
        """`url_setting` and `key_env` name, in the failures people are told
        of, the setting that chose the URL and the variable that holds the key."""
        self.label = label
        self._api_key = api_key
        size = 1000 if max_connections is None else max_connections
        self._client = openai.AsyncOpenAI(
            api_key=api_key or NO_KEY,
            base_url=base_url,
            max_retries=max_retries,
            timeout=timeout,
            http_client=openai.DefaultAioHttpClient(
                limits=httpx2.Limits(max_connections=size, max_keepalive_connections=size)
            ),
        )
        self._max_completion_tokens = base_url is None or "api.openai.com" in base_url
        url = public_url(str(self._client.base_url))
        self.endpoint = ProviderEndpoint(url, url_setting, key_env)

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse:
        try:
            return await self._complete(request, on_text)
        except ProviderError as exc:  # where the call went, for its wording (bot.llm.failures)
            exc.endpoint, exc.model = self.endpoint, request.model
            raise

    async def _complete(self, request: LLMRequest, on_text: TextCallback | None) -> LLMResponse:
        params = build_params(request)
        cap = "max_completion_tokens" if self._max_completion_tokens else "max_tokens"
        started = time.monotonic()
        reply = _Reply()
        try:
            stream = await self._client.chat.completions.create(
                model=request.model,
                messages=params["messages"],
                stream=True,
                stream_options={"include_usage": True},
                timeout=request.timeout if request.timeout is not None else openai.not_given,
                extra_body={cap: request.max_tokens, **params["extra"]},
            )
            async for chunk in stream:
                text = reply.add(chunk)
                if text and on_text is not None:
                    await on_text(text)
        except openai.APIError as exc:
            raise self._redacted(map_error(exc, self.label)) from exc
        except httpx2.TimeoutException as exc:
            raise ProviderUnavailable(f"{self.label} API request timed out") from exc
        except httpx2.RequestError as exc:
            raise ProviderUnreachable(
                f"connection to the {self.label} API failed ({type(exc).__name__})"
            ) from exc
        if reply.finish is None:
            raise ProviderUnavailable(
                f"{self.label} API stream ended before the reply was complete"
            )
        response = reply.response(request.model)
        log.debug(
            "openai call provider=%s model=%s stop_reason=%s input=%d output=%d cache_read=%d "
            "duration=%.2fs",
            self.label,
            response.model,
            response.stop_reason,
            response.usage.input_tokens,
            response.usage.output_tokens,
            response.usage.cache_read_tokens,
            time.monotonic() - started,
        )
        return response

    def supports(self, model: str, feature: Feature) -> bool:
        """Chat Completions carries images and tools, not PDF documents."""
        return _TAKES[feature]

    async def aclose(self) -> None:
        await self._client.close()

    def _redacted(self, error: ProviderError) -> ProviderError:
        key = self._api_key
        if key and key in str(error):
            error.args = (str(error).replace(key, "[redacted]"), *error.args[1:])
        return error


# --- request mapping ---------------------------------------------------------


def build_params(request: LLMRequest) -> dict[str, Any]:
    """The request's messages (system first), tools and options as the API takes them."""
    messages: list[dict[str, Any]] = []
    system = "\n\n".join(b.text for b in request.system if b.text.strip())
    if system:
        messages.append({"role": "system", "content": system})
    last = len(request.messages) - 1
    for i, message in enumerate(request.messages):
        volatile = request.volatile if i == last and message.role == "user" else ""
        messages += _messages(message, volatile.strip() and volatile)
    extra: dict[str, Any] = {}
    tools = [_tool(spec.name, spec.description, spec.input_schema) for spec in request.tools
             if spec.server is None]  # fmt: skip
    if tools:
        extra["tools"] = tools
        if request.tool_choice is not None:
            extra["tool_choice"] = request.tool_choice
    if request.temperature is not None:
        extra["temperature"] = request.temperature
    return {"messages": messages, "extra": extra}


def _tool(name: str, description: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": dict(schema)},
    }


def _messages(message: ChatMessage, volatile: str) -> list[dict[str, Any]]:
    if message.role == "assistant":
        text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
        calls = [
            {
                "id": b.id,
                "type": "function",
                "function": {"name": b.name, "arguments": json.dumps(dict(b.input))},
            }
            for b in message.content
            if isinstance(b, ToolUseBlock)
        ]
        out: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            out["tool_calls"] = calls
        return [out]
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            content = block.content if not block.is_error else f"Error: {block.content}"
            results.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
            parts += [_image(image) for image in block.images]
        else:
            parts += _user_part(block)
    if volatile:
        parts.append({"type": "text", "text": volatile})
    if parts:
        results.append({"role": "user", "content": parts})
    return results


def _user_part(block: Block) -> list[dict[str, Any]]:
    if isinstance(block, TextBlock):
        return [{"type": "text", "text": block.text}] if block.text.strip() else []
    if isinstance(block, ImageBlock):
        return [_image(block)]
    if isinstance(block, DocumentBlock):
        return [{"type": "text", "text": block.fallback.text}]
    if isinstance(block, ServerToolResultBlock):  # another provider's search: its hits
        hits = "\n".join(f"- {title}: {url}" for title, url in block.hits)
        return [{"type": "text", "text": hits}] if hits else []
    return []


def _image(block: ImageBlock) -> dict[str, Any]:
    url = f"data:{block.media_type};base64,{block.data_b64}"
    return {"type": "image_url", "image_url": {"url": url}}


# --- response mapping --------------------------------------------------------


@dataclass(slots=True)
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Reply:
    """A streamed reply, put together from its chunks."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str = ""

    def add(self, chunk: ChatCompletionChunk) -> str:
        """Take one chunk in; the text it adds."""
        self.model = chunk.model or self.model
        if chunk.usage is not None:
            cached = 0
            details = chunk.usage.prompt_tokens_details
            if details is not None and details.cached_tokens:
                cached = details.cached_tokens
            self.usage = Usage(
                input_tokens=max((chunk.usage.prompt_tokens or 0) - cached, 0),
                output_tokens=chunk.usage.completion_tokens or 0,
                cache_read_tokens=cached,
            )
        added = ""
        for choice in chunk.choices[:1]:
            delta = choice.delta
            if delta.content:
                self.text.append(delta.content)
                added += delta.content
            for call in delta.tool_calls or ():
                entry = self.calls.setdefault(call.index, _Call())
                if call.id:
                    entry.id = call.id
                if call.function is not None:
                    entry.name += call.function.name or ""
                    entry.arguments.append(call.function.arguments or "")
            if choice.finish_reason:
                self.finish = choice.finish_reason
        return added

    def response(self, model: str) -> LLMResponse:
        content: list[Block] = []
        text = "".join(self.text)
        if text:
            content.append(TextBlock(text))
        for index in sorted(self.calls):
            call = self.calls[index]
            content.append(
                ToolUseBlock(call.id or f"call_{index}", call.name, _arguments(call.arguments))
            )
        stop = STOP_REASONS.get(self.finish or "stop", "end_turn")
        if self.calls and stop == "end_turn":  # some servers say "stop" after a call
            stop = "tool_use"
        return LLMResponse(tuple(content), stop, self.usage, self.model or model)


def _arguments(parts: list[str]) -> Mapping[str, Any]:
    raw = "".join(parts).strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {"_raw_arguments": raw}  # the tool's schema check answers the model
    return value if isinstance(value, dict) else {"value": value}


# --- error mapping -----------------------------------------------------------


def map_error(exc: openai.APIError, label: str) -> ProviderError:
    """Translate an SDK error into our tree. Messages hold no request data."""
    if isinstance(exc, openai.APITimeoutError):
        return ProviderUnavailable(f"{label} API request timed out")
    if isinstance(exc, openai.APIConnectionError):
        return ProviderUnreachable(f"could not connect to the {label} API")
    if not isinstance(exc, openai.APIStatusError):
        return ProviderError(f"unexpected response from the {label} API ({type(exc).__name__})")
    status = exc.status_code
    code = str(exc.code or "")
    body = exc.body if isinstance(exc.body, Mapping) else {}
    api_message = str(body.get("message") or "") if body else ""
    msg = f"{label} API error {status}" + (f" {code}" if code else "")
    if api_message:
        msg += f": {api_message[:500]}"
    if exc.request_id:
        msg += f" (request_id={exc.request_id})"
    error = _classify(status, code, api_message, msg, exc.response.headers)
    error.status = status
    return error


def _classify(
    status: int, code: str, api_message: str, msg: str, headers: Mapping[str, str]
) -> ProviderError:
    if status == 429:
        return ProviderRateLimited(msg, retry_after(headers))
    if status == 529 or status == 503:
        return Overloaded(msg, retry_after(headers))
    if status in (401, 402, 403):
        return ProviderAuthError(msg)
    if status == 400 and (code in _CONTEXT_CODES or "context length" in api_message.lower()):
        return ContextWindowExceeded(msg)
    if status == 404 and (code == "model_not_found" or "model" in api_message.lower()):
        return ModelNotFound(msg)
    if status in (408, 504) or status >= 500:
        return ProviderUnavailable(msg)
    if 400 <= status < 500:
        return ProviderBadRequest(msg)
    return ProviderError(msg)
