"""Clean the model's final reply before it reaches a chat platform.

`sanitize` runs seven steps in order, each documented on its function. Fenced code
blocks (``` / ~~~; an unclosed fence runs to the end, as in CommonMark) and inline code
spans are swapped for placeholders first, so steps 1-5 never touch code, and a code block
is one paragraph for step 6. A removal that leaves its line blank takes the whole line;
runs of two or more blank lines outside code collapse to one. The pipeline repeats until
nothing changes (each changing pass shortens the text), so `sanitize` is idempotent even
when a removal joins two halves of a tag.

`is_silent` decides whether a reply means "send nothing".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from itertools import chain

__all__ = ["SILENT_TOKEN", "is_silent", "sanitize"]

SILENT_TOKEN = "NO_REPLY"

_NS = r"(?:[A-Za-z_][\w.-]*:)?"  # optional namespace prefix: <ns:invoke>
_ATTRS = r"(?:[ \t][^<>\n]*)?/?"  # attributes on the tag's own line; optional self-close


def _tags(names: str) -> re.Pattern[str]:
    return re.compile(rf"<(?P<slash>/)?{_NS}(?P<name>{names}){_ATTRS}>", re.I)


_TOOL_TAG = _tags(
    r"function_calls|function_call|function_results|function_result|invoke|parameter"
    r"|tool_use|tool_calls|tool_call|tool_results|tool_result"
)
_CALL_LINE = re.compile(
    r"^[ \t]*(?:\[(?:tool[ _]call|called[ ]tool|calling[ ]tool|tool[ _]use)\b[^\n]*\]"
    r"|tool[ _]call:[ \t]*[\w.-]+[ \t]*\([^\n]*\))[ \t]*(?:\n|\Z)",
    re.I | re.M,
)
_JSON_LINE = re.compile(r"^[ \t]*(\{[^\n]*\})[ \t]*(?:\n|\Z)", re.M)
_MARKER = re.compile(
    r"[ \t]*\[(?:(?P<call>tool[ _]calls?|tool[ _]use|called[ ]tool|calling[ ]tool)"
    r"|(?P<output>tool[ _]results?|tool[ _]output|historical[ _]context))\b",
    re.I,
)
_JSON_MAX_LINES = 400
_ARG_KEYS = frozenset({"arguments", "args", "input"})

_THINK_NAMES = r"thinking|think|thought|antthinking|reasoning|reflection"
_THINK_TAG = _tags(_THINK_NAMES)
_THINK_UNCLOSED = re.compile(
    rf"<{_NS}(?:{_THINK_NAMES}){_ATTRS}(?<!/)>.*?(?=\n[ \t]*\n|\Z)", re.I | re.S
)

_FINAL_TAG = _tags("final")
_FINAL_BLOCK = re.compile(
    rf"<{_NS}final{_ATTRS}(?<!/)>(?P<body>.*?)(?:</{_NS}final{_ATTRS}>|\Z)", re.I | re.S
)
_WRAPPER_TAG = _tags("answer|response")

_SYSTEM_START = re.compile(r"\A\s*\[(?:system(?:[ _]message)?)\]", re.I)
_PARA_SPLIT = re.compile(r"(\n(?:[ \t]*\n)+)")
_BLANK_RUN = re.compile(r"\n(?:[ \t]*\n){2,}")
_LEADING_BLANK = re.compile(r"\A(?:[ \t]*\n)+")
_EDGE_NEWLINES = re.compile(r"\A[ \t]*\n|\n[ \t]*\Z")

_FENCE = re.compile(
    r"^[ \t]*(?P<fence>`{3,}(?=[^`\n]*$)|~{3,})[^\n]*\n.*?(?:^[ \t]*(?P=fence)[`~]*[ \t]*$|\Z)",
    re.M | re.S,
)
_INLINE_CODE = re.compile(
    r"(?<!`)(?P<ticks>`+)(?!`)(?:[^\n]|\n(?![ \t]*\n))+?(?<!`)(?P=ticks)(?!`)"
)

_DECOR = r"[\s`*_~\"'“”‘’«»\[\]().]*"
_SILENT = re.compile(rf"\A{_DECOR}{SILENT_TOKEN}{_DECOR}\Z")

_MARK_RANGES = (range(0xE000, 0xF900), range(0xF0000, 0xFFFFE))


def _pairs(tags: re.Pattern[str], text: str) -> list[tuple[re.Match[str], re.Match[str]]]:
    """Pair tags like a lazy regex would, in one scan: the earliest pending opening tag
    of a name closes at the next closing tag of that name; opens inside it are dropped."""
    pairs: list[tuple[re.Match[str], re.Match[str]]] = []
    pending: dict[str, re.Match[str]] = {}
    for tag in tags.finditer(text):
        name = tag["name"].lower()
        if not tag["slash"]:
            if not tag.group().endswith("/>"):
                pending.setdefault(name, tag)
        elif name in pending:
            opening = pending[name]
            pairs.append((opening, tag))
            pending = {n: m for n, m in pending.items() if m.start() < opening.start()}
    return pairs


def _cut(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """Remove `spans` from `text`; a removal that leaves its line blank takes the line."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and not text[merged[-1][1] : start].strip(" \t"):
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out: list[str] = []
    pos = 0
    for start, end in merged:
        before, after = start, end
        while before > 0 and text[before - 1] in " \t":
            before -= 1
        while after < len(text) and text[after] in " \t":
            after += 1
        if text[before - 1 : before] in ("", "\n") and text[after : after + 1] in ("", "\n"):
            start, end = before, after + 1
        out.append(text[pos : max(start, pos)])
        pos = max(pos, end)
    out.append(text[pos:])
    return "".join(out)


