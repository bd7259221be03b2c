"""Canonical Markdown, parsed once, plus the splitting helpers every renderer shares.

The agent answers in CommonMark + GFM strikethrough and tables. `parse()` turns that
into a small typed tree (frozen dataclasses); each adapter walks the tree and builds
*spans* in its own syntax, then `split_chunks()` packs them into messages.

A span is either a `str` (output text, already escaped for the platform) or a `Wrap`:
an element with opening and closing markup around children (`<b>`/`</b>`, `**`/`**`,
a code fence). When a message must be cut inside a `Wrap`, the splitter closes it at
the end of one chunk and reopens it at the start of the next, so every chunk is
balanced on its own. A `verbatim` wrap (code) is cut only at line ends, and only by
hard-splitting an overlong line, never at spaces.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Literal, NamedTuple, TypeAlias

from markdown_it import MarkdownIt
from markdown_it.token import Token

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


# ------------------------------------------------------------------- splitting

_OPEN, _CLOSE, _NL, _VNL, _SP, _WORD, _ATOM = range(7)
_TOKENS = re.compile(r"\n|[^\S\n]+|\S+")
# (kind, text, size, close, close size): close fields are used by _OPEN only
_Ev: TypeAlias = tuple[int, str, int, str, int]
_Stack: TypeAlias = tuple[tuple[int, _Ev], ...]  # (index of the open part, _OPEN event)


class _Cut(NamedTuple):
    at: int  # event to resume from
    nparts: int  # output parts kept
    size: int  # their measured size
    stack: _Stack  # elements open at the cut


def split_chunks(
    blocks: Iterable[Span],
    limit: int,
    measure: Callable[[str], int] = len,
    *,
    atomic: re.Pattern[str] | None = None,
    sep: str = "\n\n",
) -> list[str]:
    """Pack rendered blocks into chunks of at most `limit` units of `measure`.

    `measure` must be additive over concatenation of whole tokens (`len`, or visible
    UTF-16 units for HTML). Blocks are joined by `sep`; a chunk ends preferably between
    blocks, then at a line end, then at a space, and only then inside a word. Matches
    of `atomic` (entities, mentions) are never cut. A `Wrap` cut in the middle is
    closed and reopened. Whitespace-only chunks are dropped.
    """
    chunks: list[str] = []
    cur: list[str] = []
    cur_size = 0
    sep_size = measure(sep)
    for block in blocks:
        text = flatten(block)
        if not text.strip():
            continue
        size = measure(text)
        if cur and cur_size + sep_size + size <= limit:
            cur += (sep, text)
            cur_size += sep_size + size
            continue
        if cur:
            chunks.append("".join(cur))
        if size <= limit:
            cur, cur_size = [text], size
            continue
        parts = _split_block(_events(block, measure, atomic), limit, measure)
        chunks.extend(parts[:-1])
        cur, cur_size = parts[-1:], measure(parts[-1]) if parts else 0
    if cur:
        chunks.append("".join(cur))
    return [c for c in chunks if c.strip()]


def _events(span: Span, measure: Callable[[str], int], atomic: re.Pattern[str] | None) -> list[_Ev]:
    out: list[_Ev] = []
    sizes: dict[str, int] = {}  # tokens repeat a lot (words, entities, markup)

    def size(s: str) -> int:
        if (n := sizes.get(s)) is None:
            n = sizes[s] = measure(s)
        return n

    def words(text: str, verbatim: bool) -> None:
        for m in _TOKENS.finditer(text):
            s = m.group()
            if s == "\n":
                kind = _VNL if verbatim else _NL
            else:
                kind = _SP if s.isspace() and not verbatim else _WORD
            out.append((kind, s, size(s), "", 0))

    def walk(span: Span, verbatim: bool) -> None:
        if isinstance(span, Wrap):
            out.append((_OPEN, span.open, size(span.open), span.close, size(span.close)))
            for child in span.children:
                walk(child, verbatim or span.verbatim)
            out.append((_CLOSE, span.close, 0, "", 0))
            return
        pos = 0
        for m in atomic.finditer(span) if atomic else ():
            if m.end() > m.start():
                words(span[pos : m.start()], verbatim)
                out.append((_ATOM, m.group(), size(m.group()), "", 0))
                pos = m.end()
        words(span[pos:], verbatim)

    walk(span, False)
    return out


def _split_block(events: list[_Ev], limit: int, measure: Callable[[str], int]) -> list[str]:
    out: list[str] = []
    i, n = 0, len(events)
    reopen: _Stack = ()
    while i < n:
        parts = [ev[1] for _, ev in reopen]
        stack = [(k, ev) for k, (_, ev) in enumerate(reopen)]
        size = sum(ev[2] for _, ev in reopen)
        close_cost = sum(ev[4] for _, ev in reopen)
        has_text = False
        nl = sp = cut = None
        while i < n:
            kind, text, tsize, _, csize = events[i]
            if kind == _OPEN:
                stack.append((len(parts), events[i]))
                parts.append(text)
                size += tsize
                close_cost += csize
            elif kind == _CLOSE:
                index, (_, _, osize, _, csize) = stack.pop()
                close_cost -= csize
                if index == len(parts) - 1:  # nothing inside: drop the element
                    parts.pop()
                    size -= osize
                else:
                    parts.append(text)
                    size += csize
            elif has_text or kind not in (_NL, _SP):  # (no leading whitespace)
                if has_text and kind in (_NL, _VNL):
                    nl = _Cut(i, len(parts), size, tuple(stack))
                elif has_text and kind == _SP:
                    sp = _Cut(i, len(parts), size, tuple(stack))
                if size + tsize + close_cost <= limit:
                    parts.append(text)
                    size += tsize
                    has_text = has_text or kind != _VNL
                    i += 1
                    continue
                # Does not fit: a line end (unless early in the chunk), then a space,
                # else cut here, filling the chunk with the start of a long word.
                if nl and (sp is None or nl.at > sp.at or 2 * nl.size >= size):
                    cut = nl
                elif sp:
                    cut = sp
                else:
                    if kind != _ATOM or not has_text:
                        k = _fit(text, limit - size - close_cost, measure, not has_text)
                        parts.append(text[:k])
                        events[i] = (kind, text[k:], measure(text[k:]), "", 0)
                    cut = _Cut(i, len(parts), size, tuple(stack))
                break
            i += 1
        if cut is None:
            out.append("".join(parts))
            break
        kept = parts[: cut.nparts]
        for index, ev in reversed(cut.stack):
            if index == len(kept) - 1:
                kept.pop()
            else:
                kept.append(ev[3])
        out.append("".join(kept))
        # Resume after the line end or space cut at (more whitespace is skipped above).
        reopen, i = cut.stack, cut.at + (cut is nl or cut is sp)
    return out


def _fit(s: str, budget: int, measure: Callable[[str], int], force: bool) -> int:
    """How many leading characters of `s` fit in `budget` (at least one if `force`),
    not cutting before a joiner, variation selector, skin tone or combining mark."""
    used = k = 0
    while k < len(s) and used + measure(s[k]) <= budget:
        used += measure(s[k])
        k += 1

    def glued(k: int) -> bool:
        ch = s[k]
        return (
            s[k - 1] == "\u200d"
            or ch in "\u200d\ufe0e\ufe0f"
            or "\U0001f3fb" <= ch <= "\U0001f3ff"
            or unicodedata.combining(ch) > 0
        )

    while 0 < k < len(s) and glued(k):
        k -= 1
    if k == 0 and force and s:
        k = 1
        while k < len(s) and glued(k):
            k += 1
    return k
