"""Runs one response's tool calls: concurrently, each retried once, with
timeouts; failures go through the error channel. Results come back in call order."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from bot.agent.errors import ErrorChannel
from bot.errors import ToolFailed
from bot.llm.types import ToolResultBlock, ToolUseBlock
from bot.ports import Tool, ToolContext

log = logging.getLogger("switchboard.tools")


class ToolExecutor:
    def __init__(self, errors: ErrorChannel, *, timeout: float = 60.0, attempts: int = 2) -> None:
        self._errors = errors
        self._timeout = timeout
        self._attempts = attempts

    async def run_all(
        self, calls: Sequence[ToolUseBlock], tools: Mapping[str, Tool], ctx: ToolContext
    ) -> list[ToolResultBlock]:
        return list(await asyncio.gather(*(self._run_one(c, tools, ctx) for c in calls)))

    async def _run_one(
        self, call: ToolUseBlock, tools: Mapping[str, Tool], ctx: ToolContext
    ) -> ToolResultBlock:
        tool = tools.get(call.name)
        if tool is None:
            return ToolResultBlock(
                call.id, f"Tool '{call.name}' is not available in this conversation.", True
            )
        last_exc: BaseException | None = None
        for attempt in range(1, self._attempts + 1):
            try:
                async with asyncio.timeout(self._timeout):
                    output = await tool.run(call.input, ctx)
                return ToolResultBlock(call.id, str(output))
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                last_exc = ToolFailed(f"timed out after {self._timeout:g} s")
            except ToolFailed as exc:  # a deliberate refusal: retrying would not help
                last_exc = exc
                break
            except Exception as exc:
                last_exc = exc
            if attempt < self._attempts:
                log.info("tool.retry tool=%s attempt=%d run=%s", call.name, attempt, ctx.run_id)
        assert last_exc is not None
        message = await self._errors.report(call.name, call.input, last_exc, ctx)
        return ToolResultBlock(call.id, message, True)