def _drop_elements(tags: re.Pattern[str], text: str) -> str:
    """Remove closed elements with their content, again if a removal formed a new pair."""
    while pairs := _pairs(tags, text):
        text = _cut(text, ((opening.start(), closing.end()) for opening, closing in pairs))
    return text


def _strip_tool_xml(text: str) -> str:
    """Step 1: drop leaked tool-call markup (<function_calls>, <invoke>, <parameter>,
    <tool_use>, <tool_call>, <tool_result>, also namespaced ones like <ns:invoke>).
    A closed element goes with its content; a dangling open or close tag goes alone."""
    text = _drop_elements(_TOOL_TAG, text)
    return _cut(text, (tag.span() for tag in _TOOL_TAG.finditer(text)))


def _json_call(match: re.Match[str]) -> str:
    try:
        obj = json.loads(match.group(1))
    except (ValueError, RecursionError):
        return match.group(0)
    if isinstance(obj, dict) and len(obj) == 2:
        if isinstance(obj.get("tool"), str) and any(
            isinstance(obj.get(key), dict) for key in _ARG_KEYS
        ):
            return ""
        if isinstance(obj.get("name"), str) and isinstance(obj.get("arguments"), dict):
            return ""
    return match.group(0)


def _json_after(lines: list[str], start: int) -> int:
    """The index after a JSON value that starts on `lines[start]` (it may run over
    several lines), or `start` when none does."""
    if start >= len(lines) or lines[start].lstrip()[:1] not in ("{", "["):
        return start
    for end in range(start + 1, min(len(lines), start + _JSON_MAX_LINES) + 1):
        try:
            json.loads("\n".join(lines[start:end]))
        except (ValueError, RecursionError):
            continue
        return end
    return start


def _strip_markers(text: str) -> str:
    """Scan line by line for lines that start with a text-form call or result marker
    (`[Tool Call: …]`, `[Tool Result …]`, `[Historical context: …]`, …) and drop each
    with what follows it: the JSON arguments or output (one value, possibly over several
    lines) and, after a result or context marker, its plain-text output up to the next
    blank line."""
    lines = text.split("\n")
    kept: list[str] = []
    index = 0
    while index < len(lines):
        marker = _MARKER.match(lines[index])
        if marker is None:
            kept.append(lines[index])
            index += 1
            continue
        after = _json_after(lines, index + 1)
        if after == index + 1 and marker["output"]:
            while after < len(lines) and lines[after].strip():
                after += 1
        index = after
    return "\n".join(kept)


def _strip_text_calls(text: str) -> str:
    """Step 2: drop text-form tool calls and results: marker lines with the JSON or
    output that follows them (`_strip_markers`), `Tool call: f(...)` lines, and a JSON
    object alone on its line shaped exactly {"tool": str, "arguments"|"args"|"input": {}}
    or {"name": str, "arguments": {}}. Prose that merely mentions tools stays."""
    return _JSON_LINE.sub(_json_call, _CALL_LINE.sub("", _strip_markers(text)))


def _strip_thinking(text: str) -> str:
    """Step 3: drop <thinking>, <think>, <thought>, <antThinking>, <reasoning> and
    <reflection> blocks with their content (any case; the first closing tag ends a
    block). An opening tag that is never closed drops everything up to the next blank
    line (or the end of the text); a stray closing tag is dropped alone."""
    text = _drop_elements(_THINK_TAG, text)
    spans = [match.span() for match in _THINK_UNCLOSED.finditer(text)]
    return _cut(text, spans + [tag.span() for tag in _THINK_TAG.finditer(text)])


