"""A fake OpenAI Chat Completions API that the real `openai` SDK talks to via `base_url`.

It speaks the wire protocol of ``POST /v1/chat/completions`` (what OpenAI,
OpenRouter, Groq, vLLM, Ollama and LM Studio serve): JSON, or SSE with
``"stream": true`` (``data: {chunk}`` lines ending with ``data: [DONE]``), text
in ``delta.content`` pieces, tool calls as ``delta.tool_calls`` pieces (the id
and name first, the arguments in fragments), the finish reason, and, when the
request asks with ``stream_options.include_usage``, a last chunk with empty
``choices`` and the ``usage`` (cached prompt tokens in
``prompt_tokens_details``). Errors come in the API's shape ``{"error":
{"message", "type", "code"}}``. Requests are checked as the API checks them
(roles, a ``tool`` message answering a call of the assistant message before
it), so a test that passes here sends what the API accepts.

    async with FakeOpenAI(api_keys={"k1"}) as fake:
        fake.script(chat_reply("hi"), chat_tool_call("clock", {"tz": "UTC"}))
        ... base_url=fake.base_url (it ends in /v1, as OpenAI clients expect)
        assert fake.requests[0].model == "gpt-test"

Each request is answered: 401 when `api_keys` is given and the bearer key is
not one of them; 400 when the body breaks a rule; otherwise the next scripted
reply for that key (`script_for(key, ...)`) or for any key (`script`), else an
echo of the last user text.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from tests.waiting import PATIENCE_S


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any]
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:12]}")


@dataclass(frozen=True, slots=True)
class ChatReply:
    """A reply: text and tool calls, streamed in `chunk_size` pieces. `cut`:
    the stream stops after the text without a finish reason or [DONE]."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0
    chunk_size: int = 8
    cut: bool = False
    hold: asyncio.Event | None = None
    """Answer only once this is set (a fake in the test's own event loop)."""


@dataclass(frozen=True, slots=True)
class ChatError:
    status: int
    message: str
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


Item = ChatReply | ChatError | str


def chat_reply(text: str, **fields: Any) -> ChatReply:
    return ChatReply(text=text, **fields)


def chat_tool_call(name: str, arguments: Mapping[str, Any], *, text: str = "") -> ChatReply:
    return ChatReply(text=text, tool_calls=(ToolCall(name, arguments),))


def chat_error(status: int, message: str = "error", code: str | None = None) -> ChatError:
    return ChatError(status, message, code)


@dataclass(slots=True)
class ChatRequest:
    headers: dict[str, str]
    json: dict[str, Any]
    status: int = 0

    @property
    def api_key(self) -> str | None:
        auth = self.headers.get("authorization", "")
        return auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None

    @property
    def model(self) -> str | None:
        return self.json.get("model")

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.json.get("messages") or [])

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self.json.get("tools") or [])


