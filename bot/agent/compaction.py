"""Compaction: older messages replaced by a summary written on the fast model.

`Summarizer` turns messages (plus the previous summary) into a new summary:
temperature 0.3, bounded output, a timeout; a transcript too long for one call
is summarized in chunks, each folding into the running summary. `compact_view`
applies it to a message list (all but the last few messages), which is what
the loop does mid-run when a tool loop crosses the compaction threshold or the
API says the prompt is too long. Both fall back to plain truncation when the
summary cannot be written, so a failing fast model never wedges a run.

Conversation-level compaction after a run (stored summaries, memory flush,
the per-conversation lock) lives in `bot.pipeline.compactor`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from bot.agent.history import SUMMARY_HEADER, repair, soft_trimmed, summary_messages
from bot.agent.traces import Span, Timer, fallback_span
from bot.errors import BotError
from bot.llm.types import (
    ChatMessage,
    DocumentBlock,
    ImageBlock,
    LLMRequest,
    ServerToolResultBlock,
    ServerToolUseBlock,
    SystemBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from bot.ports import Provider

log = logging.getLogger("switchboard.compaction")

SUMMARY_SYSTEM = (
    "You maintain the running summary of a conversation between people and an AI "
    "assistant. The summary replaces the older messages in the assistant's context, so "
    "keep everything it needs to carry on: who the people are, facts, names and numbers "
    "they gave, decisions, commitments and open questions, tool findings that still "
    "matter, and — last — the latest request and what has been done for it so far. Leave "
    "out small talk and anything superseded. Write compact Markdown bullet points in the "
    "conversation's language. Output only the summary."
)
RESULT_CHARS = 1000
TOOL_INPUT_CHARS = 300
TEMPERATURE = 0.3


class CompactionFailed(BotError):
    """The summary could not be written (provider error, timeout, empty answer).
    `spans` are the LLM calls made before it failed (they still cost tokens)."""

    def __init__(self, message: str, spans: Sequence[Span] = ()) -> None:
        super().__init__(message)
        self.spans = tuple(spans)


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    spans: tuple[Span, ...]


def transcript_lines(messages: Sequence[ChatMessage]) -> list[str]:
    """Messages as plain lines: who said what, tool calls and (trimmed) results."""
    lines: list[str] = []
    for message in messages:
        who = "User" if message.role == "user" else "Assistant"
        for block in message.content:
            if isinstance(block, TextBlock) and block.text.strip():
                lines.append(f"{who}: {block.text.strip()}")
            elif isinstance(block, ImageBlock):
                lines.append(f"{who}: [an image]")
            elif isinstance(block, DocumentBlock):
                lines.append(f"{who}: [a document: {block.name or 'unnamed'}]")
            elif isinstance(block, ToolUseBlock):
                args = json.dumps(dict(block.input), ensure_ascii=False, default=str)
                if len(args) > TOOL_INPUT_CHARS:
                    args = args[:TOOL_INPUT_CHARS] + "…"
                lines.append(f"Assistant called tool {block.name} with {args}")
            elif isinstance(block, ServerToolUseBlock):
                query = " ".join(str(block.input.get("query", "")).split())[:TOOL_INPUT_CHARS]
                lines.append(f"Assistant used {block.name} for {query!r}")
            elif isinstance(block, ServerToolResultBlock):
                found = ", ".join(f"{title} ({url})" for title, url in block.hits[:10])
                lines.append(f"{block.name} found: {found or block.error or 'nothing'}")
            elif isinstance(block, ToolResultBlock):
                label = "Tool error" if block.is_error else "Tool result"
                content = soft_trimmed(block.content)
                if len(content) > RESULT_CHARS:
                    content = content[: RESULT_CHARS // 2] + " … " + content[-RESULT_CHARS // 2 :]
                lines.append(f"{label}: {content}")
    return lines


def chunks(lines: Sequence[str], max_chars: int) -> list[str]:
    """Lines joined into pieces of at most about `max_chars` characters."""
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for line in lines:
        line = line if len(line) <= max_chars else line[:max_chars]
        if current and size + len(line) > max_chars:
            pieces.append("\n".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
    if current:
        pieces.append("\n".join(current))
    return pieces


class Summarizer:
    def __init__(
        self,
        provider: Provider,
        model: str,
        *,
        max_tokens: int = 1024,
        timeout: float = 60.0,
        chunk_chars: int = 200_000,
        fallback: Sequence[str] = (),
    ) -> None:
        self._provider = provider
        self.model = model
        self.fallback = tuple(fallback)
        """The models tried in turn when `model`'s provider fails (`bot.llm.router`)."""
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.chunk_chars = chunk_chars

    async def summarize(self, messages: Sequence[ChatMessage], previous: str | None) -> Summary:
        """The updated summary; raises `CompactionFailed` (also on timeout)."""
        spans: list[Span] = []
        summary = (previous or "").strip()
        pieces = chunks(transcript_lines(messages), self.chunk_chars)
        if not pieces:
            if not summary:
                raise CompactionFailed("nothing to summarize")
            return Summary(summary, ())
        try:
            async with asyncio.timeout(self.timeout):
                for piece in pieces:
                    summary = await self._call(piece, summary, spans)
        except TimeoutError:
            raise CompactionFailed(f"summary timed out after {self.timeout:g} s", spans) from None
        except CompactionFailed as exc:
            raise CompactionFailed(str(exc), spans) from None
        except Exception as exc:
            raise CompactionFailed(f"{type(exc).__name__}: {exc}", spans) from exc
        return Summary(summary, tuple(spans))

    async def _call(self, piece: str, previous: str, spans: list[Span]) -> str:
        before = f"<previous_summary>\n{previous}\n</previous_summary>\n\n" if previous else ""
        prompt = (
            f"{before}<conversation>\n{piece}\n</conversation>\n\n"
            "Write the updated summary of the whole conversation so far."
        )
        request = LLMRequest(
            model=self.model,
            system=(SystemBlock(SUMMARY_SYSTEM),),
            messages=(ChatMessage("user", (TextBlock(prompt),)),),
            max_tokens=self.max_tokens,
            temperature=TEMPERATURE,
            timeout=self.timeout,
            cache=False,
            fallback=self.fallback,
            on_fallback=lambda fallback: _record(spans, fallback_span("compaction", fallback)),
        )
        timer = Timer()
        try:
            response = await self._provider.complete(request)
        except Exception as exc:
            spans.append(
                Span(
                    "compaction",
                    self.model,
                    timer.started_at,
                    timer.ms,
                    is_error=True,
                    detail=type(exc).__name__,
                )
            )
            raise
        spans.append(
            Span(
                "compaction",
                response.model or self.model,
                timer.started_at,
                timer.ms,
                response.usage,
                detail=response.stop_reason,
            )
        )
        text = response.text.strip()
        if not text:
            raise CompactionFailed("the summary came back empty")
        return text