def _unwrap_body(match: re.Match[str]) -> str:
    return _EDGE_NEWLINES.sub("", match.group("body"))


def _unwrap_final(text: str) -> str:
    """Step 4: keep what is inside <final> and drop everything outside it (the model's
    preamble). Several blocks are joined by a blank line; an unclosed <final> runs to the
    end of the text; a stray </final> is dropped. Closed <answer>/<response> pairs lose
    their tags and keep their content; the text around them stays."""
    if blocks := [_unwrap_body(match) for match in _FINAL_BLOCK.finditer(text)]:
        text = "\n\n".join(block for block in blocks if block.strip())
    else:
        text = _cut(text, (tag.span() for tag in _FINAL_TAG.finditer(text)))
    pairs = _pairs(_WRAPPER_TAG, text)
    return _cut(text, (span for pair in pairs for span in (pair[0].span(), pair[1].span())))


def _filter_paragraphs(text: str, drop: Callable[[str, str | None], bool]) -> str:
    """Drop paragraphs for which `drop(paragraph, previous kept non-blank paragraph)`."""
    parts = _PARA_SPLIT.split(text)
    out: list[str] = []
    previous: str | None = None
    for index in range(0, len(parts), 2):
        paragraph = parts[index]
        if drop(paragraph, previous):
            continue
        out.extend([parts[index - 1], paragraph] if out else [paragraph])
        previous = paragraph.strip() or previous
    return "".join(out)


def _strip_system_blocks(text: str) -> str:
    """Step 5: drop echoed system blocks: a paragraph whose first line starts with
    [System Message], [System] or [System_Message] (any case), up to the next blank line.
    The marker only counts at the start of a paragraph."""
    return _filter_paragraphs(text, lambda paragraph, _: bool(_SYSTEM_START.match(paragraph)))


def _collapse_duplicates(text: str) -> str:
    """Step 6: collapse consecutive duplicate paragraphs (blank-line separated, compared
    with surrounding whitespace stripped) to the first one. Code is never split into
    paragraphs; identical code blocks share a placeholder, so a repeated one collapses."""
    return _filter_paragraphs(text, lambda paragraph, previous: paragraph.strip() == previous)


def _trim(text: str) -> str:
    """Step 7: drop leading blank lines (keeping the first line's indentation) and all
    trailing whitespace."""
    return _LEADING_BLANK.sub("", text).rstrip()


def _protect(text: str) -> tuple[str, str, list[str]]:
    """Swap fenced blocks, then inline code spans, for `<mark><index><mark>` tokens,
    where <mark> is a private-use character that does not occur in `text`."""
    mark = next((chr(cp) for cp in chain(*_MARK_RANGES) if chr(cp) not in text), "\ue000")
    codes: list[str] = []
    seen: dict[str, int] = {}

    def stash(match: re.Match[str]) -> str:
        code = match.group(0)
        if code not in seen:
            seen[code] = len(codes)
            codes.append(code)
        return f"{mark}{seen[code]}{mark}"

    return _INLINE_CODE.sub(stash, _FENCE.sub(stash, text)), mark, codes


def _restore(text: str, mark: str, codes: list[str]) -> str:
    def put_back(match: re.Match[str]) -> str:
        index = int(match.group(1))
        return codes[index] if index < len(codes) else match.group(0)

    return re.sub(rf"{mark}(\d+){mark}", put_back, text).replace(mark, "")


def _pass(text: str) -> str:
    masked, mark, codes = _protect(text)
    for step in (_strip_tool_xml, _strip_text_calls, _strip_thinking, _unwrap_final):
        masked = step(masked)
    masked = _strip_system_blocks(masked)
    masked = _collapse_duplicates(_BLANK_RUN.sub("\n\n", masked))
    return _trim(_restore(masked, mark, codes))


def sanitize(text: str) -> str:
    """Return `text` cleaned for sending (see the module docstring for the steps)."""
    while (cleaned := _pass(text)) != text and len(cleaned) < len(text):
        text = cleaned
    return cleaned


def is_silent(text: str, *, clean: bool = False) -> bool:
    """True when the reply means "send nothing": empty or whitespace-only text, or the
    exact token NO_REPLY (case-sensitive) wrapped only in whitespace, backticks or fences,
    bold/italic markers, quotes, brackets or a trailing period; checked on `text` as given
    and after `sanitize`. NO_REPLY inside a real sentence is a real reply. `clean`: the
    text is what `sanitize` returned (which it returns unchanged): not cleaned again."""
    if not text.strip() or _SILENT.match(text):
        return True
    if clean:
        return False
    cleaned = sanitize(text)
    return not cleaned or _SILENT.match(cleaned) is not None
