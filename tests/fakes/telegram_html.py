"""Telegram's `parse_mode=HTML`, as the Bot API documents it ("Formatting options").

`parse_html(text)` returns the text a user would see, or raises `HtmlError` with a
description in the server's words ("Unsupported start tag ...", "Can't find end tag
corresponding to start tag ...", ...); the fake answers it as
``400 Bad Request: can't parse entities: <description>``.

Rules checked:
- only the documented tags: b/strong, i/em, u/ins, s/strike/del, tg-spoiler,
  span class="tg-spoiler", a href, tg-emoji emoji-id, code, pre (with an inner
  code class="language-…"), blockquote (optionally expandable);
- every start tag closed, in order; no stray end tags;
- `<`, `>` and `&` outside tags only as entities: the four named ones (&lt; &gt;
  &amp; &quot;) and numeric ones (the real server is lenient about a lone `&` or
  `>`; the documentation says they must be escaped, and so does this fake);
- the documented nesting rules: nothing inside code/pre except pre's inner code;
  a link never inside a link, code or pre; blockquotes never nested.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

FORMATTING = {
    "b": "b",
    "strong": "b",
    "i": "i",
    "em": "i",
    "u": "u",
    "ins": "u",
    "s": "s",
    "strike": "s",
    "del": "s",
    "tg-spoiler": "tg-spoiler",
}
OTHER = {"a", "code", "pre", "blockquote", "span", "tg-emoji"}
NAMED_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_ENTITY = re.compile(r"&(#[0-9]{1,7}|#x[0-9a-fA-F]{1,6}|[a-zA-Z]+);")
_ATTR = re.compile(r"""\s*([a-zA-Z_-]+)\s*(?:=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+)))?""")


class HtmlError(ValueError):
    pass


@dataclass
class _Open:
    tag: str
    offset: int
    attrs: dict[str, str] = field(default_factory=dict)


def parse_html(text: str) -> str:
    """The visible text of a Telegram HTML message; `HtmlError` if Telegram refuses it."""
    out: list[str] = []
    stack: list[_Open] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "<":
            end = text.find(">", i)
            if end < 0:
                raise HtmlError(f"Unclosed start tag at byte offset {_byte(text, i)}")
            body = text[i + 1 : end]
            if body.startswith("/"):
                _close(text, i, body[1:].strip().lower(), stack)
            else:
                _open(text, i, body, stack)
            i = end + 1
        elif ch == "&":
            match = _ENTITY.match(text, i)
            if not match or not _entity_ok(match.group(1)):
                raise HtmlError(f"Unsupported HTML entity at byte offset {_byte(text, i)}")
            out.append(html.unescape(match.group(0)))
            i = match.end()
        elif ch == ">":
            raise HtmlError(f'Unescaped ">" at byte offset {_byte(text, i)}')
        else:
            out.append(ch)
            i += 1
    if stack:
        raise HtmlError(f'Can\'t find end tag corresponding to start tag "{stack[-1].tag}"')
    return "".join(out)


def _byte(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8"))


def _entity_ok(name: str) -> bool:
    if name.startswith("#"):
        code = int(name[2:], 16) if name[1:2] in ("x", "X") else int(name[1:])
        return 0 < code <= 0x10FFFF
    return name in NAMED_ENTITIES


def _open(text: str, at: int, body: str, stack: list[_Open]) -> None:
    name_match = re.match(r"[a-zA-Z][a-zA-Z0-9-]*", body)
    if not name_match:
        raise HtmlError(f"Empty tag name at byte offset {_byte(text, at)}")
    tag = name_match.group(0).lower()
    if tag not in FORMATTING and tag not in OTHER:
        raise HtmlError(f'Unsupported start tag "{tag}" at byte offset {_byte(text, at)}')
    attrs = _attributes(text, at, tag, body[name_match.end() :])
    if tag == "span" and attrs.get("class") != "tg-spoiler":
        raise HtmlError(f'Tag "span" must have class "tg-spoiler" at byte offset {_byte(text, at)}')
    if tag == "a" and not attrs.get("href"):
        raise HtmlError(f'Tag "a" must have attribute "href" at byte offset {_byte(text, at)}')
    if tag == "tg-emoji" and not attrs.get("emoji-id"):
        raise HtmlError(f'Tag "tg-emoji" must have attribute "emoji-id" at {_byte(text, at)}')
    _check_nesting(text, at, tag, attrs, stack)
    stack.append(_Open(tag, at, attrs))


def _attributes(text: str, at: int, tag: str, rest: str) -> dict[str, str]:
    attrs: dict[str, str] = {}
    rest = rest.rstrip().removesuffix("/")
    pos = 0
    while pos < len(rest):
        match = _ATTR.match(rest, pos)
        if not match or match.end() == pos:
            raise HtmlError(
                f'Expected equal sign in declaration of an attribute of the tag "{tag}" '
                f"at byte offset {_byte(text, at)}"
            )
        value = next((g for g in match.groups()[1:] if g is not None), "")
        attrs[match.group(1).lower()] = html.unescape(value)
        pos = match.end()
    return attrs


def _check_nesting(text: str, at: int, tag: str, attrs: dict[str, str], stack: list[_Open]) -> None:
    where = f"at byte offset {_byte(text, at)}"
    inside = {o.tag for o in stack}
    if tag == "code" and "class" in attrs:
        if not stack or stack[-1].tag != "pre":
            raise HtmlError(f"Programming language can't be specified for a code tag {where}")
        return
    if tag == "code" and stack and stack[-1].tag == "pre":
        return
    if inside & {"code", "pre"}:
        raise HtmlError(f'Tag "{tag}" can\'t be inside code or pre {where}')
    if tag in ("code", "pre", "a") and "a" in inside:
        raise HtmlError(f'Tag "{tag}" can\'t be inside a link {where}')
    if tag == "blockquote" and "blockquote" in inside:
        raise HtmlError(f"Blockquotes can't be nested {where}")
    if tag == "pre" and "blockquote" in inside:
        raise HtmlError(f'Tag "pre" can\'t be inside a blockquote {where}')


def _close(text: str, at: int, tag: str, stack: list[_Open]) -> None:
    if not stack:
        raise HtmlError(f"Unexpected end tag at byte offset {_byte(text, at)}")
    opened = stack[-1].tag
    if tag != opened:
        raise HtmlError(
            f'Unmatched end tag at byte offset {_byte(text, at)}, expected "</{opened}>", '
            f'found "</{tag}>"'
        )
    stack.pop()
