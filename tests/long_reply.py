"""A long, tricky Markdown reply shared by the renderer tests: paragraphs of
escapable text and emoji, a code block longer than any platform's limit, a
~5,000-character paragraph with a long bold run."""

from __future__ import annotations

from collections.abc import Sequence

COMMON_WORDS = ("alpha", "a<b", "x>y", "R&D", "🎉", "👨‍👩‍👧", "naïve", "日本語")


def make_reply(extra_words: Sequence[str]) -> tuple[str, str, list[str]]:
    """(markdown, its visible text, its code blocks); `extra_words` are each
    platform's own hazards (mentions, markup characters)."""
    words_pool = [*COMMON_WORDS, *extra_words]
    md: list[str] = []
    text: list[str] = []
    codes: list[str] = []

    def para(n: int, seed: int) -> None:
        words = [words_pool[(seed + k) % len(words_pool)] for k in range(n)]
        md.append(" ".join(words))
        text.append(" ".join(words))

    def code(lines: int, lang: str) -> None:
        body = "\n".join(f"    if a{i} < b && c > d:  # 👨‍👩‍👧 <{i}>" for i in range(lines))
        md.append(f"```{lang}\n{body}\n```")
        text.append(body)
        codes.append(body)

    for seed in range(4):
        para(40, seed)
    code(10, "python")
    para(30, 7)
    code(160, "")  # ~7,000 characters: longer than any platform's limit
    words = [words_pool[k % len(words_pool)] for k in range(900)]
    md.append(
        " ".join(words[:100]) + " **" + " ".join(words[100:800]) + "** " + " ".join(words[800:])
    )
    text.append(" ".join(words))  # one ~5,000 character paragraph with a long bold run
    code(3, "js")
    for seed in range(3):
        para(50, seed + 3)
    return "\n\n".join(md), "\n".join(text), codes


def squash(text: str) -> str:
    """Text without any whitespace, to compare content across chunk boundaries."""
    return "".join(text.split())
