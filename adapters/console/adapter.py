"""Terminal chat. Piped: each stdin line is one message, answered before the
next is read; exits at EOF. Interactive: a prompt, replies as they come
(including scheduled wakeups, which arrive through `send`)."""

from __future__ import annotations

import asyncio
import getpass
import sys
from typing import TextIO

from bot.config import Secrets, Settings
from bot.ports import Core, SendProgress
from bot.types import IncomingMessage, Reply, Target

PLATFORM = "console"


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
    ) -> None:
        self.user = user
        self._in = stdin or sys.stdin
        self._out = stdout or sys.stdout
        self._err = stderr or sys.stderr
        self.interactive = self._in.isatty() if interactive is None else interactive
        self._core: Core | None = None

    @property
    def channel_id(self) -> str:
        return self.user

    async def start(self, core: Core) -> None:
        self._core = core

    async def stop(self) -> None:
        self._core = None

    async def send(self, reply: Reply, progress: SendProgress | None = None) -> list[str]:
        stream = self._err if reply.kind == "error" else self._out
        text = reply.text.rstrip()
        if self.interactive:
            text = f"\n{text}\n"
        print(text, file=stream, flush=True)
        return []

    async def show_typing(self, target: Target) -> None:
        return None

    async def run(self) -> None:
        """Read messages until EOF (or Ctrl-D / Ctrl-C in a terminal)."""
        core = self._core
        if core is None:
            raise RuntimeError("start() the adapter before run()")
        loop = asyncio.get_running_loop()
        if self.interactive:
            print(
                f"Switchboard chat as {self.user!r}. /help for commands, Ctrl-D to quit.",
                file=self._err,
                flush=True,
            )
        while True:
            if self.interactive:
                print("you> ", end="", file=self._err, flush=True)
            line = await loop.run_in_executor(None, self._in.readline)
            if not line:
                break
            text = line.rstrip("\r\n")
            if not text.strip():
                continue
            await core.handle(self.message(text))

    def message(self, text: str) -> IncomingMessage:
        return IncomingMessage(
            platform=PLATFORM,
            platform_user_id=self.user,
            platform_channel_id=self.channel_id,
            text=text,
            user_display_name=self.user,
            chat_type="direct",
        )


def default_user(settings: Settings) -> str:
    return settings.console.user or getpass.getuser() or "console"


def create_adapter(settings: Settings, secrets: Secrets) -> ConsoleAdapter:
    return ConsoleAdapter(default_user(settings))
