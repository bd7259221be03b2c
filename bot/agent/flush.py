"""The memory flush: before older messages are compacted away, a short internal
turn lets the agent save what is worth keeping to long-term memory.

Minimal system prompt, only the memory tools, the last few messages (10 by
default), at most a few LLM calls (5) and a timeout (90 s). The agent answers
NO_REPLY when there is nothing to store; nothing is ever sent to anyone. Its
LLM calls are recorded as "memory_flush" spans of the run that triggered it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from bot.agent.history import repair
from bot.agent.loop import AgentLoop
from bot.agent.prompt import PromptContext, build_system
from bot.agent.state import RunInput, RunSpec, RunState
from bot.agent.traces import Span
from bot.llm.types import ChatMessage, TextBlock
from bot.ports import Tool, ToolContext

log = logging.getLogger("switchboard.memory")

FLUSH_PROMPT = (
    "[Memory flush — internal, nobody will see your answer] The older part of this "
    "conversation is about to be summarized. Save to long-term memory what is worth "
    "remembering about the person you talk with: lasting facts, preferences, decisions "
    "and commitments from the messages above — not small talk, and not what memory "
    "already holds (check with memory_search). Use memory_save once per fact. When done, "
    "or if there is nothing to save, answer exactly NO_REPLY."
)


class MemoryFlush:
    def __init__(
        self,
        loop: AgentLoop,
        tools: Sequence[Tool],
        *,
        messages: int = 10,
        iterations: int = 5,
        timeout: float = 90.0,
        max_tokens: int = 1024,
    ) -> None:
        self._loop = loop
        self._tools = tuple(tools)
        self.messages = messages
        self.iterations = iterations
        self.timeout = timeout
        self.max_tokens = max_tokens

    async def run(
        self,
        history: Sequence[ChatMessage],
        ctx: ToolContext,
        *,
        model: str,
        platform: str,
        chat_type: str,
        user_name: str | None,
        fallback: tuple[str, ...] = (),
    ) -> list[Span]:
        """Run the flush turn; returns its spans. Never raises (failures are logged)."""
        recent = repair(list(history)[-self.messages :])
        if not recent or not self._tools:
            return []
        prompt = build_system(
            PromptContext(
                platform=platform,
                chat_type=chat_type,
                persona_name="",
                persona_prompt="",
                model=model,
                conversation_key=ctx.conversation_key,
                user_name=user_name,
                user_role=ctx.role.value,
                tools=self._tools,
                mode="minimal",
            )
        )
        spec = RunSpec(
            model=model,
            system=prompt.blocks,
            history=tuple(recent),
            tools=self._tools,
            context=ctx,
            max_tokens=self.max_tokens,
            max_iterations=self.iterations,
            max_continuations=0,
            span_kind="memory_flush",
            fallback=fallback,
        )
        state = RunState.answering([RunInput((TextBlock(FLUSH_PROMPT),), FLUSH_PROMPT)])
        try:
            async with asyncio.timeout(self.timeout):
                await self._loop.run(spec, state)
        except TimeoutError:
            log.warning("memory.flush_timeout run=%s after %gs", ctx.run_id, self.timeout)
        except Exception as exc:
            log.warning("memory.flush_failed run=%s: %s: %s", ctx.run_id, type(exc).__name__, exc)
        saved = sum(1 for s in state.spans if s.kind == "tool" and s.name == "memory_save")
        log.info("memory.flushed run=%s saves=%d", ctx.run_id, saved)
        return list(state.spans)
