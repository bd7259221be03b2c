"""Where prompt-cache breakpoints go (see `breakpoints`).

The API caches the prompt prefix (tools → system → messages) up to each block
marked with ``cache_control``, at most four per request, and only prefixes of
at least the model's minimum length. The tools' breakpoint goes on the last of
the tools every run has (`LLMRequest.cached_tools`), never on one a run found
with `tool_search`.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.llm.tokens import block_tokens, system_tokens, tool_tokens
from bot.llm.types import Block, ChatMessage, LLMRequest, SystemBlock, TextBlock

MAX_CACHE_BREAKPOINTS = 4
"""The API rejects a request with more blocks carrying `cache_control`."""

Point = tuple[str, int, int]


def breakpoints(
    request: LLMRequest, system: Sequence[SystemBlock], messages: Sequence[ChatMessage]
) -> set[Point]:
    """The blocks that get ``cache_control``, as ("tool" | "system" | "message",
    index, block index) points. By priority: the last message's last block, the
    stored history's last block (`history_end`), the last fixed tool, the system blocks
    marked `cache` (or the last one), latest first; none whose prefix is shorter
    than `cache_min_tokens`; at most four."""
    candidates: list[Point] = []
    if (last := last_cacheable(messages)) is not None:
        candidates.append(("message", len(messages) - 1, last))
    end = request.history_end
    if end is not None and 0 <= end < len(messages) - 1:
        block = last_cacheable(messages[: end + 1])
        if block is not None:
            candidates.append(("message", end, block))
    fixed = len(request.tools) if request.cached_tools is None else request.cached_tools
    if 0 < fixed <= len(request.tools):  # the run's own finds come after it
        candidates.append(("tool", fixed - 1, 0))
    marked = [i for i, b in enumerate(system) if b.cache] or ([len(system) - 1] if system else [])
    candidates += [("system", i, 0) for i in reversed(marked)]
    if request.cache_min_tokens > 0:
        sizes = _prefix_tokens(request, system, messages)
        candidates = [p for p in candidates if sizes[p] >= request.cache_min_tokens]
    return set(candidates[:MAX_CACHE_BREAKPOINTS])


def _prefix_tokens(
    request: LLMRequest, system: Sequence[SystemBlock], messages: Sequence[ChatMessage]
) -> dict[Point, int]:
    """Estimated tokens of the prompt up to and including each block."""
    sizes: dict[Point, int] = {}
    total = 0
    for i, spec in enumerate(request.tools):
        total += tool_tokens(spec)
        sizes[("tool", i, 0)] = total
    for i, sblock in enumerate(system):
        total += system_tokens((sblock,))
        sizes[("system", i, 0)] = total
    for mi, message in enumerate(messages):
        for bi, block in enumerate(message.content):
            total += block_tokens(block)
            sizes[("message", mi, bi)] = total
    return sizes


def is_blank(block: Block) -> bool:
    return isinstance(block, TextBlock) and not block.text.strip()


def last_cacheable(messages: Sequence[ChatMessage]) -> int | None:
    """Index of the block of the last message that takes the breakpoint."""
    if not messages:
        return None
    content = messages[-1].content
    for i in range(len(content) - 1, -1, -1):
        if not is_blank(content[i]):
            return i
    return None
