"""Loop detection: a model that calls one tool with the same input again and
again (or gets the same result from it with other inputs) burns its budget to
no end.

Each run counts its calls by tool and input (canonical JSON) and its results
by tool and text. The `warn`th time (3rd) the call still runs and its result
ends with a note saying it repeats an earlier one; the `stop`th time (5th) a
repeated call does not run, and a repeated result is the run's last: the run
ends without another LLM call (status "loop"), and the user is told in one
line that it stopped because it was going in circles.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

REPEAT_NOTE = (
    "[Note: this is the {nth} time in this turn that {what}. Repeating it will not "
    "give anything new: change your approach, or answer with what you have. A few "
    "more repeats and this turn is stopped.]"
)
NOT_RUN = "[Not run: this call repeats an earlier one too many times; the turn is stopped.]"
LOOP_REPLY = (
    "I stopped because I was going in circles: I kept calling `{tool}` without getting "
    "anywhere. Please rephrase or narrow the request."
)


def canonical(value: Mapping[str, Any]) -> str:
    """A tool input as one string: the same for the same input, whatever the
    order of its keys."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class Repeats:
    """One run's count of calls (tool, input) and results (tool, text).
    `warn` or `stop` 0: that step is off."""

    def __init__(self, warn: int, stop: int) -> None:
        self.warn, self.stop = warn, stop
        self._calls: Counter[tuple[str, str]] = Counter()
        self._results: Counter[tuple[str, str]] = Counter()

    def call(self, name: str, args: Mapping[str, Any]) -> int:
        """Counts the call; how many times it was made, this one included."""
        key = (name, canonical(args))
        self._calls[key] += 1
        return self._calls[key]

    def result(self, name: str, text: str) -> int:
        """Counts a result; how many times the tool gave it, this one included."""
        key = (name, hashlib.sha256(text.encode("utf-8", "replace")).hexdigest())
        self._results[key] += 1
        return self._results[key]

    def stops(self, count: int) -> bool:
        return bool(self.stop) and count >= self.stop

    def warns(self, count: int) -> bool:
        return bool(self.warn) and count >= self.warn

    def note(self, calls: int, results: int) -> str | None:
        """The note a result ends with, if any."""
        if self.warns(calls):
            return REPEAT_NOTE.format(
                nth=ordinal(calls), what="you made this call with the same input"
            )
        if self.warns(results):
            return REPEAT_NOTE.format(nth=ordinal(results), what="this tool gave this same result")
        return None
