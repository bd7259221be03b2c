"""Packing spans into messages of at most N units, never breaking markup."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import NamedTuple, TypeAlias

from bot.formatting.spans import Span, Wrap, flatten

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
