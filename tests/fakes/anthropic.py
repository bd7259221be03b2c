"""A fake Anthropic Messages API that the real `anthropic` SDK talks to via `base_url`.

It speaks the wire protocol: ``POST /v1/messages`` as JSON or as SSE (``"stream": true``,
with the real event sequence), ``POST /v1/messages/count_tokens``, the API's error shape
``{"type": "error", "error": {"type": ..., "message": ...}}`` with a ``request-id`` header,
and the API's validation of message histories (tool_use/tool_result pairing, cache
breakpoints, ...), so a test that passes here sends requests the real API accepts.

In an async test (server in the test's own event loop)::

    async with FakeAnthropic() as fake:
        fake.script(text_reply("hi"), tool_use_reply(tool_call("clock", {"tz": "UTC"})))
        provider = AnthropicProvider(api_key="sk-test", base_url=fake.base_url)
        ...
        assert fake.last_request.api_key == "sk-test"

For subprocess (end-to-end) tests the server runs in a thread with its own event loop, so it
keeps answering while the test waits on the child process however it likes::

    with FakeAnthropic() as fake:            # or: fake = FakeAnthropic.start_in_thread()
        env = {**os.environ, "ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": "sk-x"}
        subprocess.run(["switchboard", "chat", ...], env=env, check=True)
        assert fake.request_count == 1       # fake.stop() when not using `with`

The object is the same in both modes and thread-safe: `script()`, `requests`, `responder`.

Each ``/v1/messages`` request is answered, in order: 401 when no key is sent (or not the one
given as `api_key=`); 400 when `validate` is on and the body breaks an API rule (this does not
consume a scripted reply); otherwise the next scripted reply (FIFO), or, when the script is
empty, `responder(body)`, which by default echoes ``"echo: <last user text>"``. Replies are
`MessageReply` / `ErrorReply` values made with the builders below, or plain strings (text).

Prompt caching can be simulated (``simulate_cache=True``): the fake keeps the prefixes
written at ``cache_control`` breakpoints (per model, no expiry) and reports
``cache_read_input_tokens`` / ``cache_creation_input_tokens`` the way the API documents
it — a breakpoint reads the longest cached prefix found at it or up to 20 blocks before
it, a prefix shorter than `cache_min_tokens` is never cached, and what lies between the
hit and the last breakpoint is written. Tokens are estimated (JSON characters / 4).
``context_window=N`` rejects longer prompts with the API's "prompt is too long" error;
``models=[...]`` answers any other model as the API does (404 ``not_found_error``).
A reply built with ``hold=threading.Event()`` is not answered until the event is set.
The server-side web search (``server_tool_use``, ``web_search_tool_result``, citations on
text) is scripted with the blocks of `tests.fakes.anthropic_search`, streamed and checked
as the API does.

Standalone: ``python -m tests.fakes.anthropic [--port N]`` serves until interrupted.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import pypdf
from aiohttp import web

from tests.fakes import anthropic_search
from tests.fakes.prompt_cache import PromptCache
from tests.waiting import PATIENCE_S

log = logging.getLogger("tests.fakes.anthropic")

# --- replies and their builders ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FakeUsage:
    """Usage to report. `None` token counts are estimated (chars/4, at least 1)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


@dataclass(frozen=True, slots=True)
class MessageReply:
    """A successful message. `content` holds API-shaped blocks (text / tool_use dicts).

    When streamed: text arrives in `chunk_size`-character ``text_delta``s and tool input in
    `chunk_size`-character ``input_json_delta``s, `chunk_delay` seconds apart. `stream_error`
    ``(type, message)`` replaces the end of the stream by an ``error`` event after the first
    text block's deltas; `truncate` ends the stream without ``message_delta``/``message_stop``,
    cleanly or, with `abort`, by dropping the connection mid-body.
    """

    content: tuple[dict[str, Any], ...]
    stop_reason: str = "end_turn"
    usage: FakeUsage = FakeUsage()
    model: str | None = None
    delay: float = 0.0
    chunk_size: int = 8
    chunk_delay: float = 0.0
    stream_error: tuple[str, str] | None = None
    truncate: bool = False
    abort: bool = False
    hold: threading.Event | None = None
    """Answer only once this is set (the request stays open meanwhile)."""


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An HTTP error in the API's JSON shape, sent after `delay` seconds."""

    status: int
    error_type: str
    message: str
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0


