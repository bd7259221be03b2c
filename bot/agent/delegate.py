"""Sub-agents: `delegate_task(task, context?)` hands a bounded task to a child
agent with a fresh context ("read these five pages and summarise each").

The child runs the same agent loop with the run's model and a short prompt of
its own (`bot.agent.prompt.subagent_system`): no history, no memories; the task
(and its context) is its one user message. It has the requester's role and
the run's tools but `delegate_task` (depth 1), its own iteration cap
(`[agent] subagent_max_iterations`) and time cap
(`subagent_timeout_seconds`); at most `subagent_parallel` children of one run
work at once, the others wait for a place.

Every token is the run's: the child calls through the run's meter (the same
reservation, under the same run cap), and its spans join the run's (its
LLM calls count on the run and the requester's usage, not as a run of their
own), under the `delegate_task` call's span. A child starts with the run's
taint (its own external calls are held as the run's would be), and what it
read joins the run's: a child that read a page makes the run's later
external calls need confirmation, and its answer comes back as data
(marked); one that used only trusted tools leaves the run as it was and its
answer trusted. /stop cancels the run's task, and the children with it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from bot.agent.guard import Guard
from bot.agent.loop import AgentLoop
from bot.agent.prompt import subagent_system
from bot.agent.state import RunInput, RunSpec, RunState
from bot.agent.traces import current_call
from bot.agent.untrusted import screen_tool_result
from bot.config import AgentSettings
from bot.errors import BudgetExceeded, ProviderError, ToolFailed
from bot.llm.types import TextBlock
from bot.ports import Taint, ToolContext
from bot.types import Role

log = logging.getLogger("switchboard.agent")

NAME = "delegate_task"


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    iterations: int = 8
    parallel: int = 3
    seconds: float = 120.0


def subagent_limits(settings: AgentSettings) -> Limits:
    return Limits(
        settings.subagent_max_iterations,
        settings.subagent_parallel,
        settings.subagent_timeout_seconds,
    )


class DelegateTask:
    """`delegate_task` for one run: made by the runner with the run's state
    (the children's spans join it) and attached to the run's spec once built."""

    name = NAME
    description = (
        "Hand a bounded, self-contained task to a helper agent with a fresh context, e.g. "
        "'read these five pages and summarise each' or 'find X in the docs'. The helper "
        "sees only `task` and `context` (not this conversation), can use your tools except "
        "this one, and answers once; several calls in one step run in parallel. Use it for "
        "work whose intermediate results you don't need to keep; give it everything it "
        "needs to know."
    )
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "What to do and what to answer with"},
            "context": {
                "type": "string",
                "description": "Facts from this conversation the helper needs (optional)",
            },
        },
        "required": ["task"],
    }
    module = "agent"
    effect = "read"
    """Itself it only reads: the child's own calls are held as any other's."""
    trusted_output = True
    """Marked by the tool itself when the child read something untrusted."""

    def __init__(
        self,
        loop: AgentLoop,
        parent: RunState,
        limits: Limits,
        guard: Guard | None = None,
        min_role: Role = Role.USER,
    ) -> None:
        self._loop = loop
        self._parent = parent
        self._limits = limits
        self._guard = guard
        self.min_role = min_role
        """`[agent] subagent_min_role`: a run whose user falls below it stops offering it."""
        self.timeout_seconds = limits.seconds
        self._places = asyncio.Semaphore(limits.parallel)
        self._spec: RunSpec | None = None
        self.children = 0

    def attach(self, spec: RunSpec) -> None:
        self._spec = spec

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        task = str(args.get("task") or "").strip()
        if not task:
            raise ToolFailed("task is required: what the helper should do and answer with")
        if self._spec is None:
            raise ToolFailed("sub-agents are not available in this run")
        context = str(args.get("context") or "").strip()
        text = f"{task}\n\n<context>\n{context}\n</context>" if context else task
        async with self._places:
            self.children += 1
            number = self.children
            return await self._child(text, ctx, number)

    async def _child(self, text: str, ctx: ToolContext, number: int) -> str:
        parent = self._spec
        assert parent is not None
        inherited = set(ctx.untrusted.sources)
        taint = Taint(*inherited)  # the task may carry what the run read
        prompt = subagent_system()
        spec = dataclasses.replace(
            parent,
            system=prompt.blocks,
            volatile=prompt.volatile,
            history=(),
            tools=tuple(t for t in parent.tools if t.name != NAME),
            context=dataclasses.replace(ctx, untrusted=taint),
            max_iterations=self._limits.iterations,
            inbox=None,
            span_kind="llm",
        )
        state = RunState.answering([RunInput((TextBlock(text),), text)])
        under = current_call.get()
        log.info("subagent.started run=%s child=%d", ctx.run_id, number)
        try:
            async with asyncio.timeout(self._limits.seconds):
                await self._loop.run(spec, state)
        except TimeoutError:
            partial = state.final_text or _last_text(state)
            log.warning("subagent.timeout run=%s child=%d", ctx.run_id, number)
            raise ToolFailed(
                f"the helper ran out of time ({self._limits.seconds:g} s)"
                + (f"; what it had: {partial[:2000]}" if partial else "")
            ) from None
        except ProviderError as exc:  # not retried: a second child would cost again
            raise ToolFailed(f"the helper could not finish: {type(exc).__name__}") from None
        except BudgetExceeded as exc:  # the run's budget: the run's next call says so too
            raise ToolFailed(f"the helper stopped: {exc}") from None
        finally:  # its tokens are the run's, even when it was stopped
            self._parent.spans.extend(
                dataclasses.replace(span, under=under) for span in state.spans
            )
            ctx.untrusted.sources.update(taint.sources)
            log.info(
                "subagent.finished run=%s child=%d iterations=%d tokens=%d taint=%s",
                ctx.run_id,
                number,
                state.iterations,
                state.usage.total,
                ",".join(sorted(taint.sources)) or "-",
            )
        answer = state.final_text.strip() or "(the helper gave no answer)"
        if taint.sources - inherited:  # it read something untrusted: its answer is data
            return screen_tool_result(self._guard, answer, ctx, NAME)
        return answer


def _last_text(state: RunState) -> str:
    for message in reversed(state.messages):
        if message.role == "assistant" and message.text.strip():
            return message.text
    return ""
