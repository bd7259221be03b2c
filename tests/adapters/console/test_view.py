"""The terminal view's bookkeeping, in process: what it writes is rendered by
a virtual terminal (`pyte`) and the tests read that screen. Here without a
prompt (`LiveScreen`); the prompt's screen is driven end to end in
test_prompt.py."""

from __future__ import annotations

import asyncio
import io
import threading

import pyte

from adapters.console.view import LogLines, TerminalView
from bot.ports import Progress
from tests.waiting import wait_until

COLUMNS, ROWS = 80, 24


class ScreenFile(io.TextIOBase):
    """A terminal's output: what is written to it is rendered on `screen`."""

    def __init__(self) -> None:
        super().__init__()
        self.screen = pyte.HistoryScreen(COLUMNS, ROWS, history=1000, ratio=0.5)
        self._stream = pyte.Stream(self.screen)
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            self._stream.feed(text.replace("\n", "\r\n"))  # as a terminal's line discipline does
        return len(text)

    def lines(self) -> list[str]:
        with self._lock:
            gone = [
                "".join(line[x].data for x in range(COLUMNS)).rstrip()
                for line in self.screen.history.top
            ]
            lines = gone + [line.rstrip() for line in self.screen.display]
        while lines and not lines[-1]:
            lines.pop()
        return lines


def view() -> tuple[TerminalView, ScreenFile]:
    out = ScreenFile()
    terminal = TerminalView(out, prompt=False)
    terminal.console.size = (COLUMNS, ROWS)
    terminal.bind()
    return terminal, out


async def shown(out: ScreenFile, text: str) -> list[str]:
    await wait_until(lambda: any(text in line for line in out.lines()))
    return out.lines()


async def test_a_reply_during_a_run_goes_above_it_and_the_answer_replaces_the_text() -> None:
    terminal, out = view()
    terminal.waiting()
    terminal.show(Progress("r1", "The answer so far", None))
    await shown(out, "The answer so far")
    terminal.final("You have 4,000 tokens left.")  # a command's reply, the run going on
    lines = await shown(out, "4,000 tokens")
    assert lines.index("You have 4,000 tokens left.") < lines.index("The answer so far")
    terminal.show(Progress("r1", "The answer so far, and more", None))
    terminal.show(Progress("r1", ended=True))
    terminal.final("The answer so far, and more.")
    terminal.clear()
    lines = out.lines()
    assert lines == ["You have 4,000 tokens left.", "", "The answer so far, and more."]


async def test_replies_to_a_stop_wait_for_the_stopped_text() -> None:
    terminal, out = view()
    terminal.waiting()
    terminal.show(Progress("r1", "word0 word1 word2", None))
    await shown(out, "word2")
    terminal.stopping()
    terminal.final("Stopped.")  # the /stop's reply came before the run's end
    await asyncio.sleep(0.05)
    assert "Stopped." not in out.lines()
    terminal.show(Progress("r1", "word0 word1 word2\n\n_(stopped)_", ended=True))
    terminal.clear()
    assert out.lines() == ["word0 word1 word2", "", "(stopped)", "", "Stopped."]


async def test_late_events_of_an_ended_run_draw_nothing() -> None:
    terminal, out = view()
    terminal.show(Progress("r1", "partial", None))
    terminal.show(Progress("r1", ended=True))
    terminal.final("Final.")
    terminal.show(Progress("r1", "partial, late", None))  # an event still in flight
    terminal.clear()
    assert out.lines() == ["Final."]


async def test_log_lines_from_other_threads_are_printed_whole_above_the_region() -> None:
    terminal, out = view()
    terminal.show(Progress("r1", "Streaming text", "using web_fetch"))
    await shown(out, "Streaming text")
    stream = LogLines(terminal)

    def log() -> None:
        stream.write("2026-12-07 10:00:00,000 ERROR   switchboard.llm: one")
        stream.write(" line, written in two pieces\n2026-12-07 10:00:00,001 WARNING ")
        stream.write("switchboard.tools: two\n")

    thread = threading.Thread(target=log)
    thread.start()
    thread.join()
    lines = await shown(out, "switchboard.tools: two")
    first = "2026-12-07 10:00:00,000 ERROR   switchboard.llm: one line, written in two pieces"
    assert lines[:2] == [first, "2026-12-07 10:00:00,001 WARNING switchboard.tools: two"]
    assert lines[2] == "Streaming text"
    terminal.clear()
    assert "Streaming text" not in out.lines()  # the region's text goes with it
