"""Canonical Markdown → Telegram HTML (parse_mode=HTML), split into messages.

Only tags Telegram accepts are produced: b, i, s, code, pre, a, blockquote and
tg-spoiler. Text is escaped (`&`, `<`, `>`; plus `"` in attributes). Headings are
bold lines, lists are "• " / "1. " lines, tables and code are `<pre>` blocks. Entity
nesting follows the Bot API rules: `code` never sits inside another entity (it is
plain text there), `pre` never inside a blockquote, and blockquotes never nest.

Each chunk holds at most 4096 visible UTF-16 code units and is balanced HTML.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from bot.formatting import (
    Block,
    BlockQuote,
    Break,
    CodeBlock,
    CodeSpan,
    Heading,
    HorizontalRule,
    Image,
    Inline,
    Link,
    ListBlock,
    Paragraph,
    Span,
    Styled,
    Table,
    Text,
    Wrap,
    format_table,
    group,
    is_verbatim,
    layout_list,
    merge_runs,
    parse,
    split_chunks,
    utf16_len,
)

LIMIT = 4096
ALLOWED_TAGS = frozenset({"b", "i", "u", "s", "code", "pre", "a", "blockquote", "tg-spoiler"})

_TAGS = {"strong": "b", "em": "i", "strike": "s", "spoiler": "tg-spoiler"}
_TAG_RE = re.compile(r"<[^>]*>")
_ENTITY = re.compile(r"&(?:#\d+|#x[0-9a-fA-F]+|[a-zA-Z]+);")
_LINKABLE = re.compile(r"(?:https?|tg|ftp)://|mailto:", re.IGNORECASE)
_LANG = re.compile(r"[\w+#.-]{1,32}")
_BULLETS = ("•", "◦", "▪")


def render(markdown: str) -> list[str]:
    """Render Markdown as Telegram HTML chunks of at most 4096 visible characters."""
    if not markdown.strip():
        return []
    return split_chunks(_blocks(parse(markdown), False, 0), LIMIT, visible_len, atomic=_ENTITY)


def to_plain_text(html_chunk: str) -> str:
    """The chunk's text without tags (for a resend after "can't parse entities")."""
    return html.unescape(_TAG_RE.sub("", html_chunk))


def visible_len(html_text: str) -> int:
    """Length of the text Telegram shows, in UTF-16 code units."""
    if "<" not in html_text and "&" not in html_text:
        return utf16_len(html_text)
    return utf16_len(to_plain_text(html_text))


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _blocks(blocks: Sequence[Block], quoted: bool, depth: int) -> list[Span]:
    out: list[Span] = []
    for block in blocks:
        match block:
            case Paragraph(children):
                out.append(group(_inlines(children, 0)))
            case Heading(_, children):
                out.append(Wrap("<b>", "</b>", tuple(_inlines(children, 1))))
            case CodeBlock(lang, text):
                out.extend(_pre(text, lang))
            case BlockQuote(children):
                inner = _blocks(children, True, depth)
                for run in inner if quoted else merge_runs(inner, "\n\n"):
                    quote = quoted or is_verbatim(run)
                    out.append(run if quote else Wrap("<blockquote>", "</blockquote>", (run,)))
            case ListBlock(ordered, start, items):
                bullet = _BULLETS[depth % len(_BULLETS)] + " "
                markers = [f"{start + k}. " if ordered else bullet for k in range(len(items))]
                rendered = [_blocks(item, quoted, depth + 1) for item in items]
                out.extend(layout_list(rendered, markers))
            case Table():
                out.extend(_pre(format_table(block), ""))
            case HorizontalRule():
                out.append("———")
    return out


def _pre(code: str, lang: str) -> list[Span]:
    body = _esc(code.rstrip("\n"))
    if not body.strip():
        return []
    if _LANG.fullmatch(lang):
        return [Wrap(f'<pre><code class="language-{lang}">', "</code></pre>", (body,), True)]
    return [Wrap("<pre>", "</pre>", (body,), True)]


def _inlines(nodes: Sequence[Inline], within: int) -> list[Span]:
    """`within`: 0 at top level, 1 inside formatting (no `code` there), 2 inside a link."""
    out: list[Span] = []
    for node in nodes:
        match node:
            case Text(text):
                out.append(_esc(text))
            case Styled(style, children):
                tag = _TAGS[style]
                inner = _inlines(children, max(within, 1))
                out.append(Wrap(f"<{tag}>", f"</{tag}>", tuple(inner)))
            case CodeSpan(text):
                out.append(_esc(text) if within else Wrap("<code>", "</code>", (_esc(text),)))
            case Link(href, children):
                out.append(_link(href, _inlines(children, 2)))
            case Image(src, alt):
                label = _esc(alt or "image")
                out.append(label if within == 2 else _link(src, [label]))
            case Break():
                out.append("\n")
    return out


def _link(href: str, children: list[Span]) -> Span:
    if _LINKABLE.match(href):
        attr = _esc(href).replace('"', "&quot;")
        return Wrap(f'<a href="{attr}">', "</a>", tuple(children))
    if href:  # relative or unsupported scheme: show it, Telegram would reject it
        return group([*children, f" ({_esc(href)})"])
    return group(children)
