"""Spans: what each step of a run cost and how long it took.

A run records one span per LLM call (model, tokens, stop reason, duration),
one per tool call (name, error flag, duration; what the tool did when it says:
`bot.ports.ToolOutput.trace`) and one per call of a tool the provider runs itself
("server_tool": its web search's query and results); internal turns triggered by a
run (memory flush, compaction) add theirs under the same run id. Spans are kept
in the `RunState` while the run goes on and stored with the turn
(`trace_spans`: `bot.store.traces.span_rows`); `switchboard trace show RUN_ID`
prints them. An LLM span's name is the model that answered as config names
it ("openrouter/x"; a bare name: the built-in provider), so it says the
provider too; a call that went on to the next model of its fallback chain
adds an error span for each model that failed (`fallback_span`).
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from bot.config import plain_model
from bot.llm.types import Fallback
from bot.types import Usage, utcnow

SpanKind = Literal["llm", "tool", "server_tool", "compaction", "memory_flush"]


@dataclass(frozen=True, slots=True)
class Span:
    kind: SpanKind
    name: str
    """The model of an LLM call, the tool of a tool call."""
    started_at: datetime
    duration_ms: int
    usage: Usage = field(default_factory=Usage)
    is_error: bool = False
    detail: str | None = None
    """LLM: the stop reason (or the error); tool: the error summary."""
    call_id: str | None = None
    """A tool span's call (the model's tool_use id)."""
    under: str | None = None
    """A sub-agent's span: the call (`delegate_task`) it ran under."""
    logged: bool = False
    """An LLM call whose token log was written as it was settled (with the
    charge, `Meter.after_call`): the turn does not write it again."""

    @property
    def model(self) -> str:
        return self.name


current_call: ContextVar[str | None] = ContextVar("current_call", default=None)
"""The tool call being run (set by the executor in the call's own task): a
sub-agent's spans name it as the call they ran under."""


@dataclass(slots=True)
class Timer:
    started_at: datetime = field(default_factory=utcnow)
    _t0: float = field(default_factory=time.perf_counter)

    @property
    def ms(self) -> int:
        return round((time.perf_counter() - self._t0) * 1000)


def fallback_span(kind: SpanKind, fallback: Fallback) -> Span:
    """The failed attempt of a call that went on to the next model of its chain."""
    return Span(
        kind,
        plain_model(fallback.from_model),
        datetime.fromtimestamp(fallback.started_at, UTC),
        fallback.duration_ms,
        is_error=True,
        detail=f"{fallback.reason}: went on to {fallback.to_model}",
    )
