"""Runs one response's tool calls: concurrently, each retried once, with
timeouts; failures go through the error channel; results over the size limit
are stored and replaced by a preview (`bot.tools.results`); a consequential
call without a direct request is held for confirmation (`bot.tools.actions`). Results come back
in call order. Each finished call is reported to `on_done` as it completes (with
its span), so a cancelled run still knows the results it had.

A tool that bounds its own calls (`timeout_seconds`: an MCP server's) gets
that long, and a little more as a backstop. The output of a tool that is not
trusted is data, its errors included: marked and scanned by the guard."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence

from bot.agent.guard import Guard
from bot.agent.traces import Span, Timer, current_call
from bot.agent.untrusted import screen_tool_result
from bot.errors import ToolFailed, ToolReportedError
from bot.llm.types import ToolResultBlock, ToolUseBlock
from bot.metrics import Metrics
from bot.ports import Tool, ToolContext, ToolOutput
from bot.tools.actions import PendingActions, note_held, output_trusted
from bot.tools.errors import ErrorChannel, summarize
from bot.tools.results import ResultStore

log = logging.getLogger("switchboard.tools")

NOT_AVAILABLE = "not available"
HELD = "held for confirmation"
BACKSTOP_SECONDS = 5.0
"""Beyond a tool's own `timeout_seconds`, before the executor gives up on it."""

OnDone = Callable[[ToolUseBlock, ToolResultBlock, Span], None]
OnRetry = Callable[[ToolUseBlock, int, str], None]


class ToolExecutor:
    def __init__(
        self,
        errors: ErrorChannel,
        *,
        timeout: float = 60.0,
        attempts: int = 2,
        results: ResultStore | None = None,
        actions: PendingActions | None = None,
        guard: Guard | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._errors = errors
        self._timeout = timeout
        self._attempts = attempts
        self._results = results
        self._actions = actions
        self._guard = guard
        self._metrics = metrics

    async def run_all(
        self,
        calls: Sequence[ToolUseBlock],
        tools: Mapping[str, Tool],
        ctx: ToolContext,
        *,
        on_done: OnDone | None = None,
        on_retry: OnRetry | None = None,
    ) -> list[ToolResultBlock]:
        return list(
            await asyncio.gather(*(self._run(c, tools, ctx, on_done, on_retry) for c in calls))
        )

    async def _run(
        self,
        call: ToolUseBlock,
        tools: Mapping[str, Tool],
        ctx: ToolContext,
        on_done: OnDone | None,
        on_retry: OnRetry | None,
    ) -> ToolResultBlock:
        timer = Timer()
        current_call.set(call.id)  # (this call's own task: gathered)
        result, error, trace = await self._run_one(call, tools, ctx, on_retry)
        span = Span(
            "tool",
            call.name,
            timer.started_at,
            timer.ms,
            is_error=result.is_error,
            detail=error if error is not None else trace,
            call_id=call.id,
        )
        if self._metrics is not None:
            self._metrics.tool_called(call.name, tools.keys(), _outcome(result, error))
        if on_done is not None:
            on_done(call, result, span)
        return result

    async def _run_one(
        self,
        call: ToolUseBlock,
        tools: Mapping[str, Tool],
        ctx: ToolContext,
        on_retry: OnRetry | None,
    ) -> tuple[ToolResultBlock, str | None, str | None]:
        """The result, the error's summary (or why it did not run) and the
        tool's own line for the trace (`ToolOutput.trace`)."""
        tool = tools.get(call.name)
        if tool is None:
            text = f"Tool '{call.name}' is not available in this conversation."
            return ToolResultBlock(call.id, text, True), NOT_AVAILABLE, None
        if self._actions is not None and self._actions.needs_confirmation(tool, ctx):
            held = await self._actions.hold(tool, call.input, ctx)
            note_held(tool)
            return ToolResultBlock(call.id, held), HELD, None
        last_exc: BaseException | None = None
        own: float | None = getattr(tool, "timeout_seconds", None)
        seconds = self._timeout if own is None else own + BACKSTOP_SECONDS
        for attempt in range(1, self._attempts + 1):
            try:
                async with asyncio.timeout(seconds):
                    returned = await tool.run(call.input, ctx)
                rich = returned if isinstance(returned, ToolOutput) else None
                images = rich.images if rich is not None else ()
                trace = rich.trace if rich is not None else None
                output = str(returned)
                if self._results is not None:
                    output = await self._results.shrink(
                        output, tool_name=call.name, tool_use_id=call.id, ctx=ctx
                    )
                if not output_trusted(tool):  # content from elsewhere: data, scanned
                    output = screen_tool_result(self._guard, output, ctx, call.name)
                return ToolResultBlock(call.id, output, images=images), None, trace
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                last_exc = ToolFailed(f"timed out after {seconds:g} s")
            except ToolFailed as exc:  # a deliberate refusal: retrying would not help
                last_exc = exc
                break
            except Exception as exc:
                last_exc = exc
            if attempt < self._attempts:
                log.info("tool.retry tool=%s attempt=%d run=%s", call.name, attempt, ctx.run_id)
                if on_retry is not None:
                    on_retry(call, attempt, summarize(last_exc))
        assert last_exc is not None
        message = await self._errors.report(call.name, call.input, last_exc, ctx)
        if isinstance(last_exc, ToolReportedError) and not output_trusted(tool):
            message = screen_tool_result(self._guard, message, ctx, call.name)
        return ToolResultBlock(call.id, message, True), summarize(last_exc), None


def _outcome(result: ToolResultBlock, error: str | None) -> str:
    """ok | error | held (for confirmation) | unavailable (no such tool here)."""
    if error == NOT_AVAILABLE:
        return "unavailable"
    if error == HELD:
        return "held"
    return "error" if result.is_error else "ok"
