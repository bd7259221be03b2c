"""Canonical Markdown → Discord Markdown, split into messages of at most 2000 characters.

Discord's syntax is close to the canonical one: `**bold**`, `*italic*`, `~~strike~~`,
`||spoiler||`, `` `code` ``, fences with a language, "> " quotes (one level), "# " to
"### " headings (deeper ones are bold lines), "- " / "1. " lists and `[text](url)`
links; tables become code blocks. Markdown characters in plain text are
backslash-escaped (bare URLs are left alone so they stay clickable), and the model's
`@everyone`, `@here`, `<@id>`, `<@!id>` and `<@&id>` get a zero-width space after the
`@` so they never ping, even inside code.
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

LIMIT = 2000

_MARKS = {"strong": "**", "em": "*", "strike": "~~", "spoiler": "||"}
_PING = re.compile(r"@(?=(?:everyone|here)\b)|(?<=<)@(?=[!&]?\d)", re.IGNORECASE)
_SPECIAL = re.compile(r"([\\*_~`|\[\]])")
_LINE_START = re.compile(r"(?:[#>]|[-+](?=\s|#|$))|(\d+)[.)](?=\s|$)")
_URL = re.compile(r"(https?://[^\s<>]+)")
_LANG = re.compile(r"[\w+#.-]{1,32}")
_ATOMIC = re.compile(r"\\[^\s\w]|@\u200b\w+|<@\u200b[!&]?\d+>|<a?:\w+:\d+>|<t:\d+(?::\w)?>")


def render(markdown: str) -> list[str]:
    """Render Markdown as Discord chunks of at most 2000 characters."""
    if not markdown.strip():
        return []
    return split_chunks(_blocks(parse(markdown), False), LIMIT, atomic=_ATOMIC)


def _ping(text: str) -> str:
    return _PING.sub("@\u200b", text)


def _text(text: str, line_start: bool) -> str:
    """Escape plain text; `line_start`: it begins a line (so `#`, `>`, `- ` matter)."""
    pieces = _URL.split(text)  # odd indexes are URLs, left unescaped
    pieces[::2] = [_SPECIAL.sub(r"\\\1", p) for p in pieces[::2]]
    out = "".join(pieces)
    if line_start and (m := _LINE_START.match(out)):
        digits = m[1] or ""  # "1." → "1\.", "#" → "\#"
        out = f"{digits}\\{out[len(digits) :]}"
    return _ping(out)


def _blocks(blocks: Sequence[Block], quoted: bool, depth: int = 0) -> list[Span]:
    out: list[Span] = []
    for block in blocks:
        match block:
            case Paragraph(children):
                out.append(group(_inlines(children, True)))
            case Heading(level, children) if level <= 3:
                out.append(group(["#" * level + " ", *_inlines(children, False)]))
            case Heading(_, children):
                out.append(Wrap("**", "**", tuple(_inlines(children, False))))
            case CodeBlock(lang, text):
                out.extend(_fence(text, lang))
            case BlockQuote(children):  # Discord quotes do not nest
                inner = _blocks(children, True, depth)
                for run in inner if quoted else merge_runs(inner, "\n"):
                    quote = quoted or is_verbatim(run)
                    out.append(run if quote else prefix_lines(run, "> ", "> "))
            case ListBlock(ordered, start, items):
                markers = [f"{start + k}. " if ordered else "- " for k in range(len(items))]
                rendered = [_blocks(item, quoted, depth + 1) for item in items]
                out.extend(layout_list(rendered, markers))
            case Table():
                out.extend(_fence(format_table(block), ""))
            case HorizontalRule():
                out.append("———")
    return out


def _fence(code: str, lang: str) -> list[Span]:
    body = _ping(code.rstrip("\n")).replace("```", "``\u200b`")
    lang = lang if _LANG.fullmatch(lang) else ""
    return [Wrap(f"```{lang}\n", "\n```", (body,), True)] if body.strip() else []


def _inlines(nodes: Sequence[Inline], line_start: bool, in_link: bool = False) -> list[Span]:
    out: list[Span] = []
    for node in nodes:
        match node:
            case Text(text):
                out.append(_text(text, line_start))
            case Styled(style, children):
                mark = _MARKS[style]
                out.append(Wrap(mark, mark, tuple(_inlines(children, False, in_link))))
            case CodeSpan(text):
                out.append(_code_span(text))
            case Link(href, children):
                out.append(_link(href, children))
            case Image(alt=alt) if in_link:  # a link cannot hold another
                out.append(_text(alt or "image", False))
            case Image(src, alt):
                out.append(_link(src, (Text(alt or "image"),)))
            case Break():
                out.append("\n")
        line_start = isinstance(node, Break)
    return out


def _code_span(text: str) -> Span:
    text = _ping(text).replace("``", "`\u200b`")
    if "`" not in text:
        return Wrap("`", "`", (text,))
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return Wrap("``" + pad, pad + "``", (text,))


def _link(href: str, children: Sequence[Inline]) -> Span:
    label = _inlines(children, False, True)
    if not href.lower().startswith(("http://", "https://")):  # Discord links only these
        return group([*label, f" ({_text(href, False)})" if href else ""])
    url = href.replace("(", "%28").replace(")", "%29").replace(" ", "%20")
    if plain_text(children) in ("", href):
        return url
    return Wrap("[", f"]({url})", tuple(label))
