"""The terminal's live view of a run (stdout is a TTY): a spinner with what the
agent is doing, the reply growing as Markdown while it streams, replaced by the
final reply rendered with `rich` (code blocks, lists, links).

The text shown while streaming arrives already filtered (`Progress.text` is
safe to show); this module only draws it."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markdown import Markdown
from rich.spinner import Spinner
from rich.text import Text

from bot.ports import Progress


class TerminalView:
    def __init__(self, out: TextIO | None) -> None:
        """`out`: the terminal; None writes to whatever `sys.stdout` is at the
        time (prompt_toolkit's proxy while a prompt is shown)."""
        self.console = Console(file=out, force_terminal=True, highlight=False, soft_wrap=False)
        self._live: Live | None = None
        self._run: str | None = None
        self._ended: set[str] = set()
        self._activity: str | None = None

    def show(self, progress: Progress) -> None:
        if progress.ended:
            self._ended.add(progress.run_id)
            if progress.run_id == self._run:
                self.clear()
            return
        if progress.run_id in self._ended:
            return  # a late event of a run already answered
        self._run = progress.run_id
        body = self._body(progress)
        # A new activity is drawn at once; streamed text at the next refresh.
        changed, self._activity = progress.activity != self._activity, progress.activity
        if self._live is None:
            self._live = Live(
                body,
                console=self.console,
                transient=True,
                refresh_per_second=8,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start(refresh=True)
        else:
            self._live.update(body, refresh=changed)

    def waiting(self) -> None:
        """A message went out: show the spinner until its run reports."""
        if self._live is None:
            self.show(Progress("", activity="thinking"))

    def final(self, text: str) -> None:
        """The reply as sent: replaces the live view."""
        if self._run is not None:
            self._ended.add(self._run)
        self.clear()
        self.console.print(Markdown(text, hyperlinks=True))
        self.console.print()

    def clear(self) -> None:
        """Take the live view off the screen (transient: nothing stays)."""
        live, self._live, self._run, self._activity = self._live, None, None, None
        if live is not None:
            live.stop()

    @staticmethod
    def _body(progress: Progress) -> RenderableType:
        parts: list[RenderableType] = []
        if progress.text:
            parts.append(Markdown(progress.text, hyperlinks=True))
        if progress.activity or not progress.text:
            label = Text(f"{progress.activity or 'thinking'}…", style="dim italic")
            parts.append(Spinner("dots", text=label, style="cyan"))
        return Group(*parts)
