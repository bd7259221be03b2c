"""The canonical Markdown tree: inline and block nodes (frozen dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

# ---------------------------------------------------------------- inline nodes


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class Styled:
    """Strong, emphasis, strikethrough or `||spoiler||` (the last is not CommonMark)."""

    style: Style
    children: tuple[Inline, ...]


@dataclass(frozen=True, slots=True)
class CodeSpan:
    text: str


@dataclass(frozen=True, slots=True)
class Link:
    href: str
    children: tuple[Inline, ...]


@dataclass(frozen=True, slots=True)
class Image:
    src: str
    alt: str


@dataclass(frozen=True, slots=True)
class Break:
    hard: bool  # False: a soft line break (a newline in the source paragraph)


Style: TypeAlias = Literal["strong", "em", "strike", "spoiler"]
Inline: TypeAlias = Text | Styled | CodeSpan | Link | Image | Break
Cell: TypeAlias = tuple[Inline, ...]

# ----------------------------------------------------------------- block nodes


@dataclass(frozen=True, slots=True)
class Paragraph:
    children: tuple[Inline, ...]


@dataclass(frozen=True, slots=True)
class Heading:
    level: int
    children: tuple[Inline, ...]


@dataclass(frozen=True, slots=True)
class CodeBlock:
    lang: str  # first word of the fence info string, "" if none
    text: str  # raw code, usually ending with "\n"


@dataclass(frozen=True, slots=True)
class BlockQuote:
    children: tuple[Block, ...]


@dataclass(frozen=True, slots=True)
class ListBlock:
    ordered: bool
    start: int
    items: tuple[tuple[Block, ...], ...]


@dataclass(frozen=True, slots=True)
class Table:
    align: tuple[str, ...]  # per column: "left", "center", "right" or ""
    header: tuple[Cell, ...]
    rows: tuple[tuple[Cell, ...], ...]


@dataclass(frozen=True, slots=True)
class HorizontalRule:
    pass


Block: TypeAlias = Paragraph | Heading | CodeBlock | BlockQuote | ListBlock | Table | HorizontalRule
