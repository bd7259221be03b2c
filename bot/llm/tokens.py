"""Token estimates without a tokenizer: about four characters a token, plus the
structure the API wraps around each block. Used to place cache breakpoints,
to decide when to prune or compact a history, and by the benchmarks; actual
counts come back in each response's usage and are preferred when known.

Images and documents count what the API charges for them (`image_tokens`,
`document_tokens`), so a budget reservation made before a call covers them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bot.llm.types import (
    Block,
    ChatMessage,
    DocumentBlock,
    ImageBlock,
    ServerToolResultBlock,
    ServerToolUseBlock,
    SystemBlock,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)

CHARS_PER_TOKEN = 4
IMAGE_TOKENS = 1600
"""An image of unknown size, and the most one costs: the API charges about
(width × height) / 750 and shrinks larger images (long edge over 1568 px, or
over about 1,600 tokens) before it reads them."""
IMAGE_MAX_EDGE = 1568
PAGE_TOKENS = IMAGE_TOKENS
"""A PDF page read as a document: the API reads each page as an image too
(besides its text)."""
_TEXT_OVERHEAD = 30  # characters of {"type": "text", "text": ...}
_TOOL_OVERHEAD = 80  # ids and type tags of tool_use / tool_result
_MESSAGE_OVERHEAD = 20


def text_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def image_tokens(width: int, height: int) -> int:
    """What the API charges for an image of `width` × `height` pixels."""
    if width <= 0 or height <= 0:
        return IMAGE_TOKENS
    scale = min(1.0, IMAGE_MAX_EDGE / max(width, height))
    pixels = (width * scale) * (height * scale)
    return min(IMAGE_TOKENS, -(-int(pixels) // 750))


def raw_image_tokens(width: int, height: int) -> int:
    """(width × height) / 750 as it is, without the API's own shrinking: what
    an image of that size would cost if it were read whole."""
    return -(-(width * height) // 750)


def document_tokens(block: DocumentBlock) -> int:
    """A document read as one: its whole text and each page as an image."""
    chars = max(len(block.text), block.chars)
    return -(-chars // CHARS_PER_TOKEN) + block.pages * PAGE_TOKENS


def block_tokens(block: Block) -> int:
    if isinstance(block, TextBlock):
        return text_tokens(block.text) + _TEXT_OVERHEAD // CHARS_PER_TOKEN
    if isinstance(block, ImageBlock):
        if block.width is None or block.height is None:
            return IMAGE_TOKENS
        return image_tokens(block.width, block.height)
    if isinstance(block, DocumentBlock):
        return document_tokens(block)
    if isinstance(block, ToolUseBlock | ServerToolUseBlock):
        payload = block.name + json.dumps(dict(block.input), ensure_ascii=False, default=str)
        return text_tokens(payload) + _TOOL_OVERHEAD // CHARS_PER_TOKEN
    if isinstance(block, ServerToolResultBlock):  # the pages' content, as the API counts it
        payload = json.dumps(block.payload, ensure_ascii=False, default=str)
        return text_tokens(payload) + _TOOL_OVERHEAD // CHARS_PER_TOKEN
    images = IMAGE_TOKENS * len(block.images)
    return text_tokens(block.content) + _TOOL_OVERHEAD // CHARS_PER_TOKEN + images


def message_tokens(message: ChatMessage) -> int:
    # A run estimates the same (immutable) messages several times (history
    # pruning, each call's fit, the meter): remember the last few thousand,
    # keyed by identity and kept alive while remembered, so an id is never
    # reused; not those with images or documents (their bytes would be kept
    # alive too).
    known = _MESSAGE_TOKENS.get(id(message))
    if known is not None and known[0] is message:
        return known[1]
    tokens = _MESSAGE_OVERHEAD // CHARS_PER_TOKEN + sum(block_tokens(b) for b in message.content)
    if not any(_has_image(b) for b in message.content):
        if len(_MESSAGE_TOKENS) >= 4096:
            _MESSAGE_TOKENS.clear()
        _MESSAGE_TOKENS[id(message)] = (message, tokens)
    return tokens


_MESSAGE_TOKENS: dict[int, tuple[ChatMessage, int]] = {}


def _has_image(block: Block) -> bool:
    """Whether the block carries an image's or a document's bytes."""
    return isinstance(block, ImageBlock | DocumentBlock) or (
        isinstance(block, ToolResultBlock) and bool(block.images)
    )


def messages_tokens(messages: Iterable[ChatMessage]) -> int:
    return sum(message_tokens(m) for m in messages)


def tool_tokens(spec: ToolSpec) -> int:
    # A tool's definition is the same object on every request: serialise its
    # schema once (keyed by name and description, checked by the schema's
    # identity), not for every message.
    known = _TOOL_TOKENS.get((spec.name, spec.description))
    if known is not None and known[0] is spec.input_schema:
        return known[1]
    schema = json.dumps(dict(spec.input_schema), ensure_ascii=False, default=str)
    tokens = text_tokens(spec.name + spec.description + schema) + _TOOL_OVERHEAD // CHARS_PER_TOKEN
    if len(_TOOL_TOKENS) >= 1024:
        _TOOL_TOKENS.clear()
    _TOOL_TOKENS[(spec.name, spec.description)] = (spec.input_schema, tokens)
    return tokens


_TOOL_TOKENS: dict[tuple[str, str], tuple[Mapping[str, Any], int]] = {}


def system_tokens(blocks: Sequence[SystemBlock]) -> int:
    return sum(text_tokens(b.text) + _TEXT_OVERHEAD // CHARS_PER_TOKEN for b in blocks)


def prompt_tokens(
    system: Sequence[SystemBlock], messages: Iterable[ChatMessage], tools: Sequence[ToolSpec]
) -> int:
    """The estimated input of one request."""
    return sum(tool_tokens(t) for t in tools) + system_tokens(system) + messages_tokens(messages)
