"""One configured MCP server, connected for as long as the process runs.

The session lives in a task of its own (`ServerLink._run`): the SDK's anyio
cancel scopes must be exited by the task that entered them, so nothing else
touches the session. Callers hand their calls over through a queue
(`ServerLink.call`) and wait for the answer; a caller that gives up (its
timeout, a stopped run) cancels its call, and the SDK tells the server
(``notifications/cancelled``).

The task connects, lists the tools (again on ``notifications/tools/list_changed``),
serves calls, and checks now and then that the server still answers. When the
session ends (the subprocess exited, the server closed it, a ping failed, the
HTTP session was terminated) it connects again, with backoff. A call made while
the server is down waits for it, up to the call's timeout. The tools listed
last stay offered meanwhile, so the run's tool definitions do not change.

Logs (`switchboard.mcp`): one WARNING naming the server and the reason when it
goes down (or cannot be reached at start), one INFO when it is back, each
attempt in between at DEBUG.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import anyio
import anyio.abc
from mcp import ClientSession
from mcp.client.session import IncomingMessage
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult, ToolListChangedNotification
from mcp_types import Tool as Listed

from bot.config import McpServerSettings
from bot.errors import ToolFailed
from bot.mcp.transport import list_tools, open_session
from bot.types import utcnow

log = logging.getLogger("switchboard.mcp")

State = Literal["connecting", "up", "down", "stopped"]

RETRY_FIRST_S = 0.5
RETRY_MAX_S = 60.0
PING_SECONDS = 30.0
"""How often an idle session is checked (a failed call checks at once)."""
PING_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 30.0
"""For the handshake, the tool list and pings: a server silent this long is down."""


class Unavailable(ToolFailed):
    """The server was not connected within the call's timeout."""


class CallTimeout(ToolFailed):
    """The call took longer than its timeout (it was cancelled at the server)."""


@dataclass(slots=True)
class _Call:
    tool: str
    args: dict[str, Any]
    timeout: float
    future: asyncio.Future[CallToolResult]


@dataclass(slots=True)
class _Session:
    """What the task keeps of the session it serves."""

    ended: anyio.Event = field(default_factory=anyio.Event)
    relist: anyio.Event = field(default_factory=anyio.Event)
    check: anyio.Event = field(default_factory=anyio.Event)
    reason: str = "the server closed the session"

    def end(self, reason: str) -> None:
        if not self.ended.is_set():
            self.reason = reason
            self.ended.set()


