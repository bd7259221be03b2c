"""Canonical Markdown → Slack mrkdwn, split into messages of at most 4000 characters.

`*bold*`, `_italic_`, `~strike~`, `` `code` ``, ``` fences (no language), `<url|text>`
links, "> " quotes, "• " / "1. " lists; headings are bold lines and tables are code
blocks. Text is escaped with Slack's three escapes (`&amp;`, `&lt;`, `&gt;`), which
also keeps `<!channel>` or `<@U123>` written by the model literal; bare `@channel`,
`@here` and `@everyone` get a zero-width joiner after the `@` so they never notify.
"""

from __future__ import annotations

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
    plain_text,
    prefix_lines,
    split_chunks,
)

LIMIT = 4000

_MARKS = {"strong": "*", "em": "_", "strike": "~"}
_BROADCAST = re.compile(r"@(?=(?:channel|here|everyone)\b)", re.IGNORECASE)
_TOKEN_OPEN = re.compile(r"<(?=[!@#])")
_ATOMIC = re.compile(r"&(?:amp|lt|gt);|@\u200d\w+")
_LINKABLE = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*:")
_BULLETS = ("•", "◦", "▪")


def render(markdown: str) -> list[str]:
    """Render Markdown as Slack mrkdwn chunks of at most 4000 characters."""
    if not markdown.strip():
        return []
    return split_chunks(_blocks(parse(markdown), False), LIMIT, atomic=_ATOMIC)


def stream_safe(markdown: str) -> str:
    """Markdown for Slack's native streams (`markdown_text`, which Slack renders
    itself): what `render` keeps from notifying stays inert, `@channel` and
    friends and `<!…>` / `<@…>` / `<#…>` tokens."""
    return _TOKEN_OPEN.sub("<\u200d", _BROADCAST.sub("@\u200d", markdown))


def _esc(text: str) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _BROADCAST.sub("@\u200d", text)


def _blocks(blocks: Sequence[Block], quoted: bool, depth: int = 0) -> list[Span]:
    out: list[Span] = []
    for block in blocks:
        match block:
            case Paragraph(children):
                out.append(group(_inlines(children, False)))
            case Heading(_, children):
                out.append(Wrap("*", "*", tuple(_inlines(children, True))))
            case CodeBlock(_, text):
                out.extend(_fence(text))
            case BlockQuote(children):  # Slack quotes do not nest
                inner = _blocks(children, True, depth)
                for run in inner if quoted else merge_runs(inner, "\n"):
                    quote = quoted or is_verbatim(run)
                    out.append(run if quote else prefix_lines(run, "> ", "> "))
            case ListBlock(ordered, start, items):
                bullet = _BULLETS[depth % len(_BULLETS)] + " "
                markers = [f"{start + k}. " if ordered else bullet for k in range(len(items))]
                rendered = [_blocks(item, quoted, depth + 1) for item in items]
                out.extend(layout_list(rendered, markers))
            case Table():
                out.extend(_fence(format_table(block)))
            case HorizontalRule():
                out.append("———")
    return out


def _fence(code: str) -> list[Span]:
    body = _esc(code.rstrip("\n")).replace("```", "``\u200b`")
    return [Wrap("```\n", "\n```", (body,), True)] if body.strip() else []


def _inlines(nodes: Sequence[Inline], bold: bool) -> list[Span]:
    """`bold`: already inside `*…*` (a heading), where a nested `*` would break it."""
    out: list[Span] = []
    for node in nodes:
        match node:
            case Text(text):
                out.append(_esc(text))
            case Styled(style, children) if style == "spoiler" or (bold and style == "strong"):
                out.extend(_inlines(children, bold))  # Slack has no spoilers
            case Styled(style, children):
                mark = _MARKS[style]
                out.append(Wrap(mark, mark, tuple(_inlines(children, bold or mark == "*"))))
            case CodeSpan(text):
                out.append(Wrap("`", "`", (_esc(text).replace("`", "ˋ"),)))
            case Link(href, children):
                out.append(_link(href, plain_text(children)))
            case Image(src, alt):
                out.append(_link(src, alt or "image"))
            case Break():
                out.append("\n")
    return out


def _link(href: str, text: str) -> Span:
    label = _esc(text).replace("|", "∣")
    if not _LINKABLE.match(href):  # relative link: Slack cannot open it
        return label + (f" ({_esc(href)})" if href else "")
    url = href.replace("&", "&amp;").replace("<", "%3C").replace(">", "%3E").replace("|", "%7C")
    if not label or text == href:
        return f"<{url}>"
    return Wrap(f"<{url}|", ">", (label,))
