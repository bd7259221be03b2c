"""Opening one session with an MCP server (`open_session`): a stdio subprocess
or a streamable-HTTP endpoint, the SDK's `ClientSession` over it, initialized.

What a stdio server gets of the bot: the command and arguments it was
configured with, the working directory `cwd` (else ours), stdin and stdout
(the protocol), stderr (a pipe we read: its lines go to our log at DEBUG,
rate-limited), no other file descriptor, a session and process group of its
own (so it is stopped with its children), and an environment of PATH, HOME,
LANG and TMPDIR plus what its `env` names; the SDK adds LOGNAME, SHELL, TERM
and USER when we have them. Never our platform tokens, API keys, admin token
or database URL (they are in our environment, which it does not inherit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, Self

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import METHOD_NOT_FOUND, Implementation, PaginatedRequestParams
from mcp_types import Tool as Listed

from bot import __version__
from bot.config import McpServerSettings

log = logging.getLogger("switchboard.mcp")

BASE_ENV = ("PATH", "HOME", "LANG", "TMPDIR")
"""What a stdio server gets of our environment (plus its own `env`)."""
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
"""Connect, write and pool: 30 s; read: 300 s (a server may hold a stream open)."""
STDERR_LINES = 20
STDERR_WINDOW_S = 10.0
"""At most STDERR_LINES lines of a server's stderr logged per window; the rest
counted and reported in one line."""
STDERR_LINE_CHARS = 500
CLIENT_INFO = Implementation(name="switchboard", version=__version__)
MAX_PAGES = 100


def server_environment(own: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """A stdio server's environment: `BASE_ENV` from ours, then its own `env`."""
    env = {key: environ[key] for key in BASE_ENV if environ.get(key)}
    env.update(own)
    return env


class _Watched:
    """The session's read stream, setting `ended` once the server's side
    closes (the subprocess exited, the connection ended)."""

    def __init__(self, inner: Any, ended: anyio.Event) -> None:
        self._inner = inner
        self._ended = ended

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended.set()
            raise
        return item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._ended.set()
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class StderrLog:
    """A stdio server's stderr: a pipe whose lines go to our log at DEBUG
    (`switchboard.mcp`, ``mcp.stderr server=NAME: …``), at most
    `STDERR_LINES` per `STDERR_WINDOW_S`. Read to its end whatever the log
    level, so a chatty server never blocks on a full pipe."""

    def __init__(self, server: str) -> None:
        self.server = server
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        self._reader = os.fdopen(read_fd, "rb", buffering=0)
        self._task: asyncio.Task[None] | None = None
        self._pipe: asyncio.ReadTransport | None = None
        self._window = time.monotonic()
        self._logged = 0
        self._dropped = 0

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        stream = asyncio.StreamReader()
        self._pipe, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream), self._reader
        )
        self._task = asyncio.create_task(self._read(stream), name=f"mcp-stderr:{self.server}")

    def spawned(self) -> None:
        """The subprocess holds its end now: ours closes, so the pipe ends with it."""
        with contextlib.suppress(OSError):
            self.writer.close()

    async def aclose(self) -> None:
        self.spawned()
        if self._task is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._task), 2.0)
            self._task.cancel()
        if self._pipe is not None:  # it closes the read end
            self._pipe.close()
        else:
            with contextlib.suppress(OSError):
                self._reader.close()

    async def _read(self, stream: asyncio.StreamReader) -> None:
        pending = b""
        while chunk := await stream.read(65536):
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                self._line(line)
            if len(pending) > STDERR_LINE_CHARS * 4:  # no newline for a long while
                self._line(pending)
                pending = b""
        if pending:
            self._line(pending)
        self._flush_dropped()

    def _line(self, raw: bytes) -> None:
        now = time.monotonic()
        if now - self._window >= STDERR_WINDOW_S:
            self._flush_dropped()
            self._window, self._logged = now, 0
        if self._logged >= STDERR_LINES:
            self._dropped += 1
            return
        self._logged += 1
        if log.isEnabledFor(logging.DEBUG):
            text = raw.decode("utf-8", errors="replace").rstrip()
            if len(text) > STDERR_LINE_CHARS:
                text = text[:STDERR_LINE_CHARS] + "…"
            log.debug("mcp.stderr server=%s: %s", self.server, text)

    def _flush_dropped(self) -> None:
        if self._dropped:
            log.debug("mcp.stderr server=%s: %d more lines not logged", self.server, self._dropped)
            self._dropped = 0


@contextlib.asynccontextmanager
async def open_session(
    name: str,
    config: McpServerSettings,
    *,
    environ: Mapping[str, str] | None = None,
    on_message: MessageHandlerFnT | None = None,
    ended: anyio.Event | None = None,
    read_timeout: float | None = None,
) -> AsyncIterator[ClientSession]:
    """A session with the server, initialized; `ended` is set when the
    server's side closes; `read_timeout` bounds each request that sets no
    timeout of its own (the handshake, tool lists, pings). Enter and leave it
    in one task (the SDK's anyio cancel scopes must be exited by the task that
    entered them)."""
    env = os.environ if environ is None else environ
    resolved = config.resolved(env)
    ended = ended if ended is not None else anyio.Event()
    async with contextlib.AsyncExitStack() as stack:
        if resolved.command is not None:
            stderr = StderrLog(name)
            stack.push_async_callback(stderr.aclose)
            await stderr.start()
            params = StdioServerParameters(
                command=resolved.command,
                args=list(resolved.args),
                env=server_environment(resolved.env, env),
                cwd=config.cwd,
            )
            try:
                read, write = await stack.enter_async_context(
                    stdio_client(params, errlog=stderr.writer)
                )
            finally:
                stderr.spawned()
        else:
            assert resolved.url is not None
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=resolved.headers, timeout=HTTP_TIMEOUT)
            )
            read, write = await stack.enter_async_context(
                streamable_http_client(resolved.url, http_client=http)
            )
        session = await stack.enter_async_context(
            ClientSession(
                _Watched(read, ended),
                write,
                read_timeout_seconds=read_timeout,
                message_handler=on_message,
                client_info=CLIENT_INFO,
            )
        )
        await session.initialize()
        yield session


async def list_tools(session: ClientSession) -> list[Listed]:
    """Every tool the server lists (all pages); none from a server without tools."""
    tools: list[Listed] = []
    cursor: str | None = None
    try:
        for _ in range(MAX_PAGES):
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            result = await session.list_tools(params=params)
            tools += result.tools
            cursor = result.next_cursor
            if not cursor:
                break
    except MCPError as exc:
        if exc.code != METHOD_NOT_FOUND:
            raise
        return []
    return tools
