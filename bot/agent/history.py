"""Stored conversation rows → the history sent to the LLM, in three stages.

1. `keep_recent_turns`: the last N user turns with their assistant and tool
   messages. Older turns are dropped from the front `step` at a time (so up to
   N + step - 1 turns are kept), and the start of the history — with it the
   cached prompt prefix — stays put between drops.
2. `prune_tool_results`: when the estimated prompt passes its budget (a share of
   the context window), tool results are pruned in two passes, oldest first,
   until it fits: a soft trim (results over 4,000 characters keep their first
   and last 1,500) and then a hard clear (results over a minimum size become
   ``[Old tool result content cleared]``). Never touched: the first user message
   (or the summary pair standing in for it) and the last three assistant
   messages with what follows them.
3. `repair`: tool pairing made valid — every tool_use answered by a tool_result
   in the next message (a missing one is synthesized), no tool_result without
   its tool_use, the first message from the user, roles alternating.

With a `Viewer` (the requester of the run), the rows are first seen from that
user's side (`bot.agent.untrusted`): another user's private tool calls and
results are withheld, other people's messages are marked as data, and after
pruning every tool result is marked as data; the guard scans both, and in
``block`` mode withholds what it flags. Stored rows are never changed.

Rows are `messages` table entries with roles user / assistant / tool_call /
tool_result. A compaction summary, when there is one, comes first as a user
message and an assistant acknowledgement.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bot.agent.guard import Guard
from bot.agent.untrusted import (
    PRIVATE_TOOLS,
    WITHHELD_MESSAGE,
    WITHHELD_TOOL_RESULT,
    mark,
    mark_tool_result,
    screen,
    unwrap,
    withheld_private,
)
from bot.conversations import HistoryRow
from bot.llm.tokens import messages_tokens
from bot.llm.types import Block, ChatMessage, TextBlock, ToolResultBlock, ToolUseBlock

MISSING_RESULT = "[Tool result missing — session was compacted]"
CLEARED_RESULT = "[Old tool result content cleared]"
SUMMARY_HEADER = "[Summary of the earlier conversation]"
SUMMARY_ACK = "Understood — I have the summary of our earlier conversation."
SOFT_TRIM_OVER = 4000
SOFT_TRIM_KEEP = 1500
HARD_CLEAR_MIN = 500
PROTECTED_ASSISTANT_MESSAGES = 3


@dataclass(frozen=True, slots=True)
class HistoryPolicy:
    turns: int = 20
    step: int = 1
    budget_tokens: int | None = None
    """Prune tool results when the estimated prompt exceeds this (None: never)."""
    fixed_tokens: int = 0
    """Tokens of the request outside the messages (system prompt, tools)."""


NOBODY = 0
"""A viewer id no user has: everyone's rows are someone else's (user ids start at 1)."""


@dataclass(frozen=True, slots=True)
class Viewer:
    """Whose turn the history is built for."""

    user_id: int
    guard: Guard | None = None
    where: str = ""
    """The conversation key, for the guard's log."""
    private_tools: frozenset[str] = PRIVATE_TOOLS
    trusted_tools: frozenset[str] = frozenset()
    """Tools whose results are our own text: left unmarked, as the run saw them
    (the executor marks the others as they come in, so the prefix stays
    byte-identical from turn to turn and the prompt cache keeps hitting)."""


def build_history(
    rows: Sequence[HistoryRow],
    summary: str | None,
    policy: HistoryPolicy,
    viewer: Viewer | None = None,
) -> list[ChatMessage]:
    """The three stages, with the summary (if any) in front; seen by `viewer`."""
    kept = keep_recent_turns(rows, policy.turns, policy.step)
    if viewer is not None:
        kept = seen_by(kept, viewer)
    messages = [*summary_messages(summary), *group_rows(kept)]
    if policy.budget_tokens is not None:
        messages = prune_tool_results(
            messages, policy.budget_tokens - policy.fixed_tokens, protect_head=2 if summary else 1
        )
    if viewer is not None:
        messages = mark_results(messages, _tool_names(kept), viewer.trusted_tools)
    return repair(messages)


# --- the viewer's side -----------------------------------------------------------


def seen_by(rows: Sequence[HistoryRow], viewer: Viewer) -> list[HistoryRow]:
    """`rows` as `viewer` may see them: another user's private tool calls lose
    their input and their results become a placeholder; other people's messages
    are marked as data; the guard scans them and the stored tool results."""
    names = _tool_names(rows)
    seen: list[HistoryRow] = []
    for row in rows:
        other = row.user_id is not None and row.user_id != viewer.user_id
        name = row.tool_name or names.get(row.tool_use_id or "", "")
        if row.role == "user" and other and row.text:
            withhold = screen(viewer.guard, row.text, "history", viewer.where, str(viewer.user_id))
            row = row._replace(text=WITHHELD_MESSAGE if withhold else mark(row.text, "history"))
        elif row.role == "tool_call" and other and name in viewer.private_tools:
            row = row._replace(data={})
        elif row.role == "tool_result" and other and name in viewer.private_tools:
            row = row._replace(text=withheld_private(name), is_error=False)
        elif row.role == "tool_result" and screen(
            viewer.guard, unwrap(row.text), "tool_result", viewer.where, str(viewer.user_id)
        ):
            row = row._replace(text=WITHHELD_TOOL_RESULT)
        seen.append(row)
    return seen


