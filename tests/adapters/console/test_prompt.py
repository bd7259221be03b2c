"""The console adapter with a person at the terminal: stdin and stdout on a
pseudo-terminal, so input goes through prompt_toolkit's prompt. Typing goes on
while a reply streams; `/stop` typed meanwhile stops it; Ctrl-D leaves.

What is on the screen is asserted as a person sees it (`tests.terminal`: the
bytes rendered by a virtual terminal): the prompt on its own line under the
reply being streamed, a stopped reply's text kept and marked, a long reply
kept whole, log lines above the reply and never inside it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.cli.test_e2e_terminal import LONG, child_env
from tests.fakes.anthropic import FakeAnthropic, MessageReply, text_reply
from tests.terminal import Terminal, garbled, is_log_line

pytestmark = pytest.mark.e2e

WORD = re.compile(r"word(\d+)")


def chat_terminal(fake: FakeAnthropic, db: Path, *args: str, **env: str) -> Terminal:
    env = child_env(fake, db, TERM="xterm-256color", **env)
    return Terminal([sys.executable, "-m", "bot", "chat", *args], env)


def words(lines: list[str]) -> list[str]:
    return " ".join(lines).split()


def streamed_part(lines: list[str], before: str) -> list[str]:
    """The words of the reply lines just above the line `before` (the reply
    starts at the first line holding `word0`)."""
    end = lines.index(before)
    start = max(i for i, line in enumerate(lines[:end]) if line.startswith("word0 "))
    return words(lines[start:end])


def assert_in_order(streamed: list[str]) -> None:
    """word0 word1 … wordN, the last one possibly cut (the stream stopped inside it)."""
    assert streamed, "no streamed text kept"
    *whole, last = streamed
    assert whole == [f"word{i}" for i in range(len(whole))]
    assert f"word{len(whole)}".startswith(last)


def test_typing_during_a_reply_and_stop_at_the_prompt(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    fake_anthropic_thread.script(text_reply(LONG, chunk_size=4, chunk_delay=0.1), "Short one.")
    terminal = chat_terminal(fake_anthropic_thread, tmp_path / "db.sqlite")
    try:
        terminal.wait_for("you>")
        terminal.type("tell me a long story\r")
        terminal.wait_for("word1 ")  # the reply is streaming
        terminal.type("/stop\r")  # typed at the prompt while it streams
        terminal.wait_for("Stopped.")
        screen = terminal.wait_on_screen(
            lambda lines: "Stopped." in lines, "'Stopped.' not on the screen"
        )
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
    # The partial text stays on the screen, marked, above the answer to /stop.
    assert screen.index("(stopped)") < screen.index("Stopped.")
    assert_in_order(streamed_part(screen, "(stopped)"))
    assert "you> /stop" in screen
    assert not [line for line in terminal.transcript() if "THE-END" in line]


def test_the_prompt_sits_on_its_own_line_under_the_streaming_reply(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    fake_anthropic_thread.script(text_reply(LONG, chunk_size=4, chunk_delay=0.05))
    terminal = chat_terminal(fake_anthropic_thread, tmp_path / "db.sqlite")
    try:
        terminal.wait_for("you>")
        terminal.type("tell me a long story\r")
        terminal.wait_on_screen(lambda lines: "word30" in " ".join(lines), "no word30")
        terminal.type("half a")  # typed, not sent, while the reply streams
        screen = terminal.wait_on_screen(
            lambda lines: "you> half a" in lines and "THE-END" not in " ".join(lines),
            "the prompt with the typed text never showed under the streaming reply",
        )
        prompt = screen.index("you> half a")
        assert terminal.cursor_line() == "you> half a"
        assert any(WORD.search(line) for line in screen[:prompt])  # the reply, above it
        assert not [line for line in screen[prompt + 1 :] if line]  # nothing under it
        # No line carries both the reply and a prompt.
        assert not [line for line in screen if "you>" in line and WORD.search(line)]
        terminal.wait_for("THE-END")

        def settled(lines: list[str]) -> bool:  # the reply printed for good, the prompt under it
            if "you> half a" not in lines:
                return False
            above = words(lines[: lines.index("you> half a")])
            return bool(above) and above[-1] == "THE-END"

        done = terminal.wait_on_screen(settled, "the finished reply and the prompt under it")
        assert done.count("you> half a") == 1  # no copy of the prompt left inside the reply
        end = words(done[: done.index("you> half a")])[-21:]
        assert end == [f"word{i}" for i in range(180, 200)] + ["THE-END"]  # whole, in order
        terminal.type("\x15\x04")  # Ctrl-U (the line typed goes), Ctrl-D
        status = terminal.close()
    finally:
        terminal.proc.kill()
    assert status == 0, terminal.text()


def test_ctrl_c_and_stop_leave_the_partial_reply_on_the_screen(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    # The two cases: stopped after 30 streamed words, nothing was left; after 44,
    # only the first wrapped line. (The replies go on long after: the stop is never late.)
    fake_anthropic_thread.script(
        text_reply(LONG, chunk_size=4, chunk_delay=0.1),
        text_reply(LONG, chunk_size=4, chunk_delay=0.1),
    )
    terminal = chat_terminal(fake_anthropic_thread, tmp_path / "db.sqlite")
    try:
        terminal.wait_for("you>")
        terminal.type("thirty words\r")
        terminal.wait_on_screen(lambda lines: "word29" in " ".join(lines), "no word29")
        terminal.type("\x03")  # Ctrl-C
        first = terminal.wait_on_screen(
            lambda lines: "(stopped)" in lines and "Stopped." in lines, "not stopped by Ctrl-C"
        )
        terminal.type("forty-four words\r")
        terminal.wait_on_screen(
            lambda lines: "word43" in " ".join(lines[first.index("Stopped.") :]), "no word43"
        )
        terminal.type("/stop\r")
        terminal.wait_on_screen(
            lambda lines: lines.count("(stopped)") == 2 and lines.count("Stopped.") == 2,
            "not stopped by /stop",
        )
        terminal.type("\x04")
        status = terminal.close()
    finally:
        terminal.proc.kill()
    assert status == 0, terminal.text()
    lines = terminal.transcript()
    assert "THE-END" not in " ".join(lines)
    stops = [i for i, line in enumerate(lines) if line == "(stopped)"]
    assert len(stops) == 2
    by_ctrl_c = streamed_part(lines[: stops[0] + 1], "(stopped)")
    by_stop = streamed_part(lines[stops[0] + 1 : stops[1] + 1], "(stopped)")
    assert_in_order(by_ctrl_c)
    assert_in_order(by_stop)
    assert len(by_ctrl_c) >= 30 and len(by_stop) >= 44  # all that was on the screen, kept
    assert "Stopped." in lines[stops[0] + 1 : stops[0] + 3]


def test_a_reply_longer_than_the_screen_is_kept_whole_and_once(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    many = " ".join(f"word{i}" for i in range(700)) + " THE-END"  # ~60 lines of 100 columns
    fake_anthropic_thread.script(text_reply(many, chunk_size=40, chunk_delay=0.02))
    terminal = chat_terminal(fake_anthropic_thread, tmp_path / "db.sqlite")
    try:
        terminal.wait_for("you>")
        terminal.type("a very long one\r")
        terminal.wait_on_screen(lambda lines: "word300" in " ".join(lines), "no word300")
        screen = terminal.screen()  # while streaming: its end, and the prompt under it
        assert screen.index("you>") == max(i for i, line in enumerate(screen) if line)
        terminal.wait_for("THE-END")
        terminal.wait_on_screen(lambda lines: "THE-END" in " ".join(lines), "no THE-END")
        terminal.type("\x04")
        status = terminal.close()
    finally:
        terminal.proc.kill()
    assert status == 0, terminal.text()
    lines = terminal.transcript()
    start = lines.index("you> a very long one") + 1
    reply = [w for w in words(lines[start:]) if WORD.fullmatch(w) or w == "THE-END"]
    assert reply == many.split()  # every word, in order, once


def test_log_lines_go_above_the_reply_never_into_it(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    # The stream breaks off after its text (overloaded, no retry): the run fails and
    # logs an ERROR while its text is on the screen; -v adds the INFO lines of the run.
    fake_anthropic_thread.script(
        MessageReply(
            content=({"type": "text", "text": LONG},),
            chunk_size=4,
            chunk_delay=0.02,
            stream_error=("overloaded_error", "Overloaded"),
        ),
        text_reply(LONG, chunk_size=4, chunk_delay=0.02),
    )
    terminal = chat_terminal(
        fake_anthropic_thread, tmp_path / "db.sqlite", "-v", SWITCHBOARD__LLM__MAX_RETRIES="0"
    )
    try:
        terminal.wait_for("you>")
        terminal.type("first\r")
        terminal.wait_for("run.provider_error")
        terminal.type("second\r")
        terminal.wait_for("THE-END")
        terminal.wait_on_screen(lambda lines: "you>" in lines, "no prompt after the reply")
        terminal.type("\x04")
        status = terminal.close()
    finally:
        terminal.proc.kill()
    assert status == 0, terminal.text()
    lines = terminal.transcript()
    logged = [line for line in lines if is_log_line(line)]
    assert [line for line in logged if " ERROR " in line and "run.provider_error" in line]
    assert [line for line in logged if " INFO " in line]
    assert not garbled(lines)
    assert not [line for line in logged if WORD.search(line)]  # no reply text in a log line
    second = lines.index(next(line for line in lines if line.endswith("you> second")))
    reply = [w for w in words(lines[second + 1 :]) if WORD.fullmatch(w) or w == "THE-END"]
    assert reply == LONG.split()


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
