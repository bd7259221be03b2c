"""What of a reply still being written may be shown: the streaming form of
`sanitize`, for live views (the terminal chat).

`StreamFilter` takes the model's text deltas and answers, after each, the text
that is safe to show now. It never shows what the final `sanitize` could hide:

- nothing at all while the reply could still turn out to be `NO_REPLY`;
- nothing from an opening `<` or `[` on, until it is clearly not a hidden
  construct (a reasoning or tool tag, `<final>`, a tool-call or system marker);
  once it is one, nothing more until the final reply replaces the view;
- an unfinished line that could be a text-form tool call (`Tool call: …`, a
  JSON object) until it ends; finished lines go through `sanitize`.

What is shown is a prefix-safe preview, not the final text: the final
(sanitized) reply replaces it when it arrives.
"""

from __future__ import annotations

import re

from bot.agent.events import Event
from bot.agent.sanitize import SILENT_TOKEN, sanitize

ACTIVITIES = {"thinking": "thinking", "tool_exec": "working", "compacting": "tidying up history"}
"""The activity shown for each `activity` event kind."""

_HIDDEN_TAGS = frozenset(
    [
        "function_calls",
        "function_call",
        "function_results",
        "function_result",
        "invoke",
        "parameter",
        "tool_use",
        "tool_calls",
        "tool_call",
        "tool_results",
        "tool_result",
        "thinking",
        "think",
        "thought",
        "antthinking",
        "reasoning",
        "reflection",
        "final",
        "answer",
        "response",
    ]
)
_MARKERS = (
    "tool call",
    "tool_call",
    "tool calls",
    "tool_calls",
    "tool use",
    "tool_use",
    "called tool",
    "calling tool",
    "tool result",
    "tool_result",
    "tool output",
    "tool_output",
    "historical context",
    "historical_context",
    "system",
)
_CALL_LINES = ("tool call:", "tool_call:")
_TAG_WORD = re.compile(r"/?([\w.:-]*)")
_DECOR = "\t\n\r `*_~\"'“”‘’«»[]()."


class StreamFilter:
    def __init__(self) -> None:
        self.raw = ""
        self._safe_end = 0
        """Where the text checked so far ends (everything before it is harmless)."""
        self._blocked = False
        """A hidden construct began: nothing after it is shown."""

    def feed(self, delta: str) -> str:
        """Add a delta; return what may be shown of the reply so far."""
        self.raw += delta
        return self.visible()

    def visible(self) -> str:
        if not self._blocked:
            self._scan()
        shown = sanitize(_complete_lines(self.raw[: self._safe_end]))
        if _could_be_silent(shown):
            return ""
        return shown

    def _scan(self) -> None:
        text = self.raw
        index = self._safe_end
        while index < len(text):
            char = text[index]
            if char in "<[":
                verdict = _opening(text, index)
                if verdict is None:  # undecided: wait for more text
                    break
                if verdict:
                    self._blocked = True
                    break
            index += 1
        self._safe_end = index


class RunView:
    """What a live view shows of one run, from its events: the text of the LLM
    call streaming now (the final reply is the last call's text, so each call
    starts afresh, but a reply cut by max_tokens goes on) and what the agent is
    doing. `text` is safe to show (`StreamFilter`)."""

    def __init__(self) -> None:
        self.stream = StreamFilter()
        self.activity: str | None = "thinking"
        self.continuing = False
        self.ended = False
        self._before_call = ""
        """What the stream held when the current call began (a continued reply's
        earlier part): what a fallback to the next model goes back to."""

    @property
    def text(self) -> str:
        return self.stream.visible()

    def observe(self, event: Event) -> None:
        data = event.data
        if event.type in ("run.completed", "run.failed", "run.cancelled"):
            self.ended = True
        elif event.type == "chunk":
            self.stream.feed(str(data.get("text", "")))
            self.activity = None
        elif event.type == "activity":
            kind = str(data.get("kind"))
            if kind == "thinking":
                if not self.continuing:
                    self.stream = StreamFilter()  # a new call: its text is the reply now
                self._before_call = self.stream.raw
            self.continuing = False
            using = self.activity is not None and self.activity.startswith("using")
            if kind != "tool_exec" or not using:
                self.activity = ACTIVITIES.get(kind, "working")
        elif event.type == "run.retrying" and data.get("reason") == "fallback":
            self.stream = StreamFilter()  # the next model's text replaces the failed one's
            self.stream.feed(self._before_call)
        elif event.type == "run.retrying":
            self.continuing = data.get("detail") == "continuing"
        elif event.type == "tool.call":
            self.activity = f"using {data.get('tool', 'a tool')}"


def _opening(text: str, index: int) -> bool | None:
    """Whether the `<` or `[` at `index` opens a hidden construct: True, False,
    or None while the text after it is too short to tell."""
    rest = text[index + 1 :]
    if text[index] == "<":
        word = _TAG_WORD.match(rest)
        assert word is not None
        if word.end() == len(rest):
            return None
        name = word.group(1).rsplit(":", 1)[-1].lower()
        return name in _HIDDEN_TAGS or (not name and rest.startswith("/"))
    lowered = rest.lower()
    for marker in _MARKERS:
        if marker.startswith(lowered):
            return None  # could still become this marker
        if lowered.startswith(marker):
            return True
    return False


def _complete_lines(text: str) -> str:
    """`text` without an unfinished last line that could be a text-form call."""
    start = text.rfind("\n") + 1
    last = text[start:].lstrip().lower()
    if last.startswith("{") or any(
        c.startswith(last) or last.startswith(c) for c in _CALL_LINES if last
    ):
        return text[:start]
    return text


def _could_be_silent(text: str) -> bool:
    """True while `text` is empty or could still grow into `NO_REPLY`."""
    core = text.strip(_DECOR)
    return SILENT_TOKEN.startswith(core) or core == SILENT_TOKEN
