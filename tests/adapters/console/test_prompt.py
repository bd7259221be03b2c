"""The console adapter with a person at the terminal: stdin and stdout on a
pseudo-terminal, so input goes through prompt_toolkit's prompt. Typing goes on
while a reply streams; `/stop` typed meanwhile stops it; Ctrl-D leaves."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from tests.cli.test_e2e_terminal import LONG, child_env
from tests.fakes.anthropic import FakeAnthropic, text_reply
from tests.paths import REPO_ROOT


class Terminal:
    """A child process on a pty; keeps every byte it writes and answers the
    cursor position requests prompt_toolkit sends, as a terminal would."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
        self.proc = subprocess.Popen(
            args, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=REPO_ROOT
        )
        os.close(slave)
        self.output = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self.output.extend(data)
            if b"\x1b[6n" in data:
                os.write(self.master, b"\x1b[20;1R")

    def text(self) -> str:
        with self._lock:
            return self.output.decode("utf-8", "replace")

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def wait_for(self, needle: str, seconds: float = 60.0) -> None:
        deadline = time.monotonic() + seconds
        while needle not in self.text():
            assert time.monotonic() < deadline, f"{needle!r} never appeared"
            time.sleep(0.02)

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=60)
        finally:
            self.proc.kill()
            self._reader.join(timeout=10)
            os.close(self.master)


def test_typing_during_a_reply_and_stop_at_the_prompt(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    fake_anthropic_thread.script(text_reply(LONG, chunk_size=4, chunk_delay=0.1), "Short one.")
    env = child_env(fake_anthropic_thread, tmp_path / "db.sqlite", TERM="xterm-256color")
    terminal = Terminal([sys.executable, "-m", "bot", "chat"], env)
    try:
        terminal.wait_for("you>")
        terminal.type("tell me a long story\r")
        terminal.wait_for("word1 ")  # the reply is streaming
        terminal.type("/stop\r")  # typed at the prompt while it streams
        terminal.wait_for("Stopped.")
        terminal.type("and now?\r")
        terminal.wait_for("Short one.")
        terminal.type("\x04")  # Ctrl-D
        status = terminal.close()
    finally:
        terminal.proc.kill()
    assert status == 0, terminal.text()
    assert "THE-END" not in terminal.text()
    assert "is now the owner" in terminal.text()
    assert fake_anthropic_thread.request_count == 2


def test_run_without_platforms_opens_a_quiet_chat(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    fake_anthropic_thread.script("Hello from run.")
    env = child_env(fake_anthropic_thread, tmp_path / "db.sqlite", TERM="xterm-256color")
    terminal = Terminal([sys.executable, "-m", "bot", "run"], env)
    try:
        terminal.wait_for("you>")
        terminal.type("hi\r")
        terminal.wait_for("Hello from run.")
        terminal.type("\x04")
        status = terminal.close()
    finally:
        terminal.proc.kill()
    assert status == 0, terminal.text()
    assert " INFO " not in terminal.text()  # stderr shares the terminal here
