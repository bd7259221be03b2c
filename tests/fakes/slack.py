"""A fake Slack that the real slack_sdk / slack_bolt talk to, on 127.0.0.1.

It speaks the wire protocol:

- the Web API at ``/api/<method>``: token in ``Authorization: Bearer``, arguments as
  query string, form or JSON; answers ``{"ok": true, ...}`` or ``{"ok": false,
  "error": ...}`` (``not_authed``, ``invalid_auth``, ``channel_not_found``, ...), and
  HTTP 429 with ``Retry-After`` when scripted. Methods: ``auth.test``,
  ``chat.postMessage``, ``chat.update``, ``chat.delete``, the native streams
  ``chat.startStream`` / ``appendStream`` / ``stopStream`` (`slack_stream`),
  ``conversations.history``,
  ``conversations.replies`` (the bot's own messages), ``files.info`` (``blocks``
  checked as Block Kit does for sections and buttons: `slack_blocks`),
  ``assistant.threads.setStatus``, ``apps.connections.open`` (app-level token);
- private file downloads (``url_private_download``), which, like Slack, answer a
  request without the bot token with an HTML sign-in page and status 200;
- ``response_url`` webhooks of slash commands (``/commands/...``);
- Socket Mode: the URL from ``apps.connections.open`` is a WebSocket that says
  ``hello``; `push()` sends an envelope and waits for the client's ack.

Every call is recorded (`calls`, `messages`, `responses`, `acks`), and waiters
(`wait_for`) wake on each record, so tests never sleep::

    async with FakeSlack() as slack:
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
        slack.fail("chat.postMessage", status=429, retry_after=3)
        ...
        assert slack.messages[0]["thread_ts"] == "1355517523.000005"

`signed_headers()` signs an Events API / slash command body like Slack does
(``v0`` HMAC-SHA256 over ``v0:{timestamp}:{body}``).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from aiohttp import WSMsgType, web

from tests.fakes.chaos import DROPPED, RETRY_AFTER_S, Chaos, hang
from tests.fakes.slack_blocks import blocks_problem
from tests.fakes.slack_stream import StreamMethods
from tests.fakes.slack_stream import error as _error
from tests.fakes.slack_stream import ok as _ok

BOT_TOKEN = "xoxb-1111-2222-testtoken0123"
APP_TOKEN = "xapp-1-A0001-3333-testtoken4567"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM_ID = "T0001"
BOT_USER_ID = "UBOT0001"
BOT_ID = "BBOT0001"
MAX_TEXT = 40_000  # chat.postMessage truncates beyond this; we refuse (msg_too_long)

LOGIN_PAGE = "<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in</body></html>"


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    token: str | None
    status: int = 200
    error: str | None = None


@dataclass
class Failure:
    """A scripted answer for the next matching call."""

    method: str
    status: int = 200
    error: str = "ratelimited"
    retry_after: float | None = None
    channel: str | None = None
    after: int = 0
    """Matching calls to let through first."""


@dataclass
class StoredFile:
    info: dict[str, Any]
    content: bytes


@dataclass
class FakeSlack(StreamMethods):
    bot_token: str = BOT_TOKEN
    app_token: str = APP_TOKEN
    team_id: str = TEAM_ID
    bot_user_id: str = BOT_USER_ID
    bot_id: str = BOT_ID
    calls: list[Call] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    """Messages posted successfully (chat.postMessage), in order."""
    responses: list[dict[str, Any]] = field(default_factory=list)
    """Bodies posted to slash commands' response_url."""
    response_urls_expired: bool = False
    """Answer response_url posts with 404 expired_url, as Slack does for old ones."""
    acks: list[dict[str, Any]] = field(default_factory=list)
    """Socket Mode acknowledgements received."""
    downloads: list[tuple[str, bool]] = field(default_factory=list)
    """(file id, whether the bot token came with the request)."""
    unknown_channels: set[str] = field(default_factory=set)
    left_channels: set[str] = field(default_factory=set)
    """Channels the bot is not in: posting and streaming answer not_in_channel."""
    block_problems: list[str] = field(default_factory=list)
    """Why chat.postMessage answered `invalid_blocks`."""
    files: dict[str, StoredFile] = field(default_factory=dict)
    deleted: list[dict[str, Any]] = field(default_factory=list)
    """Messages removed by chat.delete."""
    no_streams: set[str] = field(default_factory=set)
    """Channels where chat.startStream is refused (channel_type_not_supported)."""
    _failures: list[Failure] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _base_url: str | None = None
    _changed: asyncio.Condition | None = None
    _sockets: list[web.WebSocketResponse] = field(default_factory=list)
    _ts: Any = field(default_factory=lambda: itertools.count(1))
    _holds: dict[str, asyncio.Event] = field(default_factory=dict)
    held: list[Call] = field(default_factory=list)
    """Calls waiting on a `hold` (not answered, not applied yet)."""
    dropped: list[Call] = field(default_factory=list)
    """Held calls whose client went away before the hold was released: like a
    request that never reached Slack, nothing happened."""
    chaos: Chaos | None = None
    """Fault injection (tests/fakes/chaos.py): asked with each Web API method."""

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> Self:
        self._changed = asyncio.Condition()
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/files-pri/{key}/download/{name}", self._download)
        app.router.add_post("/commands/{team}/{id}/{secret}", self._response_url)
        app.router.add_get("/link/", self._socket)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        self._runner = runner
        self._base_url = f"http://{host}:{port}"
        return self

    async def stop(self) -> None:
        for ws in list(self._sockets):
            await ws.close()
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
        await self.stop()

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("FakeSlack is not started")
        return self._base_url

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/"

    # -- scripting and inspection ---------------------------------------------------

    def fail(
        self,
        method: str,
        *,
        status: int = 200,
        error: str = "ratelimited",
        retry_after: float | None = None,
        channel: str | None = None,
        times: int = 1,
        after: int = 0,
    ) -> None:
        """Answer `times` calls of `method` (to `channel`, if given), once `after`
        of them went through, with an error: HTTP 429 + Retry-After, a 5xx page,
        or `ok: false` + `error`."""
        for _ in range(times):
            self._failures.append(Failure(method, status, error, retry_after, channel, after))

    def hold(self, method: str) -> asyncio.Event:
        """Keep calls to `method` waiting until the returned event is set; a call
        whose client disconnected meanwhile is dropped, unapplied."""
        event = self._holds[method] = asyncio.Event()
        return event

    def add_file(
        self,
        name: str,
        content: bytes,
        mimetype: str,
        *,
        file_id: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """Store a file; returns its Slack file object (as in a `files` array).
        `extra` fields join it: an audio clip recorded in Slack has
        ``subtype="slack_audio"`` and ``duration_ms``."""
        file_id = file_id or f"F{uuid.uuid4().hex[:10].upper()}"
        base = f"{self.base_url}/files-pri/{self.team_id}-{file_id}"
        info = {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": name.rsplit(".", 1)[-1],
            "size": len(content),
            "mode": "hosted",
            "is_external": False,
            "url_private": f"{base}/{name}",
            "url_private_download": f"{base}/download/{name}",
            **extra,
        }
        self.files[file_id] = StoredFile(info, content)
        return dict(info)

    def response_url(self) -> str:
        return f"{self.base_url}/commands/{self.team_id}/{next(self._ts)}/{uuid.uuid4().hex}"

    def calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    async def wait_for(self, check: Callable[[], bool], within: float = 30.0) -> None:
        """Wait until `check()` holds (re-checked whenever the fake records something)."""
        assert self._changed is not None
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(check)

    async def _changed_now(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    # -- Socket Mode ----------------------------------------------------------------

    async def push(self, envelope: Mapping[str, Any]) -> dict[str, Any]:
        """Send a Socket Mode envelope to the connected client; returns its ack."""
        await self.wait_for(lambda: bool(self._sockets))
        envelope_id = envelope["envelope_id"]
        await self._sockets[-1].send_str(json.dumps(envelope))
        await self.wait_for(lambda: any(a.get("envelope_id") == envelope_id for a in self.acks))
        return next(a for a in self.acks if a.get("envelope_id") == envelope_id)

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._sockets.append(ws)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len(self._sockets),
                "debug_info": {"host": "fake-slack", "approximate_connection_time": 3600},
                "connection_info": {"app_id": "A0001"},
            }
        )
        await self._changed_now()
        try:
            async for frame in ws:
                if frame.type == WSMsgType.TEXT:
                    self.acks.append(json.loads(frame.data))
                    await self._changed_now()
        finally:
            self._sockets.remove(ws)
        return ws

    # -- the Web API ----------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            if request.content_type == "application/json":
                args.update(await request.json())
            else:
                args.update(dict(await request.post()))
        token = _bearer(request) or args.pop("token", None)
        call = Call(method, args, token)
        self.calls.append(call)
        if self.chaos is not None and (fault := self.chaos(method)) is not None:
            if fault.kind == "status":
                await self._changed_now()
                return _scripted(call, Failure(method, fault.code, retry_after=RETRY_AFTER_S))
            if not await hang(request, fault.seconds):
                call.status = DROPPED
                self.dropped.append(call)
                await self._changed_now()
                return web.Response(status=DROPPED)
        if (hold := self._holds.get(method)) is not None and not hold.is_set():
            self.held.append(call)
            await self._changed_now()
            await hold.wait()
            self.held.remove(call)
            if request.transport is None or request.transport.is_closing():
                self.dropped.append(call)
                await self._changed_now()
                return web.Response(status=499)
        try:
            return await self._answer(call)
        finally:
            await self._changed_now()

    async def _answer(self, call: Call) -> web.StreamResponse:
        expected = self.app_token if call.method == "apps.connections.open" else self.bot_token
        if not call.token:
            return _error(call, "not_authed")
        if call.token != expected:
            wrong_kind = call.token in (self.bot_token, self.app_token)
            return _error(call, "not_allowed_token_type" if wrong_kind else "invalid_auth")
        failure = self._take_failure(call)
        if failure is not None:
            return _scripted(call, failure)
        handler = self._methods().get(call.method)
        if handler is None:
            return _error(call, "unknown_method")
        return handler(call)

    def _take_failure(self, call: Call) -> Failure | None:
        channel = call.args.get("channel") or call.args.get("channel_id")
        for failure in self._failures:
            if failure.method == call.method and failure.channel in (None, channel):
                if failure.after:
                    failure.after -= 1
                    return None
                self._failures.remove(failure)
                return failure
        return None

    def _methods(self) -> dict[str, Callable[[Call], web.Response]]:
        return {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "conversations.history": self._history,
            "conversations.replies": self._replies,
            "files.info": self._files_info,
            "assistant.threads.setStatus": self._set_status,
            "apps.connections.open": self._connections_open,
            **self.stream_methods(),  # chat.startStream/appendStream/stopStream/update/delete
        }

    def _auth_test(self, call: Call) -> web.Response:
        return _ok(
            {
                "url": "https://fake-team.slack.com/",
                "team": "Fake Team",
                "user": "switchboard",
                "team_id": self.team_id,
                "user_id": self.bot_user_id,
                "bot_id": self.bot_id,
                "is_enterprise_install": False,
            }
        )

    def _post_message(self, call: Call) -> web.Response:
        channel = str(call.args.get("channel") or "")
        text = call.args.get("text")
        if not channel or channel in self.unknown_channels:
            return _error(call, "channel_not_found")
        if channel in self.left_channels:
            return _error(call, "not_in_channel")
        if not text and not call.args.get("blocks"):
            return _error(call, "no_text")
        if len(str(text)) > MAX_TEXT:
            return _error(call, "msg_too_long")
        blocks = call.args.get("blocks")
        if blocks is not None and (problem := blocks_problem(blocks)):
            self.block_problems.append(problem)
            return _error(call, "invalid_blocks")
        ts = self.new_ts()
        message = {
            "channel": channel,
            "text": text,
            "thread_ts": call.args.get("thread_ts"),
            "ts": ts,
            "mrkdwn": call.args.get("mrkdwn"),
            "blocks": blocks,
        }
        self.messages.append(message)
        body = {"type": "message", "user": self.bot_user_id, "bot_id": self.bot_id}
        return _ok({"channel": channel, "ts": ts, "message": {**body, "text": text, "ts": ts}})

    def _history(self, call: Call) -> web.Response:
        """The channel's messages newer than `oldest` (newest first), ours only:
        people's messages reach us as events, not through the fake's store."""
        channel, oldest = call.args.get("channel"), float(call.args.get("oldest") or 0)
        found = [m for m in self.messages if m["channel"] == channel and float(m["ts"]) > oldest]
        return _ok({"messages": [self._as_read(m) for m in reversed(found)], "has_more": False})

    def _replies(self, call: Call) -> web.Response:
        channel, thread = call.args.get("channel"), call.args.get("ts")
        oldest = float(call.args.get("oldest") or 0)
        found = [
            m
            for m in self.messages
            if m["channel"] == channel and m.get("thread_ts") == thread and float(m["ts"]) > oldest
        ]
        return _ok({"messages": [self._as_read(m) for m in found], "has_more": False})

    def _as_read(self, message: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "text": message["text"],
            "ts": message["ts"],
            **({"thread_ts": message["thread_ts"]} if message.get("thread_ts") else {}),
        }

    def _files_info(self, call: Call) -> web.Response:
        stored = self.files.get(str(call.args.get("file")))
        if stored is None:
            return _error(call, "file_not_found")
        return _ok({"file": stored.info})

    def _set_status(self, call: Call) -> web.Response:
        if not call.args.get("channel_id") or not call.args.get("thread_ts"):
            return _error(call, "invalid_arguments")
        return _ok({})

    def _connections_open(self, call: Call) -> web.Response:
        ws_base = self.base_url.replace("http://", "ws://")
        return _ok({"url": f"{ws_base}/link/?ticket={uuid.uuid4()}&app_id=A0001"})

    # -- files and response_url -----------------------------------------------------

    async def _download(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["key"].rsplit("-", 1)[-1]
        authorized = _bearer(request) == self.bot_token
        self.downloads.append((file_id, authorized))
        await self._changed_now()
        stored = self.files.get(file_id)
        if not authorized:  # what Slack does: a sign-in page, status 200
            return web.Response(text=LOGIN_PAGE, content_type="text/html")
        if stored is None:
            return web.Response(status=404, text="not found")
        return web.Response(body=stored.content, content_type=stored.info["mimetype"])

    async def _response_url(self, request: web.Request) -> web.Response:
        body = await request.json()
        if self.response_urls_expired:  # what Slack answers after 30 minutes / 5 uses
            await self._changed_now()
            return web.Response(status=404, text="expired_url")
        self.responses.append(body)
        await self._changed_now()
        return web.Response(text="ok")


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        return None
    return header.removeprefix("Bearer ").strip() or None


def _scripted(call: Call, failure: Failure) -> web.Response:
    call.status, call.error = failure.status, failure.error
    if failure.status == 429:
        wait = 1 if failure.retry_after is None else failure.retry_after
        headers = {"Retry-After": f"{wait:g}"}
        return web.json_response({"ok": False, "error": "ratelimited"}, status=429, headers=headers)
    if failure.status >= 500:
        return web.Response(
            status=failure.status, text="<html>oops</html>", content_type="text/html"
        )
    return web.json_response({"ok": False, "error": failure.error}, status=failure.status)


# -- building what Slack sends ---------------------------------------------------------


def signed_headers(
    body: str, secret: str = SIGNING_SECRET, *, timestamp: int | None = None
) -> dict[str, str]:
    """Slack's request signature headers for `body`."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    base = f"v0:{ts}:{body}".encode()
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def event_body(
    event: Mapping[str, Any], *, event_id: str | None = None, team_id: str = TEAM_ID
) -> dict[str, Any]:
    """An Events API envelope around `event`."""
    return {
        "token": "one-long-verification-token",
        "team_id": team_id,
        "api_app_id": "A0001",
        "event": dict(event),
        "type": "event_callback",
        "authorizations": [
            {
                "team_id": team_id,
                "user_id": BOT_USER_ID,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": int(time.time()),
    }


def socket_envelope(
    kind: str, payload: Mapping[str, Any], *, retry_attempt: int = 0
) -> dict[str, Any]:
    """A Socket Mode envelope (`events_api`, `slash_commands`, ...)."""
    envelope: dict[str, Any] = {
        "envelope_id": str(uuid.uuid4()),
        "type": kind,
        "payload": dict(payload),
        "accepts_response_payload": kind != "events_api",
    }
    if kind == "events_api":
        envelope["retry_attempt"] = retry_attempt
        envelope["retry_reason"] = "timeout" if retry_attempt else ""
    return envelope
