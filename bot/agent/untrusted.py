"""Untrusted content, marked as data before the model reads it.

Three sources reach the model without being the requester's own words:
tool results (``tool_result``), recalled memories (``memory``) and other
people's messages in a shared conversation's history (``history``). Each is
wrapped in ``<untrusted source="…">…</untrusted>``; the Safety section of the
system prompt tells the model that text inside these markers is data, never
instructions. Any marker inside the content (``<untrusted``, ``</untrusted``,
``<turn_context``, ``</turn_context``) is escaped, so the content cannot close
its own wrapper or fake a system block.

The input guard scans these sources too (`screen`): a detection is logged as
``security.injection_detected source=<source> …`` (one WARNING, pattern names
only); in ``block`` mode the content is withheld from the model.

Private data stays with its owner: the results (and inputs) of the tools in
`PRIVATE_TOOLS` — or of any tool with a true ``private_result`` attribute — are
replaced by a placeholder in the history sent on another user's turn.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Literal

from bot.agent.guard import Guard
from bot.ports import Tool, ToolContext

Source = Literal["tool_result", "memory", "history"]

PRIVATE_TOOLS = frozenset(
    {"memory_save", "memory_search", "memory_get", "get_tool_result", "get_error_detail"}
)
"""Tools whose input or output is the requester's own data."""

WITHHELD_TOOL_RESULT = "[tool result withheld: it looked like an instruction injection]"
WITHHELD_MESSAGE = "[message from another person withheld: it looked like an instruction injection]"

_MARKER = re.compile(r"<(?=\s*/?\s*(?:untrusted|turn_context)\b)", re.IGNORECASE)
_WRAPPED = re.compile(r'\A<untrusted source="[a-z_]+"[^>\n]*>\n(.*)\n</untrusted>\Z', re.DOTALL)


def escape(text: str) -> str:
    """`text` with every opening or closing marker defused (``<`` → ``&lt;``)."""
    return _MARKER.sub("&lt;", text)


def _attribute(value: str) -> str:
    cleaned = " ".join(value.split())[:100]
    return cleaned.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def mark(text: str, source: Source, **attributes: str) -> str:
    """`text` wrapped as data from `source`; its own markers escaped."""
    extra = "".join(f' {name}="{_attribute(value)}"' for name, value in attributes.items())
    return f'<untrusted source="{source}"{extra}>\n{escape(text)}\n</untrusted>'


def is_marked(text: str) -> bool:
    """Whether `text` is exactly one wrapper made by `mark` (nothing outside it,
    no unescaped marker inside it)."""
    found = _WRAPPED.match(text)
    return found is not None and _MARKER.search(found.group(1)) is None


def unwrap(text: str) -> str:
    """The content of a wrapper made by `mark` (still escaped); other text as it is.
    The guard scans this, so a wrapper's own closing marker is never a detection."""
    found = _WRAPPED.match(text)
    if found is None or _MARKER.search(found.group(1)) is not None:
        return text
    return found.group(1)


def mark_tool_result(text: str, tool_name: str) -> str:
    """A tool result as the model should see it. Marking twice changes nothing."""
    if is_marked(text) or text == WITHHELD_TOOL_RESULT:
        return text
    return mark(text, "tool_result", tool=tool_name)


def withheld_private(tool_name: str) -> str:
    """The placeholder for another user's private tool result."""
    return f"[{tool_name} result of another user, withheld]"


def private_tools(tools: Iterable[Tool]) -> frozenset[str]:
    """`PRIVATE_TOOLS` and every tool that declares ``private_result = True``."""
    declared = {tool.name for tool in tools if getattr(tool, "private_result", False)}
    return PRIVATE_TOOLS | declared


def screen(guard: Guard | None, text: str, source: Source, where: str, user: str) -> bool:
    """Scan `text` from `source`; log a detection. True when it must be withheld
    (the guard is in ``block`` mode and something was found)."""
    if guard is None:
        return False
    return bool(guard.scan(text, source=source, where=where, user=user)) and (guard.mode == "block")


def screen_tool_result(guard: Guard | None, text: str, ctx: ToolContext, tool_name: str) -> str:
    """For the executor: a fresh tool result as the model should see it —
    scanned (``source=tool_result``), withheld in block mode, otherwise marked."""
    if screen(guard, unwrap(text), "tool_result", ctx.conversation_key, str(ctx.user_id)):
        return WITHHELD_TOOL_RESULT
    return mark_tool_result(text, tool_name)


def screen_memories(
    guard: Guard | None, memories: Sequence[str], where: str, user: str
) -> list[str]:
    """Recalled memories to put in the prompt: each scanned (``source=memory``);
    the flagged ones dropped in block mode."""
    return [m for m in memories if not screen(guard, m, "memory", where, user)]
