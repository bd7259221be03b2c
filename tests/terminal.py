"""A child process on a pseudo-terminal, its output rendered as a terminal
would (`pyte`), so that tests assert on what a person sees: the screen's
lines (`screen()`), and the lines scrolled off its top before them
(`transcript()`), not only on the stream of bytes (`text()`).

The virtual terminal answers what the child asks of it (where the cursor is,
for prompt_toolkit), as a real one would."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable

import pyte

from tests.paths import REPO_ROOT

PATIENCE_S = 60.0
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) ")
"""A log line as `bot.logs.TextFormatter` writes it, from its first column."""
LOG_TEXT = re.compile(r"\d\d:\d\d:\d\d,\d{3}|\b(DEBUG|INFO|WARNING|ERROR)\b +switchboard")
"""A piece of a log line, wherever it is."""


class _Screen(pyte.HistoryScreen):
    def __init__(self, columns: int, lines: int, answer: Callable[[str], None]) -> None:
        super().__init__(columns, lines, history=5000, ratio=0.5)
        self._answer = answer

    def write_process_input(self, data: str) -> None:
        self._answer(data)  # e.g. the cursor position asked with ESC [6n


class Terminal:
    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        *,
        columns: int = 100,
        rows: int = 40,
        stdin_piped: bool = False,
        stderr_piped: bool = False,
    ) -> None:
        """`args` on a pty of `columns` x `rows`: stdin, stdout and stderr on it,
        unless piped (`proc.stdin`, `proc.stderr`)."""
        self.columns = columns
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self._screen = _Screen(columns, rows, self._reply)
        self._stream = pyte.ByteStream(self._screen)
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if stdin_piped else slave,
            stdout=slave,
            stderr=subprocess.PIPE if stderr_piped else slave,
            env=env,
            cwd=REPO_ROOT,
        )
        os.close(slave)
        self.output = bytearray()
        self._lock = threading.RLock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: the child closed the terminal
                return
            if not data:
                return
            with self._lock:
                self.output.extend(data)
                self._stream.feed(data)

    def _reply(self, data: str) -> None:
        os.write(self.master, data.encode())

    # -- what is on it ---------------------------------------------------------------

    def text(self) -> str:
        """Every byte written so far, decoded."""
        with self._lock:
            return self.output.decode("utf-8", "replace")

    def screen(self) -> list[str]:
        """The screen's lines as shown now (trailing blanks removed)."""
        with self._lock:
            return [line.rstrip() for line in self._screen.display]

    def transcript(self) -> list[str]:
        """The lines scrolled off the top, then the screen's, the empty ones
        at the end left out."""
        with self._lock:
            gone = [
                "".join(line[x].data for x in range(self.columns)).rstrip()
                for line in self._screen.history.top
            ]
            lines = gone + [line.rstrip() for line in self._screen.display]
        while lines and not lines[-1]:
            lines.pop()
        return lines

    def cursor_line(self) -> str:
        """The line the cursor is on."""
        with self._lock:
            return str(self._screen.display[self._screen.cursor.y]).rstrip()

    def wait_for(self, needle: str, seconds: float = PATIENCE_S) -> None:
        """Until `needle` has been written (in the byte stream)."""
        self.wait_until(lambda: needle in self.text(), f"{needle!r} never appeared", seconds)

    def wait_on_screen(
        self, condition: Callable[[list[str]], bool], what: str, seconds: float = PATIENCE_S
    ) -> list[str]:
        """Until `condition(screen lines)` holds; returns those lines."""
        found: list[list[str]] = []

        def met() -> bool:
            lines = self.screen()
            if condition(lines):
                found.append(lines)
                return True
            return False

        self.wait_until(met, what, seconds)
        return found[0]

    def wait_until(self, condition: Callable[[], bool], what: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not condition():
            assert time.monotonic() < deadline, f"{what}; the screen:\n" + "\n".join(self.screen())
            time.sleep(0.02)

    # -- driving it ----------------------------------------------------------------

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def close(self, seconds: float = PATIENCE_S) -> int:
        """Wait for the child to end (killed past `seconds`); its exit status."""
        try:
            return self.proc.wait(timeout=seconds)
        finally:
            self.proc.kill()
            self.proc.wait()
            self._reader.join(timeout=10)
            os.close(self.master)


def is_log_line(line: str) -> bool:
    return LOG_LINE.match(line) is not None


def garbled(lines: list[str]) -> list[str]:
    """Lines holding a piece of a log line without being one (a log line
    written into other text, or other text into it)."""
    return [line for line in lines if LOG_TEXT.search(line) and not is_log_line(line)]