def viewed_messages(rows: Sequence[HistoryRow], viewer: Viewer) -> list[ChatMessage]:
    """`rows` grouped as messages, as `viewer` may see them, tool results marked
    (for internal turns that read the history: memory flush, compaction)."""
    return mark_results(group_rows(seen_by(rows, viewer)), _tool_names(rows))


def mark_results(
    messages: Sequence[ChatMessage],
    names: dict[str, str],
    trusted: frozenset[str] = frozenset(),
) -> list[ChatMessage]:
    """Every tool result marked as data (after pruning, so trimming never cuts a
    marker), except those of `trusted` tools; the history's own notes and
    placeholders are left as they are."""
    marked: list[ChatMessage] = []
    for message in messages:
        if not any(isinstance(b, ToolResultBlock) for b in message.content):
            marked.append(message)  # nothing to mark (most messages): kept as it is
            continue
        content = tuple(
            _marked(b, names.get(b.tool_use_id, "tool"))
            if isinstance(b, ToolResultBlock) and names.get(b.tool_use_id) not in trusted
            else b
            for b in message.content
        )
        marked.append(ChatMessage(message.role, content))
    return marked


def _marked(block: ToolResultBlock, name: str) -> ToolResultBlock:
    own = (MISSING_RESULT, CLEARED_RESULT, WITHHELD_TOOL_RESULT, withheld_private(name))
    if block.content in own:
        return block
    return replace(block, content=mark_tool_result(block.content, name))


def _tool_names(rows: Iterable[HistoryRow]) -> dict[str, str]:
    return {
        row.tool_use_id: row.tool_name
        for row in rows
        if row.role == "tool_call" and row.tool_use_id and row.tool_name
    }


def summary_messages(summary: str | None) -> list[ChatMessage]:
    if not summary or not summary.strip():
        return []
    return [
        ChatMessage("user", (TextBlock(f"{SUMMARY_HEADER}\n{summary.strip()}"),)),
        ChatMessage("assistant", (TextBlock(SUMMARY_ACK),)),
    ]


# --- stage 1 -------------------------------------------------------------------


def keep_recent_turns(rows: Sequence[HistoryRow], turns: int, step: int = 1) -> list[HistoryRow]:
    """Rows from the start of the oldest kept user turn: at least the last `turns`
    user turns; older ones are dropped in multiples of `step` (so fewer than
    `turns + step` are kept)."""
    starts = [i for i, row in enumerate(rows) if row.role == "user"]
    step = max(1, step)
    drop = (len(starts) - turns) // step * step
    if drop <= 0:
        return list(rows)
    return list(rows[starts[drop] :])


# --- stage 2 -------------------------------------------------------------------


def prune_tool_results(
    messages: Sequence[ChatMessage], budget_tokens: int, *, protect_head: int = 1
) -> list[ChatMessage]:
    """Soft-trim, then clear, old tool results until the messages fit `budget_tokens`."""
    pruned = list(messages)
    total = messages_tokens(pruned)
    if total <= budget_tokens:
        return pruned
    assistants = [i for i, m in enumerate(pruned) if m.role == "assistant"]
    protected_from = (
        assistants[-PROTECTED_ASSISTANT_MESSAGES]
        if len(assistants) >= PROTECTED_ASSISTANT_MESSAGES
        else (assistants[0] if assistants else len(pruned))
    )
    candidates = range(min(protect_head, len(pruned)), protected_from)
    for shrink in (_soft_trim, _hard_clear):
        for i in candidates:
            if total <= budget_tokens:
                return pruned
            message = pruned[i]
            changed = tuple(
                shrink(b) if isinstance(b, ToolResultBlock) else b for b in message.content
            )
            if changed != message.content:
                before = messages_tokens((message,))
                pruned[i] = ChatMessage(message.role, changed)
                total += messages_tokens((pruned[i],)) - before
    return pruned


def soft_trimmed(content: str) -> str:
    if len(content) <= SOFT_TRIM_OVER:
        return content
    cut = len(content) - 2 * SOFT_TRIM_KEEP
    return (
        f"{content[:SOFT_TRIM_KEEP]}\n\n[… {cut:,} characters trimmed …]\n\n"
        f"{content[-SOFT_TRIM_KEEP:]}"
    )


def _soft_trim(block: ToolResultBlock) -> ToolResultBlock:
    trimmed = soft_trimmed(block.content)
    return block if trimmed == block.content else replace(block, content=trimmed)


def _hard_clear(block: ToolResultBlock) -> ToolResultBlock:
    if len(block.content) <= HARD_CLEAR_MIN or block.content == CLEARED_RESULT:
        return block
    return replace(block, content=CLEARED_RESULT)


# --- grouping and stage 3 ------------------------------------------------------


