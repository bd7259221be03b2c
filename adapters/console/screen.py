"""Where the terminal view draws: a region at the bottom of the screen that is
redrawn (the run going on: its text so far, a spinner), and what is printed
for good above it (replies, a stopped reply's text, log lines).

Two kinds, one owner of the screen's bottom each, so nothing writes over it:

- `PromptScreen` (a person at the terminal): prompt_toolkit owns the bottom;
  the region is drawn as the first lines of the prompt's message, the `you>`
  line under it, and what is printed goes above both through
  `run_in_terminal` (the prompt is taken down, the text written, the prompt
  drawn again below it). An accepted line is left as `you> text` alone: the
  region is no part of a prompt that is done.
- `LiveScreen` (stdin is not a terminal, so there is no prompt): a `rich`
  `Live` display owns it; what is printed while it is up goes above it.

Both draw only the last lines of the region that fit the terminal (`Tail`):
a reply longer than the screen shows its end while it streams; printed for
good, it is kept whole.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.live import Live
from rich.segment import Segment

if TYPE_CHECKING:
    from prompt_toolkit.application import Application
    from prompt_toolkit.formatted_text import AnyFormattedText

PROMPT = "you> "
FRAME_S = 0.125
"""How often the region is drawn while something in it moves (8 frames a second)."""
PROMPT_ROOM = 2
"""Lines the region leaves free under it on a prompt's screen (the input line and one more)."""
LIVE_ROOM = 1
"""Lines it leaves free under it without a prompt (the cursor's)."""

Region = Callable[[], RenderableType | None]
"""What the region shows now (None: nothing, it is taken off the screen)."""


class Screen(Protocol):
    def redraw(self, *, at_once: bool = False) -> None:
        """The region changed: draw it soon (`at_once`: now)."""
        ...

    def print(self, renderable: RenderableType) -> None:
        """Print for good, above the region."""
        ...

    def close(self) -> None:
        """Take the region off the screen."""
        ...


class Tail:
    """The last lines of `renderable` that fit the terminal, `room` lines left under them."""

    def __init__(self, renderable: RenderableType, room: int = 0) -> None:
        self.renderable = renderable
        self.room = room

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.renderable, options.update(height=None), pad=False)
        fits = max(1, (options.max_height or console.height) - self.room)
        yield from _joined(lines[-fits:])


class Laid:
    """A renderable laid out once per width: a long reply's Markdown is not
    parsed and laid out again at every frame, only when its text changed."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable
        self._lines: list[list[Segment]] = []
        self._width = -1

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if options.max_width != self._width:
            whole = options.update(height=None)
            self._lines = console.render_lines(self.renderable, whole, pad=False)
            self._width = options.max_width
        yield from _joined(self._lines)


def _joined(lines: list[list[Segment]]) -> RenderResult:
    for n, line in enumerate(lines):
        if n:
            yield Segment.line()
        yield from line


class LiveScreen:
    def __init__(self, console: Console, region: Region) -> None:
        self.console = console
        self._region = region
        self._live: Live | None = None

    def redraw(self, *, at_once: bool = False) -> None:
        shown = self._region()
        if shown is None:
            self.close()
        elif self._live is None:
            self._live = Live(
                Tail(shown, LIVE_ROOM),
                console=self.console,
                transient=True,  # what stays is printed for good, whole
                refresh_per_second=1 / FRAME_S,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start(refresh=True)
        else:
            self._live.update(Tail(shown, LIVE_ROOM), refresh=at_once)

    def print(self, renderable: RenderableType) -> None:
        self.console.print(renderable)  # above the live display while it is up

    def close(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()


class PromptScreen:
    """The region as the top of the prompt's message (`message`, given to
    `PromptSession.prompt_async`); printing goes above the prompt. The region
    is rendered once a frame (prompt_toolkit asks for the message several
    times a redraw, and on every key)."""

    def __init__(self, console: Console, region: Region) -> None:
        self.console = console
        self._region = region
        self._app: Application[str] | None = None
        self._frame: asyncio.TimerHandle | None = None
        self._message: AnyFormattedText = PROMPT

    def attach(self, app: Application[str] | None) -> None:
        """The prompt session's application, which draws the region (None: no prompt)."""
        self._app = app

    def message(self) -> AnyFormattedText:
        app = self._app
        if app is None or app.is_done:
            return PROMPT  # an accepted line stays as `you> text`, alone
        return self._message

    def redraw(self, *, at_once: bool = False) -> None:
        """Draw at the next frame (`at_once`: now); frames go on while the
        region shows something (a spinner turns, text streams in)."""
        if self._frame is not None and at_once:
            self._frame.cancel()
            self._frame = None
        if self._frame is None:
            loop = asyncio.get_running_loop()
            self._frame = loop.call_later(0 if at_once else FRAME_S, self._draw)

    def _draw(self) -> None:
        self._frame = None
        shown = self._region()
        self._message = PROMPT if shown is None else self._render(shown)
        app = self._app
        if app is not None and app.is_running:
            app.invalidate()
        if shown is not None:
            self.redraw()

    def _render(self, shown: RenderableType) -> AnyFormattedText:
        from prompt_toolkit.formatted_text import ANSI

        with self.console.capture() as captured:
            self.console.print(Tail(shown, PROMPT_ROOM))
        return ANSI(f"{captured.get().rstrip()}\n{PROMPT}")

    def print(self, renderable: RenderableType) -> None:
        with self.console.capture() as captured:
            self.console.print(renderable)
        self.write(captured.get())

    def write(self, text: str) -> None:
        """Write `text` (ANSI, whole lines) above the prompt."""
        app = self._app
        if app is None or not app.is_running:
            self._out(text)
            return
        from prompt_toolkit.application import run_in_terminal

        run_in_terminal(lambda: self._out(text), in_executor=False)

    def _out(self, text: str) -> None:
        file = self.console.file
        with contextlib.suppress(OSError):  # the terminal is gone: nobody to tell
            file.write(text)
            file.flush()

    def close(self) -> None:
        if self._frame is not None:
            self._frame.cancel()
            self._frame = None
        self._message = PROMPT
        app = self._app
        if app is not None and app.is_running:
            app.invalidate()
