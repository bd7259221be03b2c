"""Small helpers for text people read: counted words and aligned columns.

Used by the chat replies (Markdown) and the operator CLI (plain text) alike, so
both say "1 run" and "2 runs" the same way.
"""

from __future__ import annotations

from collections.abc import Sequence


def noun(count: int, word: str, many: str | None = None) -> str:
    """The word for `count` of it: "run" for 1, "runs" otherwise (or `many`)."""
    if count == 1:
        return word
    return many if many is not None else f"{word}s"


def plural(count: int, word: str, many: str | None = None) -> str:
    """ "1 run", "0 runs", "1,200 tokens": the count with its word."""
    return f"{count:,} {noun(count, word, many)}"


def columns(rows: Sequence[Sequence[str]], align: str = "", gap: str = "  ") -> list[str]:
    """Rows of cells as lines, each column as wide as its widest cell.

    `align` has one character per column, "<" (left, the default for columns it
    does not mention) or ">" (right). Trailing spaces are dropped."""
    if not rows:
        return []
    count = max(len(row) for row in rows)
    widths = [max((len(row[i]) for row in rows if i < len(row)), default=0) for i in range(count)]
    lines = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            right = i < len(align) and align[i] == ">"
            cells.append(cell.rjust(widths[i]) if right else cell.ljust(widths[i]))
        lines.append(gap.join(cells).rstrip())
    return lines


def counted(counts: Sequence[int], word: str, many: str | None = None) -> list[str]:
    """One cell per count for a column: numbers right-aligned, each followed by
    its word ("1,000 tokens", "    1 token")."""
    numbers = [f"{count:,}" for count in counts]
    width = max((len(number) for number in numbers), default=0)
    return [
        f"{number:>{width}} {noun(count, word, many)}"
        for number, count in zip(numbers, counts, strict=True)
    ]
