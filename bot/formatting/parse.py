"""Markdown → the node tree, with markdown-it-py; plain text and table layout."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token

from bot.formatting.nodes import (
    Block,
    BlockQuote,
    Break,
    Cell,
    CodeBlock,
    CodeSpan,
    Heading,
    HorizontalRule,
    Image,
    Inline,
    Link,
    ListBlock,
    Paragraph,
    Style,
    Styled,
    Table,
    Text,
)

# ---------------------------------------------------------------------- parser

# html disabled: raw HTML from the model stays literal text. linkify is off.
# text_join is off so escaped characters (`\|`) stay apart and never mark a spoiler.
_MD = MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])
_MD.disable("text_join")


@dataclass(frozen=True, slots=True)
class _Escaped(Text):
    """Text from a backslash escape or an entity while parsing; becomes `Text`."""


def parse(markdown: str) -> tuple[Block, ...]:
    """Parse canonical Markdown into block nodes."""
    blocks, _ = _blocks(_MD.parse(markdown), 0, "")
    return tuple(blocks)


def _blocks(tokens: list[Token], i: int, stop: str) -> tuple[list[Block], int]:
    out: list[Block] = []
    while i < len(tokens):
        t = tokens[i]
        kind = t.type
        if kind == stop:
            return out, i + 1
        if kind == "paragraph_open":
            out.append(Paragraph(_inlines(tokens[i + 1].children)))
            i += 3
        elif kind == "heading_open":
            out.append(Heading(int(t.tag[1:]), _inlines(tokens[i + 1].children)))
            i += 3
        elif kind in ("fence", "code_block"):
            out.append(CodeBlock((t.info.split() or [""])[0], t.content))
            i += 1
        elif kind == "blockquote_open":
            children, i = _blocks(tokens, i + 1, "blockquote_close")
            out.append(BlockQuote(tuple(children)))
        elif kind in ("bullet_list_open", "ordered_list_open"):
            items: list[tuple[Block, ...]] = []
            i += 1
            while tokens[i].type == "list_item_open":
                item, i = _blocks(tokens, i + 1, "list_item_close")
                items.append(tuple(item))
            start = int(t.attrs.get("start", 1))
            out.append(ListBlock(kind == "ordered_list_open", start, tuple(items)))
            i += 1
        elif kind == "table_open":
            table, i = _table(tokens, i + 1)
            out.append(table)
        elif kind == "hr":
            out.append(HorizontalRule())
            i += 1
        else:  # html_block cannot occur with html off; anything else is skipped
            i += 1
    return out, i


def _table(tokens: list[Token], i: int) -> tuple[Table, int]:
    rows: list[tuple[Cell, ...]] = []
    row: list[Cell] = []
    align: list[str] = []
    while tokens[i].type != "table_close":
        t = tokens[i]
        if t.type == "tr_open":
            row = []
        elif t.type in ("th_open", "td_open"):
            if not rows:
                align.append(str(t.attrs.get("style", "")).removeprefix("text-align:"))
            row.append(_inlines(tokens[i + 1].children))
        elif t.type == "tr_close":
            rows.append(tuple(row))
        i += 1
    return Table(tuple(align), rows[0] if rows else (), tuple(rows[1:])), i + 1


_STYLES: dict[str, Style] = {"strong": "strong", "em": "em", "s": "strike"}


def _inlines(tokens: list[Token] | None) -> tuple[Inline, ...]:
    cur: list[Inline] = []
    stack: list[tuple[str, list[Inline], str]] = []
    for t in tokens or []:
        kind = t.type
        if kind in ("softbreak", "hardbreak"):
            cur.append(Break(kind == "hardbreak"))
        elif kind == "code_inline":
            cur.append(CodeSpan(t.content))
        elif kind == "text_special":
            cur.append(_Escaped(t.content))
        elif kind == "image":
            cur.append(Image(str(t.attrs.get("src", "")), plain_text(_inlines(t.children))))
        elif kind.endswith("_open"):
            stack.append((kind[:-5], cur, str(t.attrs.get("href", ""))))
            cur = []
        elif kind.endswith("_close") and stack:
            name, parent, href = stack.pop()
            children = _finish(cur)
            style = _STYLES.get(name)
            parent.append(Styled(style, children) if style else Link(href, children))
            cur = parent
        else:  # text, and (never with html off) html_inline
            cur.append(Text(t.content))
    return _finish(cur)


_MARK = Text("||")


def _finish(nodes: list[Inline]) -> tuple[Inline, ...]:
    """Pair `||spoiler||` markers among siblings, then merge adjacent text."""
    out: list[Inline] = []
    opened = -1  # index of an unpaired marker in `out`
    for node in nodes:
        pieces = node.text.split("||") if type(node) is Text else [node]
        for k, piece in enumerate(pieces):
            if k and opened < 0:
                opened = len(out)
                out.append(_MARK)
            elif k:
                inner = _merge(out[opened + 1 :])
                del out[opened:]
                out.append(Styled("spoiler", inner) if inner else Text("||||"))
                opened = -1
            out.append(Text(piece) if isinstance(piece, str) else piece)
    return _merge(out)


def _merge(nodes: list[Inline]) -> tuple[Inline, ...]:
    out: list[Inline] = []
    for node in nodes:
        if isinstance(node, Text) and out and isinstance(out[-1], Text):
            out[-1] = Text(out[-1].text + node.text)
        elif isinstance(node, Text) and node.text:
            out.append(Text(node.text))
        elif not isinstance(node, Text):
            out.append(node)
    return tuple(out)


def plain_text(nodes: Iterable[Inline]) -> str:
    """The visible text of inline nodes, without any markup."""
    parts: list[str] = []
    for n in nodes:
        if isinstance(n, Text | CodeSpan):
            parts.append(n.text)
        elif isinstance(n, Image):
            parts.append(n.alt)
        elif isinstance(n, Break):
            parts.append("\n" if n.hard else " ")
        else:
            parts.append(plain_text(n.children))
    return "".join(parts)


def _width(s: str) -> int:
    """Monospace display width (wide East Asian characters count 2, marks 0)."""
    w = 0
    for ch in s:
        if unicodedata.combining(ch) or ch in "\u200d\ufe0e\ufe0f":
            continue
        w += 2 if unicodedata.east_asian_width(ch) in "WF" else 1
    return w


def format_table(table: Table) -> str:
    """A table as plain text with aligned columns (for a code block)."""
    rows = [
        [plain_text(c).replace("\n", " ").strip() for c in r] for r in (table.header, *table.rows)
    ]
    ncol = max(len(r) for r in rows)
    rows = [r + [""] * (ncol - len(r)) for r in rows]
    widths = [max(_width(r[k]) for r in rows) for k in range(ncol)]

    def line(row: list[str]) -> str:
        cells = []
        for k, text in enumerate(row):
            pad = widths[k] - _width(text)
            align = table.align[k] if k < len(table.align) else ""
            left = pad if align == "right" else pad // 2 if align == "center" else 0
            cells.append(" " * left + text + " " * (pad - left))
        return " | ".join(cells).rstrip()

    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([line(rows[0]), rule, *(line(r) for r in rows[1:])])
