"""The agent loop: think → act → observe, bounded by `max_iterations` LLM calls.

The loop is pure orchestration: it knows the provider, the tools and the
executor, nothing about platforms or storage. Everything it produces is
accumulated in a `RunState` the caller owns, so partial work (and its token
usage) survives a provider failure or a cancellation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from bot.agent.executor import ToolExecutor
from bot.llm.types import (
    ChatMessage,
    LLMRequest,
    LLMResponse,
    SystemBlock,
)
from bot.ports import Provider, TextCallback, Tool, ToolContext
from bot.tools.registry import tool_spec
from bot.types import Usage

log = logging.getLogger("switchboard.agent")

ITERATION_LIMIT_NOTE = (
    "_(I stopped after {n} steps without finishing. Ask me to continue if you need more.)_"
)
MAX_TOKENS_NOTE = "_(My reply was cut off because it reached the length limit.)_"
REFUSAL_REPLY = "I can't help with that request."


@dataclass(frozen=True, slots=True)
class LLMCall:
    model: str
    usage: Usage
    stop_reason: str
    duration_s: float


@dataclass(slots=True)
class RunState:
    """What a run has produced so far. `messages` starts with the user message."""

    messages: list[ChatMessage] = field(default_factory=list)
    calls: list[LLMCall] = field(default_factory=list)
    final_text: str = ""
    stop_reason: str | None = None
    hit_iteration_limit: bool = False

    @property
    def usage(self) -> Usage:
        total = Usage()
        for call in self.calls:
            total = total + call.usage
        return total

    @property
    def iterations(self) -> int:
        return len(self.calls)


@dataclass(frozen=True, slots=True)
class RunSpec:
    model: str
    system: tuple[SystemBlock, ...]
    history: tuple[ChatMessage, ...]
    tools: tuple[Tool, ...]
    context: ToolContext
    max_tokens: int
    max_iterations: int
    temperature: float | None = None
    timeout: float | None = None


class AgentLoop:
    def __init__(self, provider: Provider, executor: ToolExecutor) -> None:
        self._provider = provider
        self._executor = executor

    async def run(
        self, spec: RunSpec, state: RunState, on_text: TextCallback | None = None
    ) -> RunState:
        """Run until the model answers without tools or the iteration limit is hit.
        `state.messages` must hold the new user message; it is extended in place."""
        tools = {tool.name: tool for tool in spec.tools}
        specs = tuple(tool_spec(tool) for tool in spec.tools)
        while True:
            if state.iterations >= spec.max_iterations:
                state.hit_iteration_limit = True
                state.final_text = _join(
                    _last_assistant_text(state.messages),
                    ITERATION_LIMIT_NOTE.format(n=spec.max_iterations),
                )
                log.warning(
                    "run.iteration_limit run=%s limit=%d", spec.context.run_id, spec.max_iterations
                )
                return state
            request = LLMRequest(
                model=spec.model,
                system=spec.system,
                messages=_concat(spec.history, state.messages),
                tools=specs,
                max_tokens=spec.max_tokens,
                temperature=spec.temperature,
                timeout=spec.timeout,
            )
            started = time.perf_counter()
            response = await self._provider.complete(request, on_text)
            state.calls.append(
                LLMCall(
                    response.model or spec.model,
                    response.usage,
                    response.stop_reason,
                    time.perf_counter() - started,
                )
            )
            state.stop_reason = response.stop_reason
            if response.content:
                state.messages.append(ChatMessage("assistant", response.content))
            if response.tool_uses and response.stop_reason == "tool_use":
                results = await self._executor.run_all(response.tool_uses, tools, spec.context)
                state.messages.append(ChatMessage("user", tuple(results)))
                continue
            if response.stop_reason == "pause_turn":
                continue  # the API paused a long turn; sending it back resumes it
            state.final_text = _final_text(response)
            return state


def _concat(history: Sequence[ChatMessage], new: Sequence[ChatMessage]) -> tuple[ChatMessage, ...]:
    """History then this run's messages; a history ending with an unanswered user
    message (a failed earlier run) is merged with the new one, so roles alternate."""
    if history and new and history[-1].role == new[0].role == "user":
        merged = ChatMessage("user", (*history[-1].content, *new[0].content))
        return (*history[:-1], merged, *new[1:])
    return (*history, *new)


def _final_text(response: LLMResponse) -> str:
    text = response.text.strip()
    if response.stop_reason == "refusal":
        return text or REFUSAL_REPLY
    if response.stop_reason in ("max_tokens", "model_context_window_exceeded"):
        return _join(text, MAX_TOKENS_NOTE)
    return text


def _last_assistant_text(messages: Sequence[ChatMessage]) -> str:
    for message in reversed(messages):
        if message.role == "assistant" and message.text.strip():
            return message.text.strip()
    return ""


def _join(*parts: str) -> str:
    return "\n\n".join(part for part in parts if part)
