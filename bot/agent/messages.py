"""Small operations on message lists used by the agent loop."""

from __future__ import annotations

from collections.abc import Sequence

from bot.llm.types import Block, ChatMessage, LLMResponse, TextBlock, ToolUseBlock


def concat(
    history: Sequence[ChatMessage], new: Sequence[ChatMessage]
) -> tuple[tuple[ChatMessage, ...], int | None]:
    """History then this run's messages, and the index of the history's last
    message. A history ending with an unanswered user message (a failed earlier
    run) is merged with the new one, so roles alternate."""
    if history and new and history[-1].role == new[0].role == "user":
        merged = ChatMessage("user", (*history[-1].content, *new[0].content))
        end = len(history) - 2
        return (*history[:-1], merged, *new[1:]), end if end >= 0 else None
    return (*history, *new), (len(history) - 1 if history else None)


def without_tools(response: LLMResponse) -> LLMResponse:
    """The response with tool calls left out (they will not be run)."""
    kept = tuple(b for b in response.content if not isinstance(b, ToolUseBlock))
    if len(kept) == len(response.content):
        return response
    return LLMResponse(kept, response.stop_reason, response.usage, response.model)


def add_user_blocks(messages: list[ChatMessage], blocks: tuple[Block, ...]) -> None:
    if messages and messages[-1].role == "user":
        messages[-1] = ChatMessage("user", (*messages[-1].content, *blocks))
    else:
        messages.append(ChatMessage("user", blocks))


def blank(block: Block) -> bool:
    return isinstance(block, TextBlock) and not block.text.strip()


def assistant(text: str) -> ChatMessage:
    return ChatMessage("assistant", (TextBlock(text),))


def user(text: str) -> ChatMessage:
    return ChatMessage("user", (TextBlock(text),))


def last_assistant_text(messages: Sequence[ChatMessage]) -> str:
    for message in reversed(messages):
        if message.role == "assistant" and message.text.strip():
            return message.text.strip()
    return ""


def join(*parts: str) -> str:
    return "\n\n".join(part for part in parts if part)