Reply = MessageReply | ErrorReply
ScriptItem = Reply | str
Responder = Callable[[dict[str, Any]], ScriptItem]

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
STATUS_FOR_TYPE = {v: k for k, v in ERROR_TYPES.items()}
_BLANK_TEXT = "text content blocks must contain non-whitespace text"


def new_tool_id() -> str:
    return f"toolu_{uuid.uuid4().hex[:24]}"


def tool_call(
    name: str, input: Mapping[str, Any] | None = None, *, id: str | None = None
) -> dict[str, Any]:
    """One ``tool_use`` block; the id is generated (``toolu_…``) when not given."""
    return {"type": "tool_use", "id": id or new_tool_id(), "name": name, "input": dict(input or {})}


def text_reply(
    text: str,
    *,
    stop_reason: str = "end_turn",
    usage: FakeUsage | None = None,
    model: str | None = None,
    delay: float = 0.0,
    chunk_size: int = 8,
    chunk_delay: float = 0.0,
    hold: threading.Event | None = None,
) -> MessageReply:
    """A text answer; `stop_reason` may be e.g. "max_tokens", "refusal", "pause_turn"."""
    return MessageReply(
        content=({"type": "text", "text": text},),
        stop_reason=stop_reason,
        usage=usage or FakeUsage(),
        model=model,
        delay=delay,
        chunk_size=chunk_size,
        chunk_delay=chunk_delay,
        hold=hold,
    )


def tool_use_reply(
    *calls: dict[str, Any] | tuple[str, Mapping[str, Any]],
    text: str | None = None,
    stop_reason: str = "tool_use",
    usage: FakeUsage | None = None,
    model: str | None = None,
    delay: float = 0.0,
    chunk_size: int = 8,
) -> MessageReply:
    """A turn calling tools: `tool_call(...)` blocks or ``(name, input)`` pairs, after an
    optional leading `text`."""
    if not calls:
        raise ValueError("tool_use_reply needs at least one call")
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks += [c if isinstance(c, dict) else tool_call(c[0], c[1]) for c in calls]
    return MessageReply(
        content=tuple(blocks),
        stop_reason=stop_reason,
        usage=usage or FakeUsage(),
        model=model,
        delay=delay,
        chunk_size=chunk_size,
    )


def http_error(
    status: int,
    message: str | None = None,
    *,
    error_type: str | None = None,
    retry_after: float | None = None,
    headers: Mapping[str, str] | None = None,
    delay: float = 0.0,
) -> ErrorReply:
    """Any HTTP error; the error type defaults from the status (429 → rate_limit_error, …)."""
    etype = error_type or ERROR_TYPES.get(status, "api_error")
    all_headers = dict(headers or {})
    if retry_after is not None:
        all_headers["retry-after"] = f"{retry_after:g}"
    return ErrorReply(status, etype, message or etype.replace("_", " "), all_headers, delay)


def rate_limit_error(retry_after: float | None = 0.01, message: str | None = None) -> ErrorReply:
    msg = message or "Number of request tokens has exceeded your per-minute rate limit"
    return http_error(429, msg, retry_after=retry_after)


def overloaded_error(retry_after: float | None = None, message: str = "Overloaded") -> ErrorReply:
    return http_error(529, message, retry_after=retry_after)


def server_error(message: str = "Internal server error") -> ErrorReply:
    return http_error(500, message)


def auth_error(message: str = "invalid x-api-key") -> ErrorReply:
    return http_error(401, message)


def bad_request(message: str) -> ErrorReply:
    return http_error(400, message)


def prompt_too_long(tokens: int = 210_000, maximum: int = 200_000) -> ErrorReply:
    return http_error(400, f"prompt is too long: {tokens} tokens > {maximum} maximum")


def stream_error(
    error_type: str = "overloaded_error", message: str = "Overloaded", *, partial_text: str = ""
) -> MessageReply:
    """A stream that starts normally (with `partial_text`) and then sends an ``error`` event.
    Without streaming, the same error comes back as an HTTP error."""
    return MessageReply(
        content=({"type": "text", "text": partial_text},), stream_error=(error_type, message)
    )


