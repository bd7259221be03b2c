"""A fake Telegram Bot API server that the real aiogram and python-telegram-bot clients
talk to through their base-URL options (`{base_url}/bot<token>/<method>`).

It speaks the wire protocol: parameters as query string, urlencoded or multipart form
(JSON-encoded values, as the libraries send them) or a JSON body; answers
``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code": ..., "description": ...,
"parameters": {"retry_after": ...}}``; method names are case-insensitive; a wrong token
is 401 and an unknown method 404. Implemented: getMe, getUpdates (long polling; an
update is forgotten once getUpdates is called with a higher offset; 409 while a webhook
is set), setWebhook (https URLs only, as Telegram) / deleteWebhook, sendMessage,
editMessageText, deleteMessage and sendMessageDraft (tests/fakes/telegram_messages.py:
parse_mode=HTML checked with `telegram_html.parse_html`, 4096-character limit, inline
keyboards checked; `shown()` and `drafts` hold what the chats show),
answerCallbackQuery, sendChatAction, setMyCommands (names and descriptions checked),
getFile and the file download at ``/file/bot<token>/<file_path>`` (20 MB cloud limit).

Tests push updates with `push_update` and read `calls` (every request, with its
normalized parameters, status and the `clock()` time it arrived). `fail_next` scripts
errors (`flood(retry_after)`, `bad_request(...)`, `servererror_response()`) for the next calls of
a method, optionally only for one chat. With a webhook set and `webhook_target` given,
pending updates are POSTed there (with ``X-Telegram-Bot-Api-Secret-Token``), in order,
until answered 2xx, as Telegram does.

Runs in the test's event loop (``async with FakeTelegram() as fake``) or in a thread of
its own for subprocess tests (``with FakeTelegram() as fake`` / `start_in_thread`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Self

import aiohttp
from aiohttp import web

from tests.fakes.chaos import DROPPED, RETRY_AFTER_S, Chaos, hang
from tests.fakes.telegram_messages import MessageMethods
from tests.fakes.telegram_wire import (
    ApiError,
    Call,
    Refused,
    Scripted,
    StoredFile,
    Webhook,
    bad_request,
    canonical,
    error_response,
    flood,
    read_params,
    server_error,
)

__all__ = ["TOKEN", "ApiError", "Call", "FakeTelegram", "bad_request", "flood", "server_error"]

TOKEN = "123456789:AAHfakeFAKEfake_fake-FAKEfakeFAKEfake1"
BOT_ID = 123456789
BOT_USERNAME = "switchboard_test_bot"
CLOUD_FILE_LIMIT = 20 * 1024 * 1024
WEBHOOK_TIMEOUT_S = 60.0
"""A webhook delivery not answered within this is a failed attempt (retried)."""
_COMMAND = re.compile(r"[a-z0-9_]{1,32}")
_POLL_CONFLICT = (
    "Conflict: terminated by other getUpdates request; "
    "make sure that only one bot instance is running"
)
_WEBHOOK_CONFLICT = (
    "Conflict: can't use getUpdates method while webhook is active; "
    "use deleteWebhook to delete the webhook first"
)


class FakeTelegram(MessageMethods):
    def __init__(
        self,
        *,
        token: str = TOKEN,
        bot_id: int = BOT_ID,
        username: str = BOT_USERNAME,
        clock: Callable[[], float] = time.monotonic,
        webhook_retry_delay: float = 0.05,
    ) -> None:
        self.token = token
        self.bot_user = {
            "id": bot_id,
            "is_bot": True,
            "first_name": "Switchboard",
            "username": username,
        }
        self.clock = clock
        self.webhook_retry_delay = webhook_retry_delay
        self.webhook: Webhook | None = None
        self.webhook_target: str | None = None
        """Where webhook deliveries really go (the URL given to setWebhook is public https)."""
        self.webhook_targets: list[str] = []
        """When set, deliveries go to these in turn instead (a load balancer in
        front of several instances: each attempt to the next)."""
        self._next_target = 0
        self.chaos: Chaos | None = None
        """Fault injection (tests/fakes/chaos.py): asked with each method's name."""
        self.commands: list[dict[str, str]] | None = None
        self._lock = threading.RLock()
        self._calls: list[Call] = []
        self._updates: list[dict[str, Any]] = []
        self._confirmed = 0
        self._allowed: list[str] | None = None
        self._polls = 0
        self.poll_conflicts = 0
        """getUpdates calls cut short by another one, as Telegram does (409): two
        clients polling the same bot."""
        self._next_update = itertools.count(1000)
        self._init_messages()
        self._script: list[Scripted] = []
        self._files: dict[str, StoredFile] = {}
        self._taken: set[int] = set()
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self._deliverer: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- scripting -----------------------------------------------------------------------

    def push_update(self, update: Mapping[str, Any]) -> int:
        """Queue an update (an `update_id` is assigned when missing); returns its id.
        Pushing an id again is a redelivery."""
        with self._lock:
            data = dict(update)
            data.setdefault("update_id", next(self._next_update))
            self._updates.append(data)
            self._updates.sort(key=lambda u: u["update_id"])
            return int(data["update_id"])

    def fail_next(self, method: str, *errors: ApiError, chat_id: str | int | None = None) -> None:
        """The next calls of `method` (for `chat_id` only, if given) get these errors."""
        with self._lock:
            chat = None if chat_id is None else str(chat_id)
            self._script.extend(Scripted(method.lower(), e, chat) for e in errors)

    def add_file(self, data: bytes, *, file_id: str | None = None, path: str | None = None) -> str:
        with self._lock:
            n = len(self._files) + 1
            file_id = file_id or f"BQACAgQAAxkBAAI{n:06d}"
            self._files[file_id] = StoredFile(data, path or f"documents/file_{n}", f"AgAD{n:04d}")
            return file_id

    # -- inspection ----------------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    def calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method.lower() == method.lower()]

    def sent(self, chat_id: str | int | None = None) -> list[Call]:
        """Successful sendMessage calls (to one chat, if given)."""
        return [
            c
            for c in self.calls_to("sendMessage")
            if c.ok and (chat_id is None or c.chat_id == str(chat_id))
        ]

    @property
    def pending_updates(self) -> list[int]:
        with self._lock:
            return [u["update_id"] for u in self._updates]

    def taken(self, update_id: int) -> bool:
        """Confirmed by a getUpdates offset, or answered 2xx by the webhook."""
        with self._lock:
            return update_id in self._taken or (not self.webhook and update_id < self._confirmed)

    async def wait_for(self, condition: Callable[[], bool], seconds: float = 30.0) -> None:
        """Wait (without blocking the loop) until `condition()` holds; fail after `seconds`."""
        deadline = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError("condition not met; calls: " + ", ".join(self._summary()))
            await asyncio.sleep(0.01)

    async def wait_for_calls(
        self, method: str, count: int = 1, seconds: float = 30.0
    ) -> list[Call]:
        await self.wait_for(lambda: len(self.calls_to(method)) >= count, seconds)
        return self.calls_to(method)

    async def wait_taken(self, *update_ids: int, seconds: float = 30.0) -> None:
        await self.wait_for(lambda: all(self.taken(u) for u in update_ids), seconds)

    def _summary(self) -> list[str]:
        return [f"{c.method}:{c.status}" for c in self.calls]

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("FakeTelegram is not started")
        return self._base_url

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> Self:
        app = web.Application(client_max_size=50 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._handle_method)
        app.router.add_get("/file/bot{token}/{path:.+}", self._handle_file)
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self._base_url = f"http://{host}:{port}"
        self._deliverer = asyncio.create_task(self._deliver_webhooks())
        return self

    async def close(self) -> None:
        if self._deliverer is not None:
            self._deliverer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._deliverer
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def start_in_thread(self) -> Self:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            loop.run_until_complete(self.start())
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self.close())
                loop.close()

        self._thread = threading.Thread(target=run, name="fake-telegram", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fake Telegram server did not start in 10 s")
        return self

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            raise RuntimeError("stop() is for start_in_thread()")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._thread = self._loop = None

    def __enter__(self) -> Self:
        return self.start_in_thread()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- HTTP ----------------------------------------------------------------------------

    async def _handle_method(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return error_response(ApiError(401, "Unauthorized"))
        method = request.match_info["method"]
        handler = getattr(self, f"_m_{method.lower()}", None)
        params = await read_params(request)
        call = Call(method=canonical(method), params=params, at=self.clock())
        with self._lock:
            self._calls.append(call)
        if handler is None:
            return self._answer(call, ApiError(404, "Not Found"))
        scripted = self._scripted(method.lower(), params)
        if scripted is not None:
            return self._answer(call, scripted)
        if self.chaos is not None and (fault := self.chaos(call.method)) is not None:
            if fault.kind == "status":
                injected = (
                    flood(RETRY_AFTER_S)
                    if fault.code == 429
                    else ApiError(fault.code, "Internal Server Error")
                )
                return self._answer(call, injected)
            if not await hang(request, fault.seconds):
                call.status = DROPPED
                return web.Response(status=DROPPED)
        try:
            result = await handler(params, call)
        except Refused as refused:
            return self._answer(call, refused.error)
        return self._answer(call, result)

    def _answer(self, call: Call, outcome: Any) -> web.Response:
        if isinstance(outcome, ApiError):
            call.status, call.description = outcome.status, outcome.description
            return error_response(outcome)
        call.result = outcome
        return web.json_response({"ok": True, "result": outcome})

    def _scripted(self, method: str, params: Mapping[str, Any]) -> ApiError | None:
        chat = None if params.get("chat_id") is None else str(params["chat_id"])
        with self._lock:
            for index, item in enumerate(self._script):
                if item.method == method and item.chat_id in (None, chat):
                    del self._script[index]
                    return item.error
        return None

    async def _handle_file(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        path = request.match_info["path"]
        with self._lock:
            self._calls.append(Call("download", {"file_path": path}, self.clock()))
            found = next((f for f in self._files.values() if f.path == path), None)
        if found is None:
            return web.Response(status=404)
        return web.Response(body=found.data, content_type="application/octet-stream")

    # -- methods -------------------------------------------------------------------------

    async def _m_getme(self, params: dict[str, Any], call: Call) -> Any:
        return dict(self.bot_user, can_join_groups=True, can_read_all_group_messages=False)

    async def _m_getupdates(self, params: dict[str, Any], call: Call) -> Any:
        if self.webhook is not None:
            raise Refused(ApiError(409, _WEBHOOK_CONFLICT))
        offset = params.get("offset")
        if "allowed_updates" in params:
            self._allowed = params["allowed_updates"] or None
        with self._lock:
            if isinstance(offset, int) and offset > 0:
                self._confirmed = max(self._confirmed, offset)
                self._updates = [u for u in self._updates if u["update_id"] >= offset]
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        limit = int(params.get("limit") or 100)
        with self._lock:
            self._polls += 1
            mine = self._polls
        while True:
            with self._lock:
                if self._polls != mine:  # another client polled meanwhile
                    self.poll_conflicts += 1
                    raise Refused(ApiError(409, _POLL_CONFLICT))
                ready = [u for u in self._updates if self._wanted(u)][:limit]
            if ready or time.monotonic() >= deadline:
                return ready
            await asyncio.sleep(0.01)

    def _wanted(self, update: Mapping[str, Any]) -> bool:
        allowed = self._allowed or ["message", "edited_message", "channel_post", "callback_query"]
        return any(kind in update for kind in allowed)

    async def _m_setwebhook(self, params: dict[str, Any], call: Call) -> Any:
        url = str(params.get("url") or "")
        if url and not url.startswith("https://"):
            raise Refused(bad_request("bad webhook: An HTTPS URL must be provided for webhook"))
        secret = params.get("secret_token")
        if secret is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", str(secret)):
            raise Refused(bad_request("secret token contains unallowed characters"))
        with self._lock:
            if params.get("drop_pending_updates"):
                self._updates.clear()
            self.webhook = Webhook(url, secret, params.get("allowed_updates")) if url else None
        return True

    async def _m_deletewebhook(self, params: dict[str, Any], call: Call) -> Any:
        with self._lock:
            self.webhook = None
            if params.get("drop_pending_updates"):
                self._updates.clear()
        return True

    async def _m_setmycommands(self, params: dict[str, Any], call: Call) -> Any:
        commands = params.get("commands")
        if not isinstance(commands, list) or len(commands) > 100:
            raise Refused(bad_request("commands must be a list of at most 100 BotCommand"))
        for command in commands:
            if not _COMMAND.fullmatch(str(command.get("command", ""))):
                raise Refused(bad_request("BOT_COMMAND_INVALID"))
            if not 1 <= len(str(command.get("description", ""))) <= 256:
                raise Refused(bad_request("BOT_COMMAND_DESCRIPTION_INVALID"))
        self.commands = commands
        return True

    async def _m_sendchataction(self, params: dict[str, Any], call: Call) -> Any:
        if params.get("chat_id") is None or not params.get("action"):
            raise Refused(bad_request("chat_id and action are required"))
        return True

    async def _m_answercallbackquery(self, params: dict[str, Any], call: Call) -> Any:
        if not params.get("callback_query_id"):
            raise Refused(bad_request("query is too old and response timeout expired"))
        return True

    async def _m_getfile(self, params: dict[str, Any], call: Call) -> Any:
        with self._lock:
            found = self._files.get(str(params.get("file_id")))
        if found is None:
            raise Refused(bad_request("invalid file_id"))
        if len(found.data) > CLOUD_FILE_LIMIT:
            raise Refused(bad_request("file is too big"))
        file_id = str(params["file_id"])
        return {
            "file_id": file_id,
            "file_unique_id": found.unique_id,
            "file_size": len(found.data),
            "file_path": found.path,
        }

    # -- webhook delivery ----------------------------------------------------------------

    async def _deliver_webhooks(self) -> None:
        async with aiohttp.ClientSession() as http:
            while True:
                with self._lock:
                    hook, target = self.webhook, self.webhook_target
                    if self.webhook_targets:
                        target = self.webhook_targets[self._next_target % len(self.webhook_targets)]
                        self._next_target += 1
                    update = self._updates[0] if self._updates else None
                if hook is None or target is None or update is None:
                    await asyncio.sleep(0.01)
                    continue
                status = await self._post(http, target, hook, update)
                with self._lock:
                    hook.deliveries.append((update["update_id"], status))
                    if 200 <= status < 300:
                        self._taken.add(update["update_id"])
                        self._updates = [u for u in self._updates if u is not update]
                if not 200 <= status < 300:
                    await asyncio.sleep(self.webhook_retry_delay)

    async def _post(
        self, http: aiohttp.ClientSession, target: str, hook: Webhook, update: Mapping[str, Any]
    ) -> int:
        headers = (
            {"X-Telegram-Bot-Api-Secret-Token": hook.secret_token} if hook.secret_token else {}
        )
        try:
            timeout = aiohttp.ClientTimeout(total=WEBHOOK_TIMEOUT_S)
            async with http.post(target, json=update, headers=headers, timeout=timeout) as response:
                return response.status
        except (aiohttp.ClientError, TimeoutError):
            return 0