def to_chat_messages(rows: Iterable[HistoryRow]) -> list[ChatMessage]:
    return repair(group_rows(rows))


def group_rows(rows: Iterable[HistoryRow]) -> list[ChatMessage]:
    """Rows as alternating messages (consecutive rows of one side share a message)."""
    messages: list[ChatMessage] = []
    for row in rows:
        role, block, alone = _row_message(row)
        if block is None:
            continue
        if messages and messages[-1].role == role:
            last = messages[-1]
            messages[-1] = ChatMessage(role, (*last.content, block))
        else:
            messages.append(alone)
    return messages


def _row_message(row: HistoryRow) -> tuple[Any, Block | None, ChatMessage]:
    """The row's side, its block and the message of it alone. The history of a
    conversation is built again for each of its messages from (mostly) the
    same row objects (`bot.history_rows`): the rows met recently give the
    same block and message objects as last time, so that what is known about
    those (their token estimates) is not worked out again. Keyed by the row's
    identity, the row kept alive with the entry (an id is never reused while
    it is there); rows with long texts are not kept."""
    known = _ROW_MESSAGES.get(id(row))
    if known is not None and known[0] is row:
        return known[1]
    role, block = _row_block(row)
    made = (role, block, ChatMessage(role, (block,) if block is not None else ()))
    if len(row.text or "") <= _ROW_MESSAGE_MAX_CHARS:
        if len(_ROW_MESSAGES) >= _ROW_MESSAGES_KEPT:
            _ROW_MESSAGES.clear()
        _ROW_MESSAGES[id(row)] = (row, made)
    return made


_ROW_MESSAGES: dict[int, tuple[HistoryRow, tuple[Any, Block | None, ChatMessage]]] = {}
_ROW_MESSAGES_KEPT = 8192
_ROW_MESSAGE_MAX_CHARS = 2048


def _row_block(row: HistoryRow) -> tuple[Any, Block | None]:
    if row.role == "user":
        return "user", TextBlock(row.text) if row.text else None
    if row.role == "assistant":
        return "assistant", TextBlock(row.text) if row.text else None
    if row.role == "tool_call" and row.tool_use_id and row.tool_name:
        return "assistant", ToolUseBlock(row.tool_use_id, row.tool_name, dict(row.data or {}))
    if row.role == "tool_result" and row.tool_use_id:
        return "user", ToolResultBlock(row.tool_use_id, row.text, row.is_error)
    return "user", None


def repair(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """Make a message list valid for the Messages API (see module docstring)."""
    fixed: list[ChatMessage] = []
    pending: list[ToolUseBlock] = []  # tool_uses of the last assistant message
    for message in messages:
        if not pending and not any(isinstance(b, _TOOL_BLOCKS) for b in message.content):
            if message.content:  # nothing to repair in it (most messages)
                _append(fixed, message)
            continue
        if message.role == "assistant":
            if pending:  # previous tool_uses never got results
                fixed.append(_synthesized_results(pending))
            content: tuple[Block, ...] = tuple(
                b for b in message.content if not isinstance(b, ToolResultBlock)
            )
            pending = [b for b in content if isinstance(b, ToolUseBlock)]
        else:
            wanted = {b.id for b in pending}
            results = [
                b
                for b in message.content
                if isinstance(b, ToolResultBlock) and b.tool_use_id in wanted
            ]
            answered = {b.tool_use_id for b in results}
            missing = [b for b in pending if b.id not in answered]
            others = [
                b for b in message.content if not isinstance(b, ToolResultBlock | ToolUseBlock)
            ]
            # Results first (the API wants them leading the message), in call order.
            order = {b.id: i for i, b in enumerate(pending)}
            results.sort(key=lambda b: order[b.tool_use_id])
            synthesized = [ToolResultBlock(b.id, MISSING_RESULT, True) for b in missing]
            content = (*results, *synthesized, *others)
            pending = []
        if not content:
            continue
        _append(fixed, ChatMessage(message.role, content))
    if pending:
        fixed.append(_synthesized_results(pending))
    while fixed and fixed[0].role != "user":
        fixed.pop(0)
    while fixed and not any(
        not isinstance(b, ToolResultBlock) for b in fixed[0].content
    ):  # a history must not start with orphaned tool results
        fixed.pop(0)
        while fixed and fixed[0].role != "user":
            fixed.pop(0)
    return fixed


_TOOL_BLOCKS = (ToolUseBlock, ToolResultBlock)


def _synthesized_results(calls: Sequence[ToolUseBlock]) -> ChatMessage:
    return ChatMessage("user", tuple(ToolResultBlock(b.id, MISSING_RESULT, True) for b in calls))


def _append(messages: list[ChatMessage], message: ChatMessage) -> None:
    if messages and messages[-1].role == message.role:
        last = messages[-1]
        if message.role == "user":
            # Keep tool results leading: results of `last` were answering its
            # predecessor; a second user message only adds text.
            messages[-1] = ChatMessage("user", (*last.content, *message.content))
        else:
            messages[-1] = ChatMessage("assistant", (*last.content, *message.content))
        return
    messages.append(message)
