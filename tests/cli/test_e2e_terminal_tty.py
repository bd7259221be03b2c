"""End to end: `switchboard chat` with stdout on a pseudo-terminal (the TTY path):
replies rendered as Markdown, streamed while they arrive, and nothing the
sanitizer hides ever written to the terminal, not even for a moment (every byte
the child writes is kept and checked)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest

from tests.cli.test_e2e_terminal import LONG, child_env
from tests.fakes.anthropic import FakeAnthropic, text_reply, tool_use_reply
from tests.paths import REPO_ROOT
from tests.terminal import Terminal, garbled, is_log_line

pytestmark = pytest.mark.e2e


def chat_on_a_terminal(
    fake: FakeAnthropic, db: Path, stdin: str, **env_extra: str
) -> tuple[bytes, str, int]:
    """Run the chat with stdout on a pty (100 columns) and stdin piped; returns
    every byte written to the terminal, stderr and the exit status."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    env = child_env(fake, db, TERM="xterm-256color", **env_extra)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", "chat"],
        stdin=subprocess.PIPE,
        stdout=slave,
        stderr=subprocess.PIPE,
        env=env,
        cwd=REPO_ROOT,
    )
    os.close(slave)
    received: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                return
            if not data:
                return
            received.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        _, err = proc.communicate(stdin.encode(), timeout=120)
    finally:
        proc.kill()
    reader.join(timeout=10)
    os.close(master)
    return b"".join(received), err.decode(), proc.returncode


MARKDOWN = """\
# Plan

Here is **the plan** for [the docs](https://example.com/docs):

- first item
- second item

```python
print("hello")
```
"""


def test_replies_are_rendered_as_markdown_and_streamed(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    fake_anthropic_thread.script(text_reply(MARKDOWN, chunk_size=6, chunk_delay=0.05))
    out, err, status = chat_on_a_terminal(fake_anthropic_thread, tmp_path / "db.sqlite", "go\n")
    assert status == 0, err
    text = out.decode("utf-8", "replace")
    assert "•" in text  # list bullets, not "- first item"
    assert "- first item" not in text
    assert "**the plan**" not in text and "the plan" in text  # bold rendered
    assert "```" not in text and 'print("hello")' not in text  # highlighted code block
    assert "print" in text and "hello" in text
    assert "\x1b]8;id=" in text and "https://example.com/docs" in text  # a hyperlink
    # Streamed: the reply's first words were on screen before the final rendering.
    assert text.count("Here is") >= 2
    assert not [line for line in text.splitlines() if " INFO " in line]


def test_streaming_off_for_the_console_prints_each_reply_whole(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    fake_anthropic_thread.script(text_reply(MARKDOWN, chunk_size=6, chunk_delay=0.05))
    out, err, status = chat_on_a_terminal(
        fake_anthropic_thread,
        tmp_path / "db.sqlite",
        "go\n",
        SWITCHBOARD__STREAMING__CONSOLE__ENABLED="false",
    )
    assert status == 0, err
    text = out.decode("utf-8", "replace")
    assert text.count("Here is") == 1 and "•" in text  # rendered once, at the end


def test_silent_reply_and_think_tags_never_reach_the_terminal(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    fake_anthropic_thread.script(
        text_reply("NO_REPLY", chunk_size=2, chunk_delay=0.05),
        text_reply(
            "<think>secret plan, do not show</think>The answer is 42.",
            chunk_size=3,
            chunk_delay=0.05,
        ),
        text_reply(
            "Step one.\n\n<thinking>hidden musings</thinking>\n\nStep two.",
            chunk_size=3,
            chunk_delay=0.05,
        ),
    )
    out, err, status = chat_on_a_terminal(
        fake_anthropic_thread, tmp_path / "db.sqlite", "quiet\nthink\nmore\n"
    )
    assert status == 0, err
    assert fake_anthropic_thread.request_count == 3
    for hidden in (b"NO_", b"REPLY", b"secret", b"<think", b"think>", b"hidden", b"musings"):
        assert hidden not in out
    text = out.decode("utf-8", "replace")
    assert "The answer is 42." in text
    assert "Step one." in text and "Step two." in text


def test_tool_activity_is_shown_while_the_tool_runs(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    fake_anthropic_thread.script(
        tool_use_reply(("current_time", {})),
        text_reply("It is noon.", chunk_size=3, chunk_delay=0.05),
    )
    out, err, status = chat_on_a_terminal(fake_anthropic_thread, tmp_path / "db.sqlite", "time?\n")
    assert status == 0, err
    assert fake_anthropic_thread.request_count == 2
    text = out.decode("utf-8", "replace")
    assert "using current_time…" in text
    assert "It is noon." in text


def test_without_a_prompt_logs_go_above_the_reply_and_stop_keeps_its_text(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    """stdin piped, stdout and stderr on one terminal (the live display, no
    prompt): with -v the run's log lines are printed above the streaming reply,
    never into it; /stop leaves the text so far marked; a reply longer than the
    screen is kept whole."""
    long = " ".join(f"word{i}" for i in range(400)) + " THE-END"
    fake_anthropic_thread.script(
        text_reply(LONG, chunk_size=4, chunk_delay=0.05),
        text_reply(long, chunk_size=12, chunk_delay=0.01),
    )
    env = child_env(fake_anthropic_thread, tmp_path / "db.sqlite", TERM="xterm-256color")
    terminal = Terminal([sys.executable, "-m", "bot", "chat", "-v"], env, stdin_piped=True)
    stdin = terminal.proc.stdin
    assert stdin is not None
    try:
        stdin.write(b"tell me a long story\n")
        stdin.flush()
        terminal.wait_on_screen(lambda lines: "word30" in " ".join(lines), "no word30")
        stdin.write(b"/stop\nand a longer one\n")
        stdin.close()  # EOF: the chat ends once both are answered
        status = terminal.close()
    finally:
        terminal.proc.kill()
    assert status == 0, terminal.text()
    lines = terminal.transcript()
    assert not garbled(lines)
    assert [line for line in lines if is_log_line(line) and " INFO " in line]
    assert not [line for line in lines if is_log_line(line) and "word" in line]
    stopped = lines.index("(stopped)")
    assert "Stopped." in lines[stopped + 1 :]
    first = " ".join(line for line in lines[:stopped] if not is_log_line(line)).split()
    partial = [w for w in first if w.startswith("word")]
    assert len(partial) > 30
    assert partial[:-1] == [f"word{i}" for i in range(len(partial) - 1)]
    after = " ".join(line for line in lines[stopped:] if not is_log_line(line)).split()
    assert [w for w in after if w.startswith("word") or w == "THE-END"] == long.split()
