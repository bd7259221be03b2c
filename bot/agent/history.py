"""Stored conversation rows → LLM messages, always a history the API accepts.

Rows are `messages` table entries with roles user / assistant / tool_call /
tool_result. `to_chat_messages` groups them into alternating user/assistant
messages; `repair` makes tool pairing valid: every tool_use is answered by a
tool_result in the next message, no tool_result lacks its tool_use, the first
message is from the user and no two messages in a row share a role.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bot.llm.types import Block, ChatMessage, TextBlock, ToolResultBlock, ToolUseBlock

MISSING_RESULT = "[Tool result missing — session was compacted]"


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """The fields of a stored message that matter for the LLM."""

    role: str
    text: str
    tool_use_id: str | None = None
    tool_name: str | None = None
    data: dict[str, Any] | None = None
    is_error: bool = False


def to_chat_messages(rows: Iterable[HistoryRow]) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    for row in rows:
        role, block = _row_block(row)
        if block is None:
            continue
        if messages and messages[-1].role == role:
            last = messages[-1]
            messages[-1] = ChatMessage(role, (*last.content, block))
        else:
            messages.append(ChatMessage(role, (block,)))
    return repair(messages)


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