def last_user_text(body: Mapping[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return " ".join(p.get("text", "") for p in content or [] if p.get("type") == "text")
    return ""


def validate(body: Mapping[str, Any]) -> str | None:
    """What the API would refuse in `body`, or None."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: must be a non-empty array"
    open_calls: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"messages[{i}].role: invalid value {role!r}"
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in open_calls:
                return (
                    f"messages[{i}]: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'"
                )
            open_calls.discard(call_id)
            continue
        if open_calls:
            return f"messages[{i}]: tool_call_ids did not have response messages: {open_calls}"
        if role == "assistant":
            open_calls = {c["id"] for c in message.get("tool_calls") or []}
            if not message.get("content") and not open_calls:
                return f"messages[{i}]: an assistant message needs content or tool_calls"
        elif role == "user" and not message.get("content"):
            return f"messages[{i}].content: must not be empty"
    for tool in body.get("tools") or []:
        function = tool.get("function") or {}
        if tool.get("type") != "function" or not function.get("name"):
            return "tools: each must be a function with a name"
    return None


class FakeOpenAI:
    def __init__(self, *, api_keys: set[str] | None = None) -> None:
        self.api_keys = api_keys
        self._lock = threading.Lock()
        self._script: deque[Item] = deque()
        self._keyed: dict[str, deque[Item]] = {}
        self.requests: list[ChatRequest] = []
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None

    def script(self, *items: Item) -> None:
        with self._lock:
            self._script.extend(items)

    def script_for(self, key: str, *items: Item) -> None:
        """Replies for requests made with this key, or for this model, only
        (before the common script)."""
        with self._lock:
            self._keyed.setdefault(key, deque()).extend(items)

    @property
    def base_url(self) -> str:
        assert self._base_url is not None, "FakeOpenAI is not started"
        return self._base_url

    async def wait_for_requests(self, count: int, seconds: float = PATIENCE_S) -> list[ChatRequest]:
        deadline = time.monotonic() + seconds
        while len(self.requests) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"expected {count} requests, got {len(self.requests)}")
            await asyncio.sleep(0.01)
        return self.requests

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self._base_url = f"http://{host}:{port}/v1"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _next(self, key: str | None, body: dict[str, Any]) -> Item:
        with self._lock:
            for who in (key or "", str(body.get("model"))):
                keyed = self._keyed.get(who)
                if keyed:
                    return keyed.popleft()
            if self._script:
                return self._script.popleft()
        return f"echo: {last_user_text(body)}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in request.headers.items()}
        record = ChatRequest(headers, body if isinstance(body, dict) else {})
        with self._lock:
            self.requests.append(record)
        response = await self._answer(request, record)
        record.status = response.status
        return response

    async def _answer(self, request: web.Request, record: ChatRequest) -> web.StreamResponse:
        if self.api_keys is not None and record.api_key not in self.api_keys:
            return _error(ChatError(401, "Incorrect API key provided", "invalid_api_key"))
        problem = validate(record.json)
        if problem is not None:
            return _error(ChatError(400, problem))
        item = self._next(record.api_key, record.json)
        if isinstance(item, ChatError):
            return _error(item)
        reply = ChatReply(text=item) if isinstance(item, str) else item
        if reply.hold is not None:
            await reply.hold.wait()
        if record.json.get("stream"):
            usage = bool((record.json.get("stream_options") or {}).get("include_usage"))
            return await _stream(request, record, reply, usage)
        return web.json_response(_completion(record, reply))


def _usage(record: ChatRequest, reply: ChatReply) -> dict[str, Any]:
    prompt = reply.prompt_tokens
    if prompt is None:
        prompt = max(len(json.dumps(record.json.get("messages"))) // 4, 1)
    completion = reply.completion_tokens
    if completion is None:
        completion = max((len(reply.text) + sum(len(json.dumps(c.arguments)) for c in
                                                reply.tool_calls)) // 4, 1)  # fmt: skip
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
    }


def _finish(reply: ChatReply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def _completion(record: ChatRequest, reply: ChatReply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in reply.tool_calls
        ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": record.model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
        "usage": _usage(record, reply),
    }


async def _stream(
    request: web.Request, record: ChatRequest, reply: ChatReply, usage: bool
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    ident, created = f"chatcmpl-{uuid.uuid4().hex[:12]}", int(time.time())

    async def send(choices: Sequence[dict[str, Any]], **extra: Any) -> None:
        chunk = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": record.model,
            "choices": list(choices),
            **extra,
        }
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

    def delta(fields: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"index": 0, "delta": fields, "finish_reason": finish}

    await send([delta({"role": "assistant", "content": ""})])
    size = max(reply.chunk_size, 1)
    for at in range(0, len(reply.text), size):
        await send([delta({"content": reply.text[at : at + size]})])
    if reply.cut:
        await response.write_eof()
        return response
    for index, call in enumerate(reply.tool_calls):
        head = {"index": index, "id": call.id, "type": "function"}
        await send([delta({"tool_calls": [{**head, "function": {"name": call.name,
                                                                "arguments": ""}}]})])  # fmt: skip
        arguments = json.dumps(call.arguments)
        for at in range(0, len(arguments), size):
            piece = {"index": index, "function": {"arguments": arguments[at : at + size]}}
            await send([delta({"tool_calls": [piece]})])
    await send([delta({}, _finish(reply))])
    if usage:
        await send([], usage=_usage(record, reply))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def _error(error: ChatError) -> web.Response:
    kind = {
        400: "invalid_request_error",
        401: "invalid_request_error",
        404: "invalid_request_error",
        429: "rate_limit_exceeded",
    }.get(error.status, "server_error")
    body = {"error": {"message": error.message, "type": kind, "param": None, "code": error.code}}
    return web.json_response(body, status=error.status, headers=dict(error.headers))
