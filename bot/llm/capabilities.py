"""What a provider's model takes, asked in one place.

A provider answers `supports(model, feature)` (`bot.ports.Provider`):
"images" (image blocks), "documents" (PDFs as document blocks: the provider
reads their text and pages itself), "tools" (tool use). Wrappers
(`CountedProvider`, `GatedProvider`) pass the question on. An object without
the method (a test double) takes images and tools, not documents.

`fitted` turns a request's messages into what the model takes: a document
block becomes its extracted text where documents are not taken, an image a
note where images are not. Where documents are taken, one request carries at
most `REQUEST_MAX_PAGES` pages of them, `REQUEST_MAX_BASE64` of images and
documents together, and documents worth at most 40% of the context window
(`window`); documents past that, in the order they were sent, go as their text.
These are the Messages API's limits (32 MB a request, 100 PDF pages); a
provider with others can be given its own when one needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from bot.llm.tokens import document_tokens
from bot.llm.types import Block, ChatMessage, DocumentBlock, ImageBlock, TextBlock

Feature = Literal["images", "documents", "tools"]

REQUEST_MAX_PAGES = 100
"""PDF pages one request may carry as documents (the Messages API's limit)."""
REQUEST_MAX_BASE64 = 28 * 1024 * 1024
"""Base64 of images and documents in one request: room left under the API's
32 MB for the text, the tools and the JSON around them."""
WINDOW_SHARE = 0.4
"""Documents read as documents take at most this share of the context window."""

_DEFAULT: dict[str, bool] = {"images": True, "documents": False, "tools": True}
IMAGE_NOT_TAKEN = "[An image was attached; this model cannot see images.]"


def supports(provider: object, model: str, feature: Feature) -> bool:
    ask = getattr(provider, "supports", None)
    if ask is None:
        return _DEFAULT[feature]
    return bool(ask(model, feature))


def fitted(
    messages: Sequence[ChatMessage], provider: object, model: str, *, window: int | None = None
) -> tuple[ChatMessage, ...]:
    """`messages` with the blocks the model does not take replaced, and the
    documents past one request's limits (`window`: the model's context
    window, in tokens) replaced by their text; the same objects when there is
    nothing to replace."""
    kinds = {type(b) for m in messages for b in m.content}
    documents = DocumentBlock in kinds
    swap_documents = documents and not supports(provider, model, "documents")
    swap_images = ImageBlock in kinds and not supports(provider, model, "images")
    budget = _Budget(messages, window) if documents and not swap_documents else None
    if not swap_documents and not swap_images and (budget is None or not budget.over):
        return tuple(messages)

    def fit(block: Block) -> Block:
        if isinstance(block, DocumentBlock):
            if swap_documents:
                return block.fallback
            if budget is not None and id(block) in budget.over:
                return TextBlock(f"{OVER_LIMITS.format(name=block.name or 'a PDF')}\n{block.text}")
        if swap_images and isinstance(block, ImageBlock):
            return TextBlock(IMAGE_NOT_TAKEN)
        return block

    return tuple(
        ChatMessage(m.role, tuple(fit(b) for b in m.content))
        if any(isinstance(b, DocumentBlock | ImageBlock) for b in m.content)
        else m
        for m in messages
    )


OVER_LIMITS = (
    "[{name}: read as text, not as a document: with the files sent before it, it is "
    "past what one request may carry as documents (pages, size or context).]"
)


class _Budget:
    """Which documents of a request go as their text: the first ones sent
    stay documents while they fit."""

    def __init__(self, messages: Sequence[ChatMessage], window: int | None) -> None:
        blocks = [b for m in messages for b in m.content]
        size = sum(len(b.data_b64) for b in blocks if isinstance(b, ImageBlock))
        pages = tokens = 0
        limit = int(window * WINDOW_SHARE) if window else None
        self.over: set[int] = set()
        for block in blocks:
            if not isinstance(block, DocumentBlock):
                continue
            cost = document_tokens(block)
            if (
                pages + block.pages > REQUEST_MAX_PAGES
                or size + len(block.data_b64) > REQUEST_MAX_BASE64
                or (limit is not None and tokens + cost > limit)
            ):
                self.over.add(id(block))
                continue
            pages, size, tokens = pages + block.pages, size + len(block.data_b64), tokens + cost
