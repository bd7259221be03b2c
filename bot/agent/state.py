"""What a run is given (`RunSpec`) and what it produces (`RunState`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.agent.traces import Span, SpanKind
from bot.llm.types import Block, ChatMessage, SystemBlock
from bot.ports import Meter, Tool, ToolContext
from bot.types import Usage

TOKEN_SPANS = frozenset({"llm", "compaction", "memory_flush"})


@dataclass(frozen=True, slots=True)
class RunInput:
    """One message a run answers: what the LLM sees, what is stored, and the
    original (an `IncomingMessage` for the pipeline; opaque to the loop)."""

    blocks: tuple[Block, ...]
    text: str
    origin: Any = None
    echo: tuple[str, ...] = ()
    """Transcripts of its voice messages, quoted at the top of the reply."""
    audio_seconds: float = 0.0
    document_chars: int = 0
    """What reading its files cost beyond tokens (recorded on the run)."""


Inbox = Callable[[], Awaitable[Sequence[RunInput]]]
"""Messages that arrived for the conversation while the run was going on."""


@dataclass(frozen=True, slots=True)
class ContextLimits:
    window: int = 200_000
    """The model's context window, in tokens."""
    min_cache_tokens: int = 0
    prune_threshold: float = 0.5
    compact_threshold: float = 0.75
    keep_last: int = 4


@dataclass(slots=True)
class RunState:
    """What a run has produced so far; the caller owns it, so partial work (and its
    token usage) survives a provider failure or a cancellation.

    `messages` starts with the user message and holds what is to be stored (the
    loop's view of the context may be pruned or compacted; this never is).
    `inputs` are the messages answered, each with the index of the user message
    in `messages` its blocks went into."""

    messages: list[ChatMessage] = field(default_factory=list)
    inputs: list[tuple[int, RunInput]] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    final_text: str = ""
    stop_reason: str | None = None
    hit_iteration_limit: bool = False
    last_prompt_tokens: int = 0
    """Input tokens (fresh + cached) of the latest LLM call, as the API counted them."""
    compactions: int = 0

    @classmethod
    def answering(cls, inputs: Sequence[RunInput]) -> RunState:
        blocks = tuple(b for i in inputs for b in i.blocks)
        return cls(messages=[ChatMessage("user", blocks)], inputs=[(0, i) for i in inputs])

    @property
    def calls(self) -> list[Span]:
        """Spans that consumed tokens (LLM calls, mid-run compaction)."""
        return [s for s in self.spans if s.kind in TOKEN_SPANS]

    @property
    def usage(self) -> Usage:
        total = Usage()
        for span in self.calls:
            total = total + span.usage
        return total

    @property
    def iterations(self) -> int:
        return sum(1 for s in self.spans if s.kind == "llm")


@dataclass(frozen=True, slots=True)
class RunSpec:
    model: str
    system: tuple[SystemBlock, ...]
    history: tuple[ChatMessage, ...]
    tools: tuple[Tool, ...]
    context: ToolContext
    max_tokens: int
    max_iterations: int
    temperature: float | None = None
    timeout: float | None = None
    volatile: str = ""
    """Per-turn context appended after the cache breakpoint (time, memories)."""
    limits: ContextLimits = ContextLimits()
    max_continuations: int = 1
    inbox: Inbox | None = None
    span_kind: SpanKind = "llm"
    """"memory_flush" for that internal turn's LLM calls."""
    meter: Meter | None = None
    """Reserves budget before each LLM call and settles it after (None: unmetered)."""
    found: Callable[[], Sequence[Tool]] | None = None
    """Tools a search made callable since the last ask (`tool_search`,
    `bot.tools.search`): added to the run's tools after each tool step."""
    fallback: tuple[str, ...] = ()
    """Models to try in turn when `model`'s provider fails (`bot.llm.router`)."""
