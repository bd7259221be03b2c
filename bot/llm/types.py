"""Provider-neutral LLM request and response types.

The agent loop speaks only these; `bot.llm.anthropic` maps them to the SDK.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.types import Usage

TextCallback = Callable[[str], Awaitable[None]]
"""Called with each text delta while a reply streams."""


@dataclass(frozen=True, slots=True)
class Fallback:
    """A model of a call's chain failed and the call goes on to the next
    (`bot.llm.router`): what failed, why ("overloaded", "unavailable",
    "timeout", "rate_limited"), and when the failed attempt began and how
    long it took (its span)."""

    from_model: str
    to_model: str
    reason: str
    error: str
    started_at: float
    """`time.time()` when the failed attempt began."""
    duration_ms: int


FallbackCallback = Callable[[Fallback], Awaitable[None]]
"""Called before the next model of the chain is asked: the text streamed so
far (if any) is to be dropped, the new model's text replaces it."""


@dataclass(frozen=True, slots=True)
class Citation:
    """Where a piece of the model's text comes from: a page its server-side
    search found. `ref` is the provider's own reference to the passage
    (Anthropic: `encrypted_index`), sent back as it came."""

    url: str
    title: str | None = None
    cited_text: str = ""
    ref: str = ""


@dataclass(frozen=True, slots=True)
class TextBlock:
    text: str
    citations: tuple[Citation, ...] = ()


@dataclass(frozen=True, slots=True)
class ImageBlock:
    media_type: str
    data_b64: str = field(repr=False)
    width: int | None = None
    height: int | None = None
    """The pixels, when known (`bot.media` sets them): the token estimate's basis."""


@dataclass(frozen=True, slots=True)
class DocumentBlock:
    """A document the provider reads itself (a PDF: its text and its pages as
    images), when it takes documents (`bot.llm.capabilities`); otherwise the
    model gets `text` instead, the document's extracted text as a note-wrapped
    block (`fallback`)."""

    media_type: str
    data_b64: str = field(repr=False)
    name: str | None = None
    pages: int = 1
    text: str = field(default="", repr=False)
    """What the model reads when the provider takes no documents."""
    chars: int = 0
    """The length of the document's whole text, which the provider reads when
    it takes the document (`text` may be cut): the token estimate's basis."""

    @property
    def fallback(self) -> TextBlock:
        return TextBlock(self.text)


@dataclass(frozen=True, slots=True)
class ToolUseBlock:
    id: str
    name: str
    input: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolResultBlock:
    tool_use_id: str
    content: str
    is_error: bool = False
    images: tuple[ImageBlock, ...] = ()
    """Images the tool returned (an MCP tool's image content), after the text.
    Seen by the model in the run that called the tool; the stored history
    keeps a note of each instead (as for the images people send)."""


@dataclass(frozen=True, slots=True)
class ServerToolUseBlock:
    """A call the model made to a tool the provider runs itself (its web
    search), inside one of its own calls: nothing for us to run."""

    id: str
    name: str
    input: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ServerToolResultBlock:
    """What a provider-run tool returned (search results). `payload` is the
    provider's block content, opaque (encrypted page content), sent back as it
    came so the conversation can go on; `hits` (title, url) and `error` are
    what we may read of it."""

    tool_use_id: str
    name: str
    payload: Any = field(repr=False)
    hits: tuple[tuple[str, str], ...] = ()
    error: str | None = None


Block = (
    TextBlock
    | ImageBlock
    | DocumentBlock
    | ToolUseBlock
    | ToolResultBlock
    | ServerToolUseBlock
    | ServerToolResultBlock
)


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: Literal["user", "assistant"]
    content: tuple[Block, ...]

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


@dataclass(frozen=True, slots=True)
class ServerTool:
    """A capability the provider runs itself, offered in place of a tool of
    ours: "web_search" (the model searches the web within its call; its
    results come back as `ServerToolResultBlock`s and its text with `Citation`s)."""

    kind: Literal["web_search"]
    max_uses: int | None = None


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    input_schema: Mapping[str, Any]
    server: ServerTool | None = None
    """Set: the provider's own tool of that kind, under `name`."""


@dataclass(frozen=True, slots=True)
class SystemBlock:
    """One section of the system prompt. `cache` marks a cache breakpoint after it."""

    text: str
    cache: bool = False


@dataclass(frozen=True, slots=True)
class LLMRequest:
    model: str
    messages: tuple[ChatMessage, ...]
    system: tuple[SystemBlock, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096
    temperature: float | None = None
    timeout: float | None = None
    cache: bool = True
    """Place prompt-cache breakpoints on the stable prefix (tools, system, history)."""
    cache_min_tokens: int = 0
    """The model's minimum cacheable prompt: no breakpoint where the prefix is shorter."""
    history_end: int | None = None
    """Index of the last message of the stored history (the boundary before this
    run's messages): a second message breakpoint goes there when there is room."""
    volatile: str = ""
    """Text appended to the last user message after its cache breakpoint (the
    current time, recalled memories): it changes every turn and is never cached."""
    tool_choice: Literal["auto", "none"] | None = None
    """"none": tools stay defined (the history may use them) but cannot be called."""
    cached_tools: int | None = None
    """How many of `tools`, from the first, are the same in every run (the
    cached prefix); those after them (found by `tool_search` during this run)
    come after the tools' cache breakpoint. None: all of them."""
    fallback: tuple[str, ...] = ()
    """Models to try in turn when `model`'s provider fails in a way that
    passes (`bot.llm.router`)."""
    on_fallback: FallbackCallback | None = field(default=None, compare=False, repr=False)


StopReason = Literal[
    "end_turn",
    "max_tokens",
    "stop_sequence",
    "tool_use",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
]


@dataclass(frozen=True, slots=True)
class LLMResponse:
    content: tuple[Block, ...]
    stop_reason: str
    usage: Usage
    model: str

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolUseBlock))
