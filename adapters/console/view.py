"""The terminal's live view of a run (stdout is a TTY): a spinner with what the
agent is doing and the reply growing as Markdown while it streams, in a region
at the bottom of the screen (`adapters.console.screen`); replies, log lines
and what a stopped run had written are printed for good above it, rendered
with `rich` (code blocks, lists, links).

What the region shows and when it goes:
- A message sent: a spinner, until its run reports.
- A run going on: its text so far and, while it works, a spinner with what it
  does. A reply that comes meanwhile (a command's answer) is printed above.
- The run over: its text stays (no spinner) until its reply replaces it, or
  until nothing more is due (`clear`: an answer of NO_REPLY).
- The run stopped (`/stop`, Ctrl-C): what it had written is printed for good,
  marked as stopped (`Progress.text` of its end). Replies to the `/stop`
  ("Stopped.") wait for that, so the transcript reads in order.

The text shown while streaming arrives already filtered (`Progress.text` is
safe to show); this module only draws it."""

from __future__ import annotations

import asyncio
import io
import threading
from collections import deque
from typing import TYPE_CHECKING, TextIO

from rich.console import Console, Group, RenderableType
from rich.spinner import Spinner
from rich.text import Text

from adapters.console.screen import Laid, LiveScreen, PromptScreen, Screen
from bot.ports import Progress

if TYPE_CHECKING:
    from prompt_toolkit.application import Application
    from prompt_toolkit.formatted_text import AnyFormattedText
    from rich.markdown import Markdown

WAITING = ""
"""The region's run before the run of a message sent has reported."""
ENDED_KEPT = 64
"""Runs over whose late events are still recognised (and ignored)."""


class TerminalView:
    def __init__(self, out: TextIO, *, prompt: bool) -> None:
        """`out`: the terminal. `prompt`: a person types at a prompt on it
        (`PromptScreen`), else nobody does (`LiveScreen`)."""
        self.console = Console(file=out, force_terminal=True, highlight=False, soft_wrap=False)
        self._prompt = PromptScreen(self.console, self._region) if prompt else None
        self.screen: Screen = self._prompt or LiveScreen(self.console, self._region)
        self._run: str | None = None
        """The run in the region (`WAITING`: a message's, not reported yet)."""
        self._going = False
        """The region's run goes on (a spinner, replies printed above it)."""
        self._text = ""
        self._laid: Laid | None = None
        """`_text` as Markdown, laid out once per change."""
        self._activity: str | None = None
        self._answered = False
        """A reply came while the region's run went on: its end clears it."""
        self._stopping = False
        self._held: list[RenderableType] = []
        self._ended: deque[str] = deque(maxlen=ENDED_KEPT)
        self._spinner = Spinner("dots", style="cyan")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None

    def bind(self) -> None:
        """Called on the event loop that drives the view (log lines from other
        threads are handed to it)."""
        self._loop, self._thread = asyncio.get_running_loop(), threading.get_ident()

    # -- the prompt (a person at the terminal) ----------------------------------

    def attach(self, app: Application[str] | None) -> None:
        if self._prompt is not None:
            self._prompt.attach(app)

    def message(self) -> AnyFormattedText:
        """The prompt's message: the region, then `you> `."""
        assert self._prompt is not None
        return self._prompt.message()

    # -- a run's progress ---------------------------------------------------------

    def show(self, progress: Progress) -> None:
        if progress.ended:
            self._end(progress)
            return
        if progress.run_id in self._ended:
            return  # a late event of a run already over
        if progress.run_id != self._run:
            self._run, self._answered = progress.run_id, False
        self._going = True
        # A new activity is drawn at once; streamed text at the next frame.
        changed = progress.activity != self._activity
        if progress.text != self._text:
            self._text, self._laid = progress.text, Laid(_markdown(progress.text, links=False))
        self._activity = progress.activity
        self.screen.redraw(at_once=changed)

    def _end(self, progress: Progress) -> None:
        self._ended.append(progress.run_id)
        ours = progress.run_id == self._run
        if progress.text:  # what the run leaves on the screen (stopped: its text, marked)
            if ours:
                self._reset()
            self.screen.print(Group(_markdown(progress.text), Text()))
        elif ours and self._answered:
            self._reset()
        elif ours:
            self._going, self._activity = False, None  # its reply replaces the text
        else:
            return
        self._stopping = False
        self._release()
        self.screen.redraw(at_once=True)

    def waiting(self) -> None:
        """A message went out: a spinner until its run reports."""
        if self._run is None:
            self._run, self._going, self._activity = WAITING, False, "thinking"
            self.screen.redraw(at_once=True)

    def stopping(self) -> None:
        """A `/stop` went out: replies wait until the run has ended (and left
        its text on the screen)."""
        if self._going:
            self._stopping = True

    # -- what is printed for good -----------------------------------------------

    def final(self, text: str, *, error: bool = False) -> None:
        """A reply as sent: it replaces the region (its run's text so far),
        unless the region's run goes on; then it is printed above it."""
        printed = Group(_markdown(text, "red" if error else None), Text())
        if self._going and self._stopping:
            self._held.append(printed)
            return
        if self._going:
            self._answered = True
        else:
            self._reset()
            self.screen.redraw(at_once=True)
        self.screen.print(printed)

    def log(self, line: str) -> None:
        """A log record's line, printed above the region; from any thread."""
        printed = Text(line)
        loop = self._loop
        if loop is not None and threading.get_ident() != self._thread and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self.screen.print, printed)
                return
            except RuntimeError:  # the loop closed meanwhile
                pass
        self.screen.print(printed)

    def clear(self) -> None:
        """Nothing more is due: take the region off the screen."""
        self._reset()
        self._stopping = False
        self._release()
        self.screen.close()

    def _reset(self) -> None:
        self._run, self._going, self._activity = None, False, None
        self._text, self._laid, self._answered = "", None, False

    def _release(self) -> None:
        held, self._held = self._held, []
        for printed in held:
            self.screen.print(printed)

    def _region(self) -> RenderableType | None:
        if self._run is None:
            return None
        parts: list[RenderableType] = []
        if self._laid is not None and self._text:
            parts.append(self._laid)
        moving = self._going or self._run == WAITING
        if moving and (self._activity or not self._text):
            label = Text(f"{self._activity or 'thinking'}…", style="dim italic")
            self._spinner.update(text=label)
            parts.append(self._spinner)
        return Group(*parts) if parts else None


def _markdown(text: str, style: str | None = None, *, links: bool = True) -> Markdown:
    """`text` rendered as Markdown (rich's, imported at the first reply: with
    its code highlighting it is a tenth of a second of the chat's start)."""
    from rich.markdown import Markdown

    return Markdown(text, hyperlinks=links, style=style or "none")


class LogLines(io.TextIOBase):
    """A stream for a log handler: each whole line goes to `TerminalView.log`."""

    def __init__(self, view: TerminalView) -> None:
        super().__init__()
        self._view = view
        self._partial = ""
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self._view.log(line)
        return len(text)
