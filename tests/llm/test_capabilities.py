"""What a provider's model takes, asked in one place; the blocks it does not
take replaced before the call; what images and documents count in the
estimate a budget reservation is made from."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.app.counted import CountedProvider
from bot.llm import capabilities
from bot.llm.anthropic import AnthropicProvider
from bot.llm.capabilities import IMAGE_NOT_TAKEN, OVER_LIMITS, fitted, supports
from bot.llm.gate import FairLimiter, GatedProvider
from bot.llm.tokens import PAGE_TOKENS, block_tokens, messages_tokens, text_tokens
from bot.llm.types import ChatMessage, DocumentBlock, ImageBlock, TextBlock
from bot.metrics import Metrics
from tests.llm.test_llm_anthropic import KEY

PDF = DocumentBlock("application/pdf", "JVBERi0=", "report.pdf", 3, "<document>the text</document>")
IMAGE = ImageBlock("image/jpeg", "/9j/", 1568, 1176)


class TextOnly:
    """A provider (as issue 56's OpenAI-compatible ones may be) without documents
    or images."""

    def supports(self, model: str, feature: str) -> bool:
        return feature == "tools"


@pytest.fixture
async def anthropic() -> AsyncIterator[AnthropicProvider]:
    provider = AnthropicProvider(api_key=KEY, base_url="http://127.0.0.1:9")
    try:
        yield provider
    finally:
        await provider.aclose()


async def test_anthropic_takes_everything_and_the_wrappers_ask_it(anthropic) -> None:
    gated = GatedProvider(CountedProvider(anthropic, Metrics(), {}), FairLimiter(1))
    for feature in ("images", "documents", "tools"):
        assert supports(gated, "claude-sonnet-4-5", feature)  # type: ignore[arg-type]
    gated_text_only = GatedProvider(CountedProvider(TextOnly(), Metrics(), {}), FairLimiter(1))  # type: ignore[arg-type]
    assert not supports(gated_text_only, "m", "documents")
    assert not supports(gated_text_only, "m", "images")


def test_an_object_without_the_question_takes_images_and_tools_not_documents() -> None:
    assert supports(object(), "m", "images") and supports(object(), "m", "tools")
    assert not supports(object(), "m", "documents")


def test_blocks_not_taken_are_replaced_and_the_rest_kept_as_they_are(anthropic) -> None:
    history = ChatMessage("assistant", (TextBlock("earlier"),))
    turn = ChatMessage("user", (TextBlock("read this"), PDF, IMAGE))
    assert fitted((history, turn), anthropic, "m") == (history, turn)
    history_kept, changed = fitted((history, turn), TextOnly(), "m")
    assert history_kept is history
    assert changed.content == (
        TextBlock("read this"),
        TextBlock("<document>the text</document>"),
        TextBlock(IMAGE_NOT_TAKEN),
    )


def test_the_estimate_counts_pages_and_pixels() -> None:
    assert block_tokens(PDF) == 3 * PAGE_TOKENS + text_tokens(PDF.text)
    assert block_tokens(ImageBlock("image/png", "x", 200, 150)) == 40  # 200 × 150 / 750
    assert block_tokens(IMAGE) == 1600  # the API shrinks what is larger
    assert block_tokens(ImageBlock("image/png", "x")) == 1600  # size unknown: the most
    message = ChatMessage("user", (TextBlock("hi"), PDF))
    assert messages_tokens([message]) > 3 * PAGE_TOKENS
    # Read as a document, its whole text counts, not only what its text form shows.
    long_one = DocumentBlock(
        "application/pdf", "x", "long.pdf", 3, "<document>cut</document>", 80_000
    )
    assert block_tokens(long_one) == 3 * PAGE_TOKENS + 20_000


def _pdf(name: str, pages: int, data: str = "JVBERi0=") -> DocumentBlock:
    return DocumentBlock("application/pdf", data, name, pages, f"<document>{name}</document>")


def _as_text(block: DocumentBlock) -> TextBlock:
    return TextBlock(f"{OVER_LIMITS.format(name=block.name)}\n{block.text}")


def test_documents_past_100_pages_in_one_request_go_as_their_text(anthropic) -> None:
    """The API reads at most 100 PDF pages a request: the first documents sent
    stay documents while they fit, the rest are read as text; so does one past
    40% of the context window (a 90-page PDF is some 150,000 tokens)."""
    first, second, third = _pdf("a.pdf", 60), _pdf("b.pdf", 60), _pdf("c.pdf", 40)
    turn = ChatMessage("user", (TextBlock("compare"), first, second, third))
    [fitted_turn] = fitted([turn], anthropic, "m")
    assert fitted_turn.content == (TextBlock("compare"), first, _as_text(second), third)
    assert fitted([fitted_turn], anthropic, "m") == (fitted_turn,)  # fitting again: the same

    big = _pdf("big.pdf", 90)
    assert fitted([ChatMessage("user", (big,))], anthropic, "m", window=1_000_000)[0].content == (
        big,
    )
    [small_window] = fitted([ChatMessage("user", (big,))], anthropic, "m", window=200_000)
    assert small_window.content == (_as_text(big),)


def test_documents_past_the_request_size_go_as_their_text(anthropic, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Images count towards the request's bytes too, and stay images."""
    monkeypatch.setattr(capabilities, "REQUEST_MAX_BASE64", 100)
    photo = ImageBlock("image/jpeg", "x" * 60, 10, 10)
    fits, too_big = _pdf("fits.pdf", 1, "y" * 40), _pdf("big.pdf", 1, "z" * 41)
    [turn] = fitted([ChatMessage("user", (photo, fits, too_big))], anthropic, "m")
    assert turn.content == (photo, fits, _as_text(too_big))