def truncated_stream(partial_text: str = "", *, abort: bool = False) -> MessageReply:
    """A stream cut off before ``message_delta`` / ``message_stop``: the body ends cleanly, or
    with `abort` the connection drops (the client sees an incomplete chunked body)."""
    block = {"type": "text", "text": partial_text}
    return MessageReply(content=(block,), truncate=True, abort=abort)


# --- requests ------------------------------------------------------------------------------


@dataclass(slots=True)
class RecordedRequest:
    """One request as received. Header names are lower-case; `status` is set once answered."""

    method: str
    path: str
    headers: dict[str, str]
    json: Any
    status: int | None = None

    @property
    def body(self) -> dict[str, Any]:
        return self.json if isinstance(self.json, dict) else {}

    @property
    def api_key(self) -> str | None:
        """The key from ``x-api-key`` or ``Authorization: Bearer`` (the SDK 2.x sends that)."""
        if key := self.headers.get("x-api-key"):
            return key
        auth = self.headers.get("authorization", "")
        return auth[7:] if auth.lower().startswith("bearer ") and auth[7:] else None

    @property
    def model(self) -> str | None:
        return self.body.get("model")

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    @property
    def system(self) -> Any:
        return self.body.get("system")

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self.body.get("tools") or [])

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def cache_breakpoints(self) -> list[str]:
        """Where ``cache_control`` is set: ``["tools.1", "system.0", "messages.2.content.0"]``."""
        return cache_breakpoints(self.body)


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def cache_breakpoints(body: Mapping[str, Any]) -> list[str]:
    found = ["cache_control"] if body.get("cache_control") else []
    found += [
        f"tools.{i}" for i, t in enumerate(_blocks(body.get("tools"))) if t.get("cache_control")
    ]
    found += [
        f"system.{i}" for i, b in enumerate(_blocks(body.get("system"))) if b.get("cache_control")
    ]
    for mi, msg in enumerate(_blocks(body.get("messages"))):
        for bi, block in enumerate(_blocks(msg.get("content"))):
            where = f"messages.{mi}.content.{bi}"
            if block.get("cache_control"):
                found.append(where)
            for ci, inner in enumerate(_blocks(block.get("content"))):
                if inner.get("cache_control"):
                    found.append(f"{where}.content.{ci}")
    return found


CONTEXT_TAG = "<turn_context>"
"""Switchboard appends per-turn context (time, memories) as a last text block
starting with this tag; the echo leaves it out."""


def last_user_text(body: Mapping[str, Any]) -> str:
    """The text of the last user message (its tool results' text when it has no
    text), without a trailing turn-context block."""
    for msg in reversed(_blocks(body.get("messages"))):
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        if isinstance(content, str):
            return content
        blocks = _blocks(content)
        texts = [
            b.get("text", "")
            for b in blocks
            if b.get("type") == "text" and not str(b.get("text", "")).startswith(CONTEXT_TAG)
        ]
        if not texts:
            texts = [str(b.get("content", "")) for b in blocks if b.get("type") == "tool_result"]
        return "\n".join(texts)
    return ""


def echo_responder(body: dict[str, Any]) -> ScriptItem:
    return text_reply(f"echo: {last_user_text(body)}")


def estimate_tokens(value: Any) -> int:
    """Rough token count: JSON characters / 4, at least 1."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return max(1, len(text) // 4)


def validate_request(body: Mapping[str, Any], *, count_tokens: bool = False) -> str | None:
    """The API's complaint about `body` (as its 400 message would say), or None."""
    if not body.get("model"):
        return "model: Field required"
    if not count_tokens:
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            return "max_tokens: Field required"
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            return "max_tokens: Input should be a valid integer greater than or equal to 1"
    messages = body.get("messages")
    if not isinstance(messages, list):
        return "messages: Field required"
    if not messages:
        return "messages: at least one message is required"
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
    if messages[0]["role"] != "user":
        return 'messages: first message must use the "user" role'
    system = body.get("system")
    if isinstance(system, list) and any(
        not str(b.get("text", "")).strip() for b in _blocks(system)
    ):
        return f"system: {_BLANK_TEXT}"
    for i in range(len(messages)):
        if problem := _validate_message(i, messages) or anthropic_search.message_problem(
            i, messages[i]
        ):
            return problem
    if (pages := _pdf_pages(messages)) > PDF_MAX_PAGES:
        return f"A maximum of {PDF_MAX_PAGES} PDF pages may be provided. Found {pages}."
    tools = _blocks(body.get("tools"))
    for i, tool in enumerate(tools):
        if tool.get("type") not in (None, "custom"):  # a server tool (web search)
            if problem := anthropic_search.tool_problem(i, tool):
                return problem
        elif not tool.get("name") or not isinstance(tool.get("input_schema"), dict):
            return f"tools.{i}: name and input_schema are required"
    if not tools and any(_tool_ids(m, k) for m in messages for k in ("tool_use", "tool_result")):
        return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    if (n := len(cache_breakpoints(body))) > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {n}."
    return None


