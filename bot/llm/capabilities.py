"""What a provider's model takes, asked in one place.

A provider answers `supports(model, feature)` (`bot.ports.Provider`):
"images" (image blocks), "documents" (PDFs as document blocks: the provider
reads their text and pages itself), "tools" (tool use). Wrappers
(`CountedProvider`, `GatedProvider`) pass the question on. An object without
the method (a test double) takes images and tools, not documents.

`fitted` turns a request's messages into what the model takes: a document
block becomes its extracted text where documents are not taken, an image a
note where images are not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from bot.llm.types import Block, ChatMessage, DocumentBlock, ImageBlock, TextBlock

Feature = Literal["images", "documents", "tools"]

_DEFAULT: dict[str, bool] = {"images": True, "documents": False, "tools": True}
IMAGE_NOT_TAKEN = "[An image was attached; this model cannot see images.]"


def supports(provider: object, model: str, feature: Feature) -> bool:
    ask = getattr(provider, "supports", None)
    if ask is None:
        return _DEFAULT[feature]
    return bool(ask(model, feature))


def fitted(
    messages: Sequence[ChatMessage], provider: object, model: str
) -> tuple[ChatMessage, ...]:
    """`messages` with the blocks the model does not take replaced (the same
    objects when there is nothing to replace)."""
    kinds = {type(b) for m in messages for b in m.content}
    swap_documents = DocumentBlock in kinds and not supports(provider, model, "documents")
    swap_images = ImageBlock in kinds and not supports(provider, model, "images")
    if not swap_documents and not swap_images:
        return tuple(messages)

    def fit(block: Block) -> Block:
        if swap_documents and isinstance(block, DocumentBlock):
            return block.fallback
        if swap_images and isinstance(block, ImageBlock):
            return TextBlock(IMAGE_NOT_TAKEN)
        return block

    return tuple(
        ChatMessage(m.role, tuple(fit(b) for b in m.content))
        if any(isinstance(b, DocumentBlock | ImageBlock) for b in m.content)
        else m
        for m in messages
    )
