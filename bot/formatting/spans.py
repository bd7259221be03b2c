"""Spans: what renderers build (text, or markup wrapped around children), and the
layout helpers for quotes and lists shared by every renderer."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import TypeAlias

# ---------------------------------------------------------------------- spans


@dataclass(frozen=True, slots=True)
class Wrap:
    """Markup around children; reopened at the start of the next chunk when cut."""

    open: str
    close: str
    children: tuple[Span, ...] = ()
    verbatim: bool = False  # code: keep every space, cut only at newlines


Span: TypeAlias = str | Wrap


def group(parts: Iterable[Span], sep: str = "") -> Wrap:
    """Several spans as one (markup-free) span, joined by `sep`."""
    items = list(parts)
    if sep:
        items = [x for part in items for x in (sep, part)][1:]
    return Wrap("", "", tuple(items))


def flatten(span: Span) -> str:
    """The output text of a span."""
    if isinstance(span, str):
        return span
    return span.open + "".join(flatten(c) for c in span.children) + span.close


def is_verbatim(span: Span) -> bool:
    return isinstance(span, Wrap) and span.verbatim


def prefix_lines(span: Span, first: str, rest: str) -> Wrap:
    """Put `first` before the span and `rest` after each newline outside code."""
    return Wrap("", "", (first, _prefix(span, rest)))


def _prefix(span: Span, rest: str) -> Span:
    if isinstance(span, str):
        return span.replace("\n", "\n" + rest)
    if span.verbatim:
        return span
    return Wrap(span.open, span.close, tuple(_prefix(c, rest) for c in span.children))


def merge_runs(blocks: Iterable[Span], sep: str = "\n") -> list[Span]:
    """Join consecutive non-verbatim blocks with `sep`; code blocks stay on their own."""
    out: list[Span] = []
    for verbatim, run in groupby(blocks, is_verbatim):
        items = list(run)
        out.extend(items if verbatim else [group(items, sep)])
    return out


def layout_list(items: Iterable[Sequence[Span]], markers: Iterable[str]) -> list[Span]:
    """Lay out rendered list items: marker before the first line, indent the rest.

    Each item is a sequence of rendered blocks. Code blocks are moved out of the list
    text (unindented) so fences stay at the start of a line; the rest is merged into
    blocks of lines.
    """
    flat: list[Span] = []
    for blocks, marker in zip(items, markers, strict=False):
        pad = " " * len(marker)
        if not blocks or is_verbatim(blocks[0]):
            flat.append(marker.rstrip())
        for k, block in enumerate(blocks):
            verbatim = is_verbatim(block)
            flat.append(block if verbatim else prefix_lines(block, pad if k else marker, pad))
    return merge_runs(flat, "\n")


def utf16_len(s: str) -> int:
    """Length in UTF-16 code units (how Telegram counts)."""
    return len(s.encode("utf-16-le")) // 2