def _tool_ids(msg: Any, kind: str) -> list[str]:
    if not isinstance(msg, dict):
        return []
    key = "id" if kind == "tool_use" else "tool_use_id"
    return [str(b.get(key)) for b in _blocks(msg.get("content")) if b.get("type") == kind]


IMAGE_MAX_BASE64 = 5 * 1024 * 1024
"""The Messages API refuses an image whose base64 is longer (a 400)."""
PDF_MAX_PAGES = 100
"""The PDF pages one request may carry as documents, all together (a 400 past it)."""


def _pdf_pages(messages: Sequence[Any]) -> int:
    """The pages of every PDF document block in `messages` (pypdf reads them)."""
    pages = 0
    for msg in messages:
        for block in _blocks(msg.get("content") if isinstance(msg, dict) else None):
            source = block.get("source") or {}
            if block.get("type") == "document" and source.get("type") == "base64":
                try:
                    data = base64.b64decode(str(source.get("data") or ""))
                    pages += len(pypdf.PdfReader(io.BytesIO(data)).pages)
                except Exception:
                    pages += 1  # unreadable: the API would say so; counted as a page here
    return pages


def _validate_message(i: int, messages: Sequence[dict[str, Any]]) -> str | None:
    msg = messages[i]
    content = msg.get("content")
    if isinstance(content, str):
        return None if content.strip() else f"messages.{i}.content: text content must be non-empty"
    if not isinstance(content, list) or not content:
        return f"messages.{i}.content: at least one content block is required"
    for j, block in enumerate(_blocks(content)):
        btype = block.get("type")
        if btype == "text" and not str(block.get("text", "")).strip():
            return f"messages.{i}.content.{j}.text: {_BLANK_TEXT}"
        if btype == "image":
            source = block.get("source") or {}
            if source.get("type") == "base64" and not (
                source.get("media_type") and source.get("data")
            ):
                return f"messages.{i}.content.{j}.source: media_type and data are required"
            if len(str(source.get("data") or "")) > IMAGE_MAX_BASE64:
                return f"messages.{i}.content.{j}.image.source.base64: image exceeds 5 MB maximum"
        if btype == "document":
            source = block.get("source") or {}
            if source.get("type") != "base64" or source.get("media_type") != "application/pdf":
                return f"messages.{i}.content.{j}.source: a base64 PDF source is expected"
            if not source.get("data"):
                return f"messages.{i}.content.{j}.source.data: required"
        if btype in ("tool_use", "tool_result") and msg["role"] != (
            "assistant" if btype == "tool_use" else "user"
        ):
            return f"messages.{i}.content.{j}: `{btype}` is not allowed in `{msg['role']}` messages"
    if msg["role"] == "user":
        previous = set(_tool_ids(messages[i - 1], "tool_use")) if i > 0 else set()
        seen_other = False
        for j, block in enumerate(_blocks(content)):
            if block.get("type") != "tool_result":
                seen_other = True
                continue
            if seen_other:
                return (
                    f"messages.{i}.content.{j}: `tool_result` blocks must come first in the content"
                )
            if block.get("tool_use_id") not in previous:
                return (
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {block.get('tool_use_id')}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message."
                )
    elif (uses := _tool_ids(msg, "tool_use")) and i + 1 < len(messages):
        answered = set(_tool_ids(messages[i + 1], "tool_result"))
        if messages[i + 1].get("role") != "user":
            answered = set()
        if missing := [u for u in uses if u not in answered]:
            return (
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                f"after: {', '.join(missing)}. Each `tool_use` block must have a corresponding "
                "`tool_result` block in the next message."
            )
    return None


