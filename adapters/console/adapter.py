"""Terminal chat.

Input is read all the time, also while a reply runs. Typed at a terminal
(stdin a TTY): a prompt with line editing and history (prompt_toolkit); each
line goes to the pipeline at once, so a line typed during a run joins it or
waits for the next, as on every platform, and `/stop` stops it. Piped: lines
are read ahead, messages go out one after another (each answered before the
next is sent: a script gets one reply per line), while `/stop` goes at once.
EOF (Ctrl-D) ends the chat once the replies still due are out.

Output: when stdout is a TTY, replies are rendered as Markdown and runs are
shown live (`LiveView`: spinner, tool activity, the reply as it streams, in a
region under which the prompt sits; `adapters.console.view`); otherwise plain
text, one reply after another, nothing else. Errors go to stderr, through the
live view when stderr is the same terminal (so is a log handler's stream:
`above`), so that nothing is written over it. `failed_replies` counts the
replies that reported a failure (a piped chat's exit status).
"""

from __future__ import annotations

import asyncio
import getpass
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from bot.config import Secrets, Settings
from bot.ports import Core, Progress, SendProgress
from bot.types import IncomingMessage, Reply, Target

if TYPE_CHECKING:
    from adapters.console.view import TerminalView

PLATFORM = "console"
IMMEDIATE = frozenset({"/stop"})
"""Commands a piped chat sends at once instead of in turn."""


class ConsoleAdapter:
    platform = PLATFORM

    def __init__(
        self,
        user: str,
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        interactive: bool | None = None,
        live: bool | None = None,
    ) -> None:
        self.user = user
        self._in = stdin or sys.stdin
        self._out = stdout or sys.stdout
        self._err = stderr or sys.stderr
        self.interactive = self._in.isatty() if interactive is None else interactive
        """Input from a person at a terminal (a prompt), not a pipe."""
        self._live = self._out.isatty() if live is None else live
        self._core: Core | None = None
        self._view: TerminalView | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._in_flight = 0
        self.failed_replies = 0

    @property
    def channel_id(self) -> str:
        return self.user

    @property
    def live(self) -> bool:
        """stdout is a terminal: Markdown, a spinner and streaming."""
        return self._live

    def conversation_keys(self) -> Sequence[str]:
        return [self.message("").conversation_key]

    async def start(self, core: Core) -> None:
        self._core = core
        if self._live and self._view is None:
            from adapters.console.view import TerminalView

            self._view = TerminalView(self._out, prompt=self.interactive)
            self._view.bind()

    def above(self, stream: TextIO) -> TextIO | None:
        if self._view is None or not _same_terminal(stream, self._out):
            return None
        from adapters.console.view import LogLines

        return LogLines(self._view)

    async def stop(self) -> None:
        if self._view is not None:
            self._view.clear()
        self._core = None

    # -- output ----------------------------------------------------------------

    def show(self, progress: Progress) -> None:
        if self._view is not None:
            self._view.show(progress)

    async def send(self, reply: Reply, progress: SendProgress | None = None) -> list[str]:
        text, failed = reply.text.rstrip(), reply.kind == "error"
        self.failed_replies += failed
        if self._view is None:
            print(text, file=self._err if failed else self._out, flush=True)
        elif not failed or _same_terminal(self._err, self._out):
            self._view.final(text, error=failed)
        else:  # stderr is elsewhere (a file, a pipe)
            self._view.clear()
            print(text, file=self._err, flush=True)
        return []

    async def show_typing(self, target: Target) -> None:
        return None

    # -- input -----------------------------------------------------------------

    async def run(self) -> None:
        """Read messages until EOF (or Ctrl-D / Ctrl-C at a prompt)."""
        core = self._core
        if core is None:
            raise RuntimeError("start() the adapter before run()")
        in_turn: asyncio.Queue[str | None] = asyncio.Queue()
        sender = asyncio.create_task(self._send_in_turn(core, in_turn))
        try:
            async for text in self._prompted() if self.interactive else self._piped():
                if not text.strip():
                    continue
                if self.interactive or text.split()[0].lower() in IMMEDIATE:
                    self._spawn(self._handle(core, text))
                else:
                    in_turn.put_nowait(text)
        finally:
            in_turn.put_nowait(None)
            await sender
            while self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            if self._view is not None:
                self._view.clear()

    async def _send_in_turn(self, core: Core, texts: asyncio.Queue[str | None]) -> None:
        while (text := await texts.get()) is not None:
            await self._handle(core, text)

    async def _handle(self, core: Core, text: str) -> None:
        if self._view is not None:
            self._view.waiting()
            if text.split()[0].lower() in IMMEDIATE:
                self._view.stopping()
        self._in_flight += 1
        try:
            await core.handle(self.message(text))
        finally:
            self._in_flight -= 1
            if self._view is not None and not self._in_flight:
                self._view.clear()  # e.g. a merged message: its run answered

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _piped(self) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, self._in.readline):
            yield line.rstrip("\r\n")

    async def _prompted(self) -> AsyncIterator[str]:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import InMemoryHistory
        from prompt_toolkit.patch_stdout import patch_stdout

        print(
            f"Switchboard chat as {self.user!r}. /help for commands; /stop or Ctrl-C stops "
            "a reply; Ctrl-D quits.",
            file=self._err,
            flush=True,
        )
        session: PromptSession[str] = PromptSession(history=InMemoryHistory())
        view = self._view
        if view is not None:  # the live region is drawn above the input line, by the prompt
            view.attach(session.app)
        message = view.message if view is not None else "you> "
        # Anything else written to stdout or stderr meanwhile goes above the prompt too.
        with patch_stdout(raw=True):
            while True:
                try:
                    line = await session.prompt_async(message)
                except EOFError:
                    return
                except KeyboardInterrupt:  # Ctrl-C: stop the reply, or leave
                    if not self._in_flight:
                        return
                    line = "/stop"
                yield line

    def message(self, text: str) -> IncomingMessage:
        return IncomingMessage(
            platform=PLATFORM,
            platform_user_id=self.user,
            platform_channel_id=self.channel_id,
            text=text,
            user_display_name=self.user,
            chat_type="direct",
        )


def _same_terminal(a: TextIO, b: TextIO) -> bool:
    """Whether two streams write to one terminal (stdout and stderr at a shell)."""
    try:
        if not (a.isatty() and b.isatty()):
            return False
        return os.path.samestat(os.fstat(a.fileno()), os.fstat(b.fileno()))
    except (OSError, ValueError, AttributeError):
        return False


def default_user(settings: Settings) -> str:
    return settings.console.user or getpass.getuser() or "console"


def create_adapter(settings: Settings, secrets: Secrets) -> ConsoleAdapter:
    return ConsoleAdapter(default_user(settings))