class ServerLink:
    def __init__(
        self,
        name: str,
        config: McpServerSettings,
        *,
        on_tools: Callable[[ServerLink], None] = lambda link: None,
        on_state: Callable[[ServerLink], None] = lambda link: None,
        environ: Mapping[str, str] | None = None,
        retry: tuple[float, float] = (RETRY_FIRST_S, RETRY_MAX_S),
        ping_seconds: float = PING_SECONDS,
    ) -> None:
        self.name = name
        self.config = config
        self.state: State = "connecting"
        self.listed: tuple[Listed, ...] = ()
        """The server's tools as it listed them last (kept while it is down)."""
        self.last_error: str | None = None
        self.changed_at: datetime = utcnow()
        self.connects = 0
        """Sessions opened so far."""
        self._on_tools = on_tools
        self._on_state = on_state
        self._environ = os.environ if environ is None else environ
        self._retry = retry
        self._ping_seconds = ping_seconds
        self._up = asyncio.Event()
        self._stopping = False
        self._send, self._receive = anyio.create_memory_object_stream[_Call](math.inf)
        self._task: asyncio.Task[None] | None = None
        self._scope: anyio.CancelScope | None = None
        self._session: _Session | None = None
        self._warned = False
        """A WARNING said the server is down, and it has not been up since."""
        self._secrets = _secrets(config, self._environ)

    @property
    def transport(self) -> str:
        return self.config.transport

    # -- lifecycle --------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"mcp:{self.name}")

    async def close(self, grace: float = 10.0) -> None:
        """End the session (a stdio server is asked to exit, then stopped) and
        fail the calls still waiting."""
        self._stopping = True
        self._send.close()
        if self._scope is not None:
            self._scope.cancel()
        task = self._task
        if task is not None and not task.done():
            done, _ = await asyncio.wait({task}, timeout=grace)
            if not done:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        while True:  # calls queued and never served
            try:
                call = self._receive.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
            _fail(call, Unavailable(f"the MCP server {self.name} is shutting down"))
        self._receive.close()
        self._set_state("stopped")

    async def wait_up(self, within: float) -> bool:
        """Whether the server is (or gets) connected within `within` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await self._up.wait()
        return self._up.is_set()

    # -- calls ------------------------------------------------------------------

    async def call(self, tool: str, args: Mapping[str, Any], seconds: float) -> CallToolResult:
        """Call `tool` (the server's own name), waiting for the server if it is
        down, all within `seconds`. Raises `ToolFailed` (`Unavailable`,
        `CallTimeout`) when it does not answer."""
        loop = asyncio.get_running_loop()
        sent = False
        try:
            async with asyncio.timeout(seconds):
                await self._up.wait()
                future: asyncio.Future[CallToolResult] = loop.create_future()
                try:
                    self._send.send_nowait(_Call(tool, dict(args), seconds, future))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    raise Unavailable(f"the MCP server {self.name} is shutting down") from None
                sent = True
                return await future
        except TimeoutError:
            if sent:
                raise CallTimeout(
                    f"timed out after {seconds:g} s (the call was cancelled)"
                ) from None
            why = f" ({self.last_error})" if self.last_error else ""
            raise Unavailable(
                f"the MCP server {self.name} is not connected{why}; gave up after {seconds:g} s"
            ) from None

    # -- the session's task -----------------------------------------------------

    async def _run(self) -> None:
        attempt = 0
        while not self._stopping:
            self._scope = anyio.CancelScope()
            reason: str | None = None
            with self._scope:
                reason = await self._session_once()
            if self._stopping:
                break
            attempt = 1 if self.state == "up" else attempt + 1
            self._went_down(reason or "the session ended")
            delay = min(self._retry[1], self._retry[0] * 2 ** (attempt - 1))
            delay *= random.uniform(0.8, 1.2)
            log.debug("mcp.reconnecting server=%s attempt=%d in %.1f s", self.name, attempt, delay)
            with anyio.move_on_after(delay):
                self._scope = anyio.CancelScope()
                with self._scope:
                    await anyio.sleep_forever()

    async def _session_once(self) -> str:
        """Connect and serve until the session ends; why it ended."""
        session_state = _Session()
        self._session = session_state
        try:
            async with open_session(
                self.name,
                self.config,
                environ=self._environ,
                on_message=self._on_message,
                ended=session_state.ended,
                read_timeout=CONNECT_TIMEOUT_S,
            ) as session:
                self.connects += 1
                await self._list(session)
                self._went_up()
                await self._serve(session, session_state)
                return session_state.reason
        except Exception as exc:
            return describe(exc)
        finally:
            self._session = None

    async def _serve(self, session: ClientSession, state: _Session) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._take_calls, session, tg)
            tg.start_soon(self._relisting, session, state)
            tg.start_soon(self._pinging, session, state)
            await state.ended.wait()
            tg.cancel_scope.cancel()

    async def _take_calls(self, session: ClientSession, tg: anyio.abc.TaskGroup) -> None:
        async for call in self._receive:
            if not call.future.done():
                tg.start_soon(self._call, session, call)

    async def _call(self, session: ClientSession, call: _Call) -> None:
        with anyio.CancelScope() as scope:

            def given_up(future: asyncio.Future[CallToolResult]) -> None:
                if future.cancelled():
                    scope.cancel()  # the SDK tells the server (notifications/cancelled)

            call.future.add_done_callback(given_up)
            try:
                result = await session.call_tool(
                    call.tool, call.args, read_timeout_seconds=call.timeout + 1.0
                )
            except MCPError as exc:
                said = self.redact(exc.message)
                _fail(call, ToolFailed(f"the MCP server {self.name} said: {said}"))
                self._after_error(exc)
            except Exception as exc:
                failed = self.redact(describe(exc))
                _fail(call, ToolFailed(f"the call to the MCP server {self.name} failed: {failed}"))
                self._after_error(exc)
            else:
                if not call.future.done():
                    call.future.set_result(result)
            finally:  # cancelled: the session ended (or the caller gave up)
                ended = f"the connection to the MCP server {self.name} ended during the call"
                _fail(call, ToolFailed(ended))

    def _after_error(self, exc: Exception) -> None:
        """A call failed other than with the tool's own error: the session may
        be gone (a subprocess that died, a terminated HTTP session)."""
        state = self._session
        if state is None:
            return
        if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
            state.end("the server closed the connection")
        elif isinstance(exc, MCPError) and exc.message == "Session terminated":
            state.end("the server terminated the session")
        else:
            state.check.set()  # ping now: is it still there?

    async def _relisting(self, session: ClientSession, state: _Session) -> None:
        while True:
            await state.relist.wait()
            state.relist = anyio.Event()
            try:
                await self._list(session)
            except Exception as exc:
                log.warning("mcp.list_failed server=%s: %s", self.name, describe(exc))
                state.check.set()

    async def _pinging(self, session: ClientSession, state: _Session) -> None:
        while True:
            with anyio.move_on_after(self._ping_seconds):
                await state.check.wait()
            state.check = anyio.Event()
            try:
                with anyio.fail_after(PING_TIMEOUT_S):
                    await session.send_ping()
            except Exception as exc:
                state.end(f"it stopped answering ({describe(exc)})")
                return

    async def _list(self, session: ClientSession) -> None:
        self.listed = tuple(await list_tools(session))
        self._on_tools(self)

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, ToolListChangedNotification):
            log.debug("mcp.tools_changed server=%s", self.name)
            if self._session is not None:
                self._session.relist.set()
        elif isinstance(message, Exception):
            log.debug("mcp.transport_error server=%s: %s", self.name, describe(message))

    # -- state --------------------------------------------------------------------

    def _went_up(self) -> None:
        back = self._warned
        self._warned = False
        self._set_state("up")
        self._up.set()
        if back:
            log.info("mcp.up server=%s: connected again (%d tools)", self.name, len(self.listed))
        else:
            log.info(
                "mcp.connected server=%s transport=%s tools=%d",
                self.name,
                self.transport,
                len(self.listed),
            )

    def _went_down(self, reason: str) -> None:
        reason = self.redact(reason)
        self._up.clear()
        self.last_error = reason
        self._set_state("down")
        if not self._warned:
            self._warned = True
            log.warning("mcp.down server=%s: %s", self.name, reason)
        else:
            log.debug("mcp.still_down server=%s: %s", self.name, reason)

    def redact(self, text: str) -> str:
        """`text` without the values of the variables the server's config names
        (an error may quote a URL or a header)."""
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return text

    def _set_state(self, state: State) -> None:
        if state != self.state:
            self.state = state
            self.changed_at = utcnow()
            self._on_state(self)


def _secrets(config: McpServerSettings, environ: Mapping[str, str]) -> list[str]:
    try:
        found = config.resolved(environ).secrets
    except ValueError:  # a variable not set: nothing of it to hide
        return []
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


def _fail(call: _Call, error: BaseException) -> None:
    if not call.future.done():
        call.future.set_exception(error)


def describe(exc: BaseException) -> str:
    """One line for an operator: the innermost error of a group, its type and text."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"command not found: {exc.filename}"
    text = " ".join(str(exc).split())
    kind = type(exc).__name__
    line = f"{kind}: {text}" if text and kind not in ("MCPError",) else text or kind
    return line if len(line) <= 300 else line[:299] + "…"