def split_summary(messages: Sequence[ChatMessage]) -> tuple[str | None, list[ChatMessage]]:
    """(previous summary, the other messages) of a history that may start with one."""
    if len(messages) >= 2 and messages[0].role == "user":
        first = messages[0].text
        if first.startswith(SUMMARY_HEADER):
            return first[len(SUMMARY_HEADER) :].strip(), list(messages[2:])
    return None, list(messages)


@dataclass(frozen=True, slots=True)
class Compacted:
    messages: list[ChatMessage]
    spans: tuple[Span, ...]
    error: str | None = None
    """Why the summary failed (the messages were truncated instead)."""


async def compact_view(
    messages: Sequence[ChatMessage], summarizer: Summarizer | None, keep_last: int
) -> Compacted:
    """All but the last `keep_last` messages replaced by a summary (or, when it
    fails, dropped: the previous summary, if any, stays)."""
    previous, body = split_summary(messages)
    if len(body) <= keep_last:
        return Compacted(list(messages), ())
    head, tail = body[:-keep_last], body[-keep_last:]
    if summarizer is None:
        return Compacted(repair([*summary_messages(previous), *tail]), (), "no summarizer")
    try:
        summary = await summarizer.summarize(head, previous)
    except CompactionFailed as exc:
        log.warning("compaction.failed mid-run, truncating instead: %s", exc)
        return Compacted(repair([*summary_messages(previous), *tail]), exc.spans, str(exc))
    return Compacted(repair([*summary_messages(summary.text), *tail]), summary.spans)


async def _record(spans: list[Span], span: Span) -> None:
    spans.append(span)