# --- the server ----------------------------------------------------------------------------


_RECORD = web.RequestKey("record", RecordedRequest)


def _request_id() -> str:
    return f"req_fake_{uuid.uuid4().hex[:20]}"


def _error_body(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def _event(name: str, **fields: Any) -> dict[str, Any]:
    return {"type": name, **fields}


def _given(value: int | None, estimate: int) -> int:
    return estimate if value is None else value


def _chunks(text: str, size: int) -> Iterator[str]:
    size = max(1, size)
    for start in range(0, len(text), size):
        yield text[start : start + size]


class FakeAnthropic:
    """The fake server. See the module docstring for the two ways to run it."""

    def __init__(
        self,
        *,
        responder: Responder | None = None,
        api_key: str | None = None,
        validate: bool = True,
        port: int = 0,
        simulate_cache: bool = False,
        cache_min_tokens: int = 1024,
        context_window: int | None = None,
        models: Sequence[str] | None = None,
    ) -> None:
        self.responder: Responder = responder or echo_responder
        self.models = frozenset(models) if models is not None else None
        """When given, the models the API has: any other is a 404 ``not_found_error``."""
        self.expected_api_key = api_key
        self.validate = validate
        self.simulate_cache = simulate_cache
        self.cache_min_tokens = cache_min_tokens
        self.context_window = context_window
        self._cache = PromptCache()
        self._port = port
        self._lock = threading.Lock()
        self._script: deque[ScriptItem] = deque()
        self._requests: list[RecordedRequest] = []
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.flight_key: Callable[[dict[str, Any]], str] | None = None
        """When set, requests are grouped by `flight_key(body)` while answered:
        `max_in_flight[key]` is the most answered at once (e.g. per conversation)."""
        self.in_flight: dict[str, int] = {}
        self.max_in_flight: dict[str, int] = {}

    # -- scripting and inspection --

    def script(self, *replies: ScriptItem) -> None:
        """Queue replies (FIFO) for the next ``/v1/messages`` requests."""
        with self._lock:
            self._script.extend(replies)

    @property
    def pending(self) -> int:
        """Scripted replies not used yet."""
        with self._lock:
            return len(self._script)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self._requests)

    @property
    def last_request(self) -> RecordedRequest:
        with self._lock:
            if not self._requests:
                raise AssertionError("the fake Anthropic API received no request")
            return self._requests[-1]

    def reset(self) -> None:
        """Forget recorded requests, scripted replies and the simulated cache."""
        with self._lock:
            self._requests.clear()
            self._script.clear()
            self._cache.clear()

    async def wait_for_requests(
        self, count: int, seconds: float = PATIENCE_S
    ) -> list[RecordedRequest]:
        """Wait (without blocking the event loop) until `count` requests have arrived."""
        deadline = time.monotonic() + seconds
        while self.request_count < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"expected {count} requests, got {self.request_count}")
            await asyncio.sleep(0.01)
        return self.requests

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("FakeAnthropic is not started")
        return self._base_url

    # -- lifecycle: in the current event loop --

    async def start(self) -> Self:
        app = web.Application(middlewares=[self._record_status])
        app.router.add_post("/v1/messages", self._handle_messages)
        app.router.add_post("/v1/messages/count_tokens", self._handle_count_tokens)
        app.router.add_route("*", "/{tail:.*}", self._handle_unknown)
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self._port)
        await site.start()
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self._base_url = f"http://{host}:{port}"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- lifecycle: in a background thread --

    @classmethod
    def start_in_thread(cls, **kwargs: Any) -> FakeAnthropic:
        """A fake serving from its own thread and event loop; call `stop()` when done."""
        fake = cls(**kwargs)
        fake._start_thread()
        return fake

    def _start_thread(self) -> None:
        if self._thread is not None or self._runner is not None:
            raise RuntimeError("FakeAnthropic is already running")
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self.close())
                loop.close()

        self._thread = threading.Thread(target=run, name="fake-anthropic", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fake Anthropic server did not start in 10 s")
        if failure:
            raise failure[0]

    def stop(self) -> None:
        """Stop a server started in a thread."""
        if self._thread is None or self._loop is None:
            raise RuntimeError("stop() is for start_in_thread(); use `await close()` instead")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._thread = self._loop = None

    def __enter__(self) -> Self:
        self._start_thread()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- handlers --

    @web.middleware
    async def _record_status(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        response: web.StreamResponse = await handler(request)
        record = request.get(_RECORD)
        if isinstance(record, RecordedRequest):
            record.status = response.status
        return response

    async def _record(self, request: web.Request) -> RecordedRequest:
        raw = await request.read()
        try:
            parsed: Any = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        headers = {k.lower(): v for k, v in request.headers.items()}
        record = RecordedRequest(request.method, request.path, headers, parsed)
        request[_RECORD] = record
        with self._lock:
            self._requests.append(record)
        return record

    def _refuse(
        self, record: RecordedRequest, *, count_tokens: bool = False
    ) -> web.Response | None:
        key = record.api_key
        if not key:
            return self._error(401, "authentication_error", "x-api-key header is required")
        if self.expected_api_key is not None and key != self.expected_api_key:
            return self._error(401, "authentication_error", "invalid x-api-key")
        if not isinstance(record.json, dict):
            return self._error(400, "invalid_request_error", "request body must be a JSON object")
        if self.validate and (problem := validate_request(record.json, count_tokens=count_tokens)):
            return self._error(400, "invalid_request_error", problem)
        if self.models is not None and (model := record.json.get("model")) not in self.models:
            return self._error(404, "not_found_error", f"model: {model}")
        if self.context_window is not None and not count_tokens:
            body = record.json
            size = estimate_tokens([body.get("system"), body.get("messages"), body.get("tools")])
            if size > self.context_window:
                message = f"prompt is too long: {size} tokens > {self.context_window} maximum"
                return self._error(400, "invalid_request_error", message)
        return None

    def _error(
        self, status: int, error_type: str, message: str, headers: Mapping[str, str] | None = None
    ) -> web.Response:
        all_headers = {"request-id": _request_id(), **(headers or {})}
        return web.json_response(
            _error_body(error_type, message), status=status, headers=all_headers
        )

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            item: ScriptItem | None = self._script.popleft() if self._script else None
        if item is None:
            item = self.responder(body)
        return text_reply(item) if isinstance(item, str) else item

    async def _handle_messages(self, request: web.Request) -> web.StreamResponse:
        record = await self._record(request)
        if (refusal := self._refuse(record)) is not None:
            return refusal
        body = record.body
        flight = self.flight_key(body) if self.flight_key is not None else None
        if flight is None:
            return await self._answer(request, body)
        with self._lock:
            self.in_flight[flight] = self.in_flight.get(flight, 0) + 1
            self.max_in_flight[flight] = max(
                self.max_in_flight.get(flight, 0), self.in_flight[flight]
            )
        try:
            return await self._answer(request, body)
        finally:
            with self._lock:
                self.in_flight[flight] -= 1

    async def _answer(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        try:
            reply = self._next_reply(body)
        except Exception as exc:
            log.exception("fake Anthropic responder failed")
            return self._error(
                500, "api_error", f"fake responder raised {type(exc).__name__}: {exc}"
            )
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if isinstance(reply, ErrorReply):
            return self._error(reply.status, reply.error_type, reply.message, reply.headers)
        if reply.hold is not None:  # a thread waits, so the event may be set from anywhere
            await asyncio.get_running_loop().run_in_executor(None, reply.hold.wait, 60.0)
        usage = self._usage(body, reply)
        if not body.get("stream"):
            if reply.stream_error is not None:
                etype, message = reply.stream_error
                return self._error(STATUS_FOR_TYPE.get(etype, 500), etype, message)
            return web.json_response(
                self._message(body, reply, usage, final=True),
                headers={"request-id": _request_id()},
            )
        return await self._stream(request, body, reply, usage)

    async def _handle_count_tokens(self, request: web.Request) -> web.Response:
        record = await self._record(request)
        if (refusal := self._refuse(record, count_tokens=True)) is not None:
            return refusal
        body = record.body
        estimate = estimate_tokens([body.get("system"), body.get("messages"), body.get("tools")])
        return web.json_response({"input_tokens": estimate}, headers={"request-id": _request_id()})

    async def _handle_unknown(self, request: web.Request) -> web.Response:
        await self._record(request)
        return self._error(404, "not_found_error", f"Not found: {request.method} {request.path}")

    # -- building answers --

    def _usage(self, body: Mapping[str, Any], reply: MessageReply) -> dict[str, int]:
        """The reply's usage (computed once per request: it updates the simulated cache)."""
        u = reply.usage
        prompt = [body.get("system"), body.get("messages"), body.get("tools")]
        output = [b.get("text") or b.get("input") for b in reply.content]
        scripted = u.input_tokens is not None or u.cache_read_input_tokens
        if self.simulate_cache and not scripted and not u.cache_creation_input_tokens:
            fresh, read, written = self._cache.usage(body, self.cache_min_tokens)
            return {
                "input_tokens": fresh,
                "output_tokens": _given(u.output_tokens, estimate_tokens(output)),
                "cache_creation_input_tokens": written,
                "cache_read_input_tokens": read,
            }
        return {
            "input_tokens": _given(u.input_tokens, estimate_tokens(prompt)),
            "output_tokens": _given(u.output_tokens, estimate_tokens(output)),
            "cache_creation_input_tokens": u.cache_creation_input_tokens,
            "cache_read_input_tokens": u.cache_read_input_tokens,
        }

    def _message(
        self, body: Mapping[str, Any], reply: MessageReply, usage: dict[str, int], *, final: bool
    ) -> dict[str, Any]:
        usage = dict(usage)
        if not final:
            usage["output_tokens"] = 1
        return {
            "id": f"msg_fake_{uuid.uuid4().hex[:20]}",
            "type": "message",
            "role": "assistant",
            "model": reply.model or body.get("model"),
            "content": [dict(b) for b in reply.content] if final else [],
            "stop_reason": reply.stop_reason if final else None,
            "stop_sequence": None,
            "usage": usage,
        }

    def _events(
        self, body: Mapping[str, Any], reply: MessageReply, usage: dict[str, int]
    ) -> list[dict[str, Any]]:
        """The SSE events of `reply`, in the real API's order; each has its name in "type"."""
        events = [_event("message_start", message=self._message(body, reply, usage, final=False))]
        for index, block in enumerate(reply.content):
            if anthropic_search.is_server_block(block):  # web search, citations
                events += anthropic_search.block_events(index, block, reply.chunk_size)
                events.append(_event("content_block_stop", index=index))
                continue
            if block.get("type") == "tool_use":
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                pieces = ["", *_chunks(json.dumps(block.get("input", {})), reply.chunk_size)]
                deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
            else:
                start = {"type": "text", "text": ""}
                texts = _chunks(block.get("text", ""), reply.chunk_size)
                deltas = [{"type": "text_delta", "text": t} for t in texts]
            events.append(_event("content_block_start", index=index, content_block=start))
            if index == 0:
                events.append(_event("ping"))
            events += [_event("content_block_delta", index=index, delta=d) for d in deltas]
            if reply.stream_error is not None:
                return [*events, _error_body(*reply.stream_error)]
            events.append(_event("content_block_stop", index=index))
        if reply.truncate:
            return events
        delta = {"stop_reason": reply.stop_reason, "stop_sequence": None}
        final = {"output_tokens": usage["output_tokens"]}
        return [*events, _event("message_delta", delta=delta, usage=final), _event("message_stop")]

    async def _stream(
        self,
        request: web.Request,
        body: Mapping[str, Any],
        reply: MessageReply,
        usage: dict[str, int],
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "content-type": "text/event-stream",
                "cache-control": "no-cache",
                "request-id": _request_id(),
            }
        )
        await response.prepare(request)
        try:
            for event in self._events(body, reply, usage):
                payload = json.dumps(event, separators=(",", ":"))
                await response.write(f"event: {event['type']}\ndata: {payload}\n\n".encode())
                if reply.chunk_delay:
                    await asyncio.sleep(reply.chunk_delay)
            if reply.abort and request.transport is not None:
                request.transport.abort()
                return response
            await response.write_eof()
        except ConnectionError:
            log.debug("client went away during a stream")
        return response


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the fake on 127.0.0.1 until interrupted (echo responder, no script)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--no-validate", action="store_true")
    args = parser.parse_args(argv)

    async def serve() -> None:
        async with FakeAnthropic(port=args.port, validate=not args.no_validate) as fake:
            print(fake.base_url, flush=True)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
