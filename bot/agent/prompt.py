"""The system prompt, assembled from named sections in a fixed order.

Each section is a plain function of a `PromptContext` returning text (or "" to
leave itself out). Stable sections come first so they can be cached.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from bot.llm.types import SystemBlock
from bot.ports import Tool
from bot.types import utcnow

Mode = Literal["full", "minimal"]

FORMATTING_HINTS = {
    "telegram": "Telegram renders bold, italic, strikethrough, inline code, code blocks, "
    "links and block quotes. Tables and headings are shown as plain text.",
    "slack": "Slack renders bold, italic, strikethrough, inline code, code blocks, links "
    "and block quotes. Tables and headings are shown as plain text.",
    "discord": "Discord renders Markdown: bold, italic, strikethrough, headings, lists, "
    "inline code, code blocks with syntax highlighting, quotes and masked links. "
    "Replies over 2,000 characters are split.",
    "console": "Replies are shown in a terminal as plain Markdown text.",
}


@dataclass(frozen=True, slots=True)
class PromptContext:
    platform: str
    chat_type: str
    persona_name: str
    persona_prompt: str
    model: str
    conversation_key: str
    user_name: str | None
    user_role: str
    tools: Sequence[Tool] = ()
    source: str = "user"
    mode: Mode = "full"
    now: datetime = field(default_factory=utcnow)


def identity(ctx: PromptContext) -> str:
    where = "a direct conversation" if ctx.chat_type == "direct" else "a group chat"
    return f"You are an AI assistant talking with people on {ctx.platform}, in {where}."


def persona(ctx: PromptContext) -> str:
    return ctx.persona_prompt


def tooling(ctx: PromptContext) -> str:
    if not ctx.tools:
        return ""
    lines = [f"- {tool.name}: {tool.description.splitlines()[0]}" for tool in ctx.tools]
    return "You can use these tools when they help:\n" + "\n".join(lines)


def user_identity(ctx: PromptContext) -> str:
    if ctx.source == "scheduler":
        return "This turn was started by a scheduled wakeup, not by a person typing."
    name = ctx.user_name or "an unnamed user"
    return f"You are talking with {name} (role: {ctx.user_role})."


def current_time(ctx: PromptContext) -> str:
    return f"Current time: {ctx.now:%Y-%m-%d %H:%M} UTC ({ctx.now:%A})."


def formatting(ctx: PromptContext) -> str:
    hint = FORMATTING_HINTS.get(ctx.platform, "Answer in Markdown.")
    return f"Write replies in Markdown. {hint}"


def silent_replies(ctx: PromptContext) -> str:
    return (
        "If no reply is needed (for example a group message not meant for you, or a "
        "wakeup with nothing worth reporting), answer exactly NO_REPLY and nothing "
        "else: nothing will be sent."
    )


def runtime(ctx: PromptContext) -> str:
    return f"Runtime: model {ctx.model}; conversation {ctx.conversation_key}."


Section = Callable[[PromptContext], str]

FULL: tuple[Section, ...] = (
    identity,
    persona,
    tooling,
    user_identity,
    formatting,
    silent_replies,
    runtime,
    current_time,
)
MINIMAL: tuple[Section, ...] = (identity, persona, user_identity, silent_replies, current_time)


def build_system(ctx: PromptContext) -> tuple[SystemBlock, ...]:
    """The system prompt as blocks: a cacheable stable part, then the volatile tail
    (the current time changes every minute and must not break the cache)."""
    sections = FULL if ctx.mode == "full" else MINIMAL
    stable = [text for section in sections if section is not current_time if (text := section(ctx))]
    blocks = [SystemBlock("\n\n".join(stable), cache=True)]
    blocks.append(SystemBlock(current_time(ctx)))
    return tuple(blocks)
