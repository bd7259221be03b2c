"""The agent loop: think → act → observe, bounded by `max_iterations` LLM calls.

The loop knows the provider, the tools and the executor, nothing about
platforms or storage. Everything it produces goes into a `RunState` the caller
owns, so partial work survives a provider failure or a cancellation (a
cancelled tool step keeps the results that had finished).

Stop reasons: ``tool_use`` runs the tools and goes on; ``pause_turn`` sends the
paused turn back; ``max_tokens`` continues a cut reply (`max_continuations`
times) or retries a cut tool call with more room, then tells the user the reply
was cut; ``refusal`` gives a polite reply (logged); a prompt too long
(``model_context_window_exceeded`` or the API's error) compacts the context and
retries once. On the last allowed call the model must answer without tools, so
hitting the iteration limit still gives the best partial answer and a note.

Before each call the context is fitted: old tool results are pruned past the
prune threshold, and a long tool loop crossing the compaction threshold is
compacted (`bot.agent.compaction`). Messages that arrive for the conversation
meanwhile (`RunSpec.inbox`) join the run: after a tool step, or — replacing an
answer not sent yet — after the final reply. A run that repeats one tool call
(or result) is warned, then stopped (`bot.agent.repeats`).

Over 500 lines: one run's steps and every way it ends (answer, limit, cut,
refusal, loop) read as one story; what stands alone lives beside it
(compaction, executor, repeats, server tools).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from typing import Literal

from bot.agent.compaction import Summarizer, compact_view, split_summary
from bot.agent.events import EventBus, RunEvents
from bot.agent.executor import ToolExecutor
from bot.agent.history import prune_tool_results
from bot.agent.messages import (
    add_user_blocks,
    assistant,
    blank,
    concat,
    join,
    last_assistant_text,
    user,
    without_tools,
)
from bot.agent.repeats import LOOP_REPLY, NOT_RUN, Repeats
from bot.agent.server_tools import read_results, server_spans, sources_line
from bot.agent.state import RunInput, RunSpec, RunState
from bot.agent.traces import Span, Timer, fallback_span
from bot.errors import ContextWindowExceeded, ProviderError
from bot.llm.capabilities import fitted
from bot.llm.tokens import messages_tokens, prompt_tokens, text_tokens, tool_tokens
from bot.llm.types import (
    Block,
    ChatMessage,
    Fallback,
    LLMRequest,
    LLMResponse,
    TextBlock,
    TextCallback,
    ToolResultBlock,
    ToolUseBlock,
)
from bot.ports import Provider
from bot.tools.actions import output_trusted
from bot.tools.registry import tool_spec
from bot.types import Role

log = logging.getLogger("switchboard.agent")

ITERATION_LIMIT_NOTE = (
    "_(I stopped after {n} steps without finishing. Ask me to continue if you need more.)_"
)
MAX_TOKENS_NOTE = "_(My reply was cut off because it reached the length limit.)_"
CONTEXT_NOTE = "_(My reply was cut off: this conversation no longer fits my context window.)_"
REFUSAL_REPLY = "Sorry, I can't help with that request."
WRAP_UP = (
    "This is the last step allowed for this turn: tools can't be used any more. Answer "
    "now with what you have found, and say what is left to do."
)
CONTINUE_PROMPT = "Continue exactly where your reply stopped, without repeating anything."
CANCELLED_RESULT = "[Cancelled: the run was stopped before this tool finished]"


class AgentLoop:
    def __init__(
        self,
        provider: Provider,
        executor: ToolExecutor,
        *,
        summarizer: Summarizer | None = None,
        bus: EventBus | None = None,
    ) -> None:
        self.provider = provider
        self.executor = executor
        self.summarizer = summarizer
        self.bus = bus

    def child(self) -> AgentLoop:
        """The loop for a run's sub-agents: the same provider and tools, no
        events (what they write is not the run's reply)."""
        return AgentLoop(self.provider, self.executor, summarizer=self.summarizer)

    async def run(
        self, spec: RunSpec, state: RunState, on_text: TextCallback | None = None
    ) -> RunState:
        """Run until the model answers. `state.messages` must hold the new user
        message; it is extended in place."""
        return await _Run(self, spec, state, on_text).go()


class _Run:
    def __init__(
        self, loop: AgentLoop, spec: RunSpec, state: RunState, on_text: TextCallback | None
    ) -> None:
        self.loop, self.spec, self.state, self.on_text = loop, spec, state, on_text
        self.events = RunEvents(loop.bus, spec.context.run_id, spec.context.conversation_key)
        self.context = spec.context
        """the tools' context: its role follows the user's (`_role_changed`)"""
        self.tools = {tool.name: tool for tool in spec.tools}
        self.specs = tuple(tool_spec(tool) for tool in spec.tools)
        self.fixed_specs = len(self.specs)
        """the definitions every run of the persona sends; those found later follow"""
        self.history = list(spec.history)
        self._sized: tuple[list[ChatMessage], int] | None = None
        """`self.history` and its estimated tokens (`_history_tokens`)"""
        self.fixed_tokens = prompt_tokens(spec.system, (), self.specs) + text_tokens(spec.volatile)
        """the estimated tokens of every request's part that is not its messages"""
        self.view = self._fitted(state.messages)  # this run's messages as the model sees them
        self.max_tokens = spec.max_tokens
        self.calls = 0
        self.pieces: list[str] = []  # a reply cut by max_tokens, being continued
        self.paused: list[ChatMessage] = []  # a turn the API paused, being resumed
        self.retried_context = self.retried_tool_cut = False
        self.estimate_at_last_call = 0
        self.repeats = Repeats(spec.repeat_warn, spec.repeat_stop)

    async def go(self) -> RunState:
        spec, state = self.spec, self.state
        while True:
            if self.calls >= spec.max_iterations:
                return self._limit_reached()
            wrap_up = self.calls == spec.max_iterations - 1 and self._awaiting_results()
            await self._fit()
            try:
                response = await self._complete(wrap_up)
            except ContextWindowExceeded as exc:
                if self.retried_context:
                    raise
                await self._retry_compacted(str(exc))
                continue
            stop = state.stop_reason = response.stop_reason
            if stop == "model_context_window_exceeded" and not self.retried_context:
                await self._retry_compacted(stop)
                continue
            if wrap_up:
                return self._finish(without_tools(response), limit=True)
            if response.tool_uses and stop == "tool_use":
                self._append(ChatMessage("assistant", response.content))
                await self._execute(response)
                if state.looped is not None:
                    return self._stop_looping(state.looped)
                await self._take_inbox()
                continue
            if response.tool_uses and stop == "max_tokens" and not self.retried_tool_cut:
                self.retried_tool_cut = True  # the tool input was cut: retry with more room
                self.max_tokens *= 2
                self.events.emit("run.retrying", reason="max_tokens", detail="tool call cut")
                continue
            if stop == "max_tokens" and self.continuations_left() and response.text.strip():
                self.pieces.append(response.text)
                self.view += [assistant(response.text), user(CONTINUE_PROMPT)]
                self.events.emit("run.retrying", reason="max_tokens", detail="continuing")
                continue
            if stop == "pause_turn":
                if self._append(ChatMessage("assistant", response.content)):
                    self.paused.append(self.view[-1])
                continue
            if not self.pieces and self.calls < spec.max_iterations and await self._take_inbox():
                continue  # newer messages came in: answer them all instead
            return self._finish(without_tools(response))

    # -- steps --------------------------------------------------------------

    async def _complete(self, wrap_up: bool) -> LLMResponse:
        spec = self.spec
        messages, history_end = concat(self.history, self.view)
        volatile = "\n\n".join(p for p in (spec.volatile, WRAP_UP if wrap_up else "") if p)
        request = LLMRequest(
            model=spec.model,
            system=spec.system,
            messages=messages,
            tools=self.specs,
            max_tokens=self.max_tokens,
            temperature=spec.temperature,
            timeout=spec.timeout,
            cache_min_tokens=spec.limits.min_cache_tokens,
            history_end=history_end,
            volatile=volatile,
            tool_choice=self._tool_choice(wrap_up),
            cached_tools=self.fixed_specs,
            fallback=spec.fallback,
            on_fallback=self._fell_back,
        )
        if spec.meter is not None:  # reserve before the call; may shrink max_tokens
            allowed = await spec.meter.before_call(request)
            if allowed < request.max_tokens:
                request = dataclasses.replace(request, max_tokens=allowed)
            if spec.meter.role is not self.context.role:
                self._role_changed(spec.meter.role)
                request = dataclasses.replace(request, tool_choice=self._tool_choice(wrap_up))
        self.events.emit("activity", kind="thinking")
        timer = Timer()
        self.calls += 1
        try:
            response = await self.loop.provider.complete(request, self._chunk)
        except BaseException as exc:
            if spec.meter is not None:
                await asyncio.shield(spec.meter.after_call(None))
            if not isinstance(exc, ProviderError):
                raise
            self.state.spans.append(
                Span(
                    spec.span_kind,
                    spec.model,
                    timer.started_at,
                    timer.ms,
                    is_error=True,
                    detail=type(exc).__name__,
                )
            )
            raise
        usage, model = response.usage, response.model or spec.model
        logged = False
        if spec.meter is not None:
            logged = await spec.meter.after_call(usage, model, spec.span_kind)
        self.state.spans.append(
            Span(
                spec.span_kind,
                model,
                timer.started_at,
                timer.ms,
                usage,
                detail=response.stop_reason,
                logged=logged,
            )
        )
        self.state.spans.extend(server_spans(response.content, timer.started_at))
        if read_results(response.content):  # the provider's search: pages the model read
            self.context.untrusted.add("tool_result")
        self.state.last_prompt_tokens = (
            usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        )
        self.estimate_at_last_call = self._estimate()
        return response

    async def _fell_back(self, fallback: Fallback) -> None:
        """The call goes on with the next model of its chain: the failed
        attempt is a span, and the text it streamed is dropped from the live
        view (the next model's replaces it)."""
        self.state.spans.append(fallback_span(self.spec.span_kind, fallback))
        self.events.emit("run.retrying", reason="fallback", detail=fallback.to_model)

    async def _chunk(self, text: str) -> None:
        self.events.emit("chunk", text=text)
        if self.on_text is not None:
            await self.on_text(text)

    async def _execute(self, response: LLMResponse) -> None:
        calls = response.tool_uses
        done: dict[str, ToolResultBlock] = {}
        counts = [self.repeats.call(call.name, call.input) for call in calls]
        repeated = next(
            (c for c, n in zip(calls, counts, strict=True) if self.repeats.stops(n)), None
        )
        if repeated is not None:  # going in circles: none of this step runs
            self._append(
                ChatMessage("user", tuple(ToolResultBlock(c.id, NOT_RUN, True) for c in calls))
            )
            self.state.looped = repeated.name
            return

        def finished(call: object, result: ToolResultBlock, span: Span) -> None:
            done[result.tool_use_id] = result
            self.state.spans.append(span)
            self.events.emit(
                "tool.result",
                tool=span.name,
                id=result.tool_use_id,
                is_error=result.is_error,
                duration_ms=span.duration_ms,
            )

        def retrying(call: object, attempt: int, error: str) -> None:
            self.events.emit("run.retrying", reason="tool", detail=error, attempt=attempt)

        for call in calls:
            self.events.emit("tool.call", tool=call.name, id=call.id)
        self.events.emit("activity", kind="tool_exec")
        try:
            results = await self.loop.executor.run_all(
                calls, self.tools, self.context, on_done=finished, on_retry=retrying
            )
        except asyncio.CancelledError:
            partial = tuple(
                done.get(c.id) or ToolResultBlock(c.id, CANCELLED_RESULT, True) for c in calls
            )
            self._append(ChatMessage("user", partial))
            raise
        results = [self._noted(c, r, n) for c, r, n in zip(calls, results, counts, strict=True)]
        self._append(ChatMessage("user", tuple(results)))
        for call in calls:  # what the model reads next is not the requester's own words
            tool = self.tools.get(call.name)
            if tool is None or not output_trusted(tool):
                self.context.untrusted.add("tool_result")
        self._add_found()

    def _noted(self, call: ToolUseBlock, result: ToolResultBlock, calls: int) -> ToolResultBlock:
        """`result`, with a note when it repeats (`bot.agent.repeats`); a
        result given `repeat_stop` times ends the run after this step."""
        results = self.repeats.result(call.name, result.content)
        if self.repeats.stops(results) and self.state.looped is None:
            self.state.looped = call.name
        note = self.repeats.note(calls, results)
        if note is None:
            return result
        return dataclasses.replace(result, content=join(result.content, note))

    def _add_found(self) -> None:
        """Tools a search found become callable, their definitions sent after
        the run's fixed ones (the cached prefix stays as it was)."""
        if self.spec.found is None:
            return
        added = [
            tool
            for tool in self.spec.found()
            if tool.name not in self.tools and self.context.role.at_least(tool.min_role)
        ]
        for tool in added:
            self.tools[tool.name] = tool
            definition = tool_spec(tool)
            self.specs += (definition,)
            self.fixed_tokens += tool_tokens(definition)
        if added:
            log.info(
                "run.tools_found run=%s: %s",
                self.context.run_id,
                ", ".join(tool.name for tool in added),
            )

    def _tool_choice(self, wrap_up: bool) -> Literal["none"] | None:
        """ "none" when the tools are defined but the model may not call any:
        the last step, or none left that the user's role may run."""
        return "none" if self.specs and (wrap_up or not self.tools) else None

    def _role_changed(self, role: Role) -> None:
        """The user's role changed while the run goes on (seen at this call):
        from now the run runs only the tools the new role may use (a call to
        another is answered "not available"; none is added: a promotion counts
        from the next run), and those see the new role. The definitions sent
        stay as they were: the run's history names the tools it used, which
        the API wants defined, and the cached prompt prefix stays whole."""
        self.context = dataclasses.replace(self.context, role=role)
        kept = {name: tool for name, tool in self.tools.items() if role.at_least(tool.min_role)}
        if len(kept) < len(self.tools):
            log.info(
                "run.tools_withdrawn run=%s role=%s: %s",
                self.context.run_id,
                role.value,
                ", ".join(sorted(set(self.tools) - set(kept))),
            )
        self.tools = kept

    async def _take_inbox(self) -> bool:
        """Add messages that arrived meanwhile to the last user message."""
        if self.spec.inbox is None:
            return False
        arrived: Sequence[RunInput] = await self.spec.inbox()
        if not arrived:
            return False
        blocks = tuple(b for i in arrived for b in i.blocks)
        add_user_blocks(self.view, blocks)
        self.view = self._fitted(self.view)
        add_user_blocks(self.state.messages, blocks)
        at = len(self.state.messages) - 1
        self.state.inputs.extend((at, i) for i in arrived)
        log.info("run.joined run=%s messages=%d", self.spec.context.run_id, len(arrived))
        return True

    def _fitted(self, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """`messages` as the model takes them (`bot.llm.capabilities.fitted`):
        the files it cannot read, and documents past one request's limits, as
        text; done as they join the run, so that estimates count what is sent."""
        spec = self.spec
        return list(fitted(messages, self.loop.provider, spec.model, window=spec.limits.window))

    # -- context size -------------------------------------------------------

    def _estimate(self) -> int:
        return self.fixed_tokens + self._messages_size()

    def _history_tokens(self) -> int:
        """The history's estimated tokens, counted again only when it was
        replaced (pruned, compacted): each call's estimate asks."""
        sized = self._sized
        if sized is None or sized[0] is not self.history:
            sized = self._sized = (self.history, messages_tokens(self.history))
        return sized[1]

    async def _fit(self) -> None:
        """Prune old tool results past the prune threshold; compact past the
        compaction threshold."""
        limits = self.spec.limits
        estimate = self._estimate()
        if self.state.last_prompt_tokens:  # calibrate on what the API counted last time
            estimate = max(
                estimate, self.state.last_prompt_tokens + estimate - self.estimate_at_last_call
            )
        prune_at = int(limits.prune_threshold * limits.window)
        if estimate > prune_at:
            overhead = estimate - self._messages_size()
            self._prune(prune_at - overhead)
            estimate = overhead + self._messages_size()
        if estimate > limits.compact_threshold * limits.window:
            await self._compact()

    def _messages_size(self) -> int:
        return self._history_tokens() + messages_tokens(self.view)

    def _prune(self, budget: int) -> None:
        combined = [*self.history, *self.view]
        head = 2 if split_summary(combined)[0] is not None else 1
        pruned = prune_tool_results(combined, budget, protect_head=head)
        self.history, self.view = pruned[: len(self.history)], pruned[len(self.history) :]

    async def _compact(self) -> None:
        self.events.emit("activity", kind="compacting")
        compacted = await compact_view(
            [*self.history, *self.view], self.loop.summarizer, self.spec.limits.keep_last
        )
        self.state.spans.extend(compacted.spans)
        self.state.compactions += 1
        self.history, self.view = [], compacted.messages
        self.estimate_at_last_call = 0
        self.state.last_prompt_tokens = 0
        log.info(
            "run.compacted run=%s messages=%d%s",
            self.spec.context.run_id,
            len(compacted.messages),
            f" (truncated: {compacted.error})" if compacted.error else "",
        )

    async def _retry_compacted(self, reason: str) -> None:
        self.retried_context = True
        self.events.emit("run.retrying", reason="context_window", detail=reason[:200])
        await self._compact()
        self._prune(0)  # whatever old tool output is left goes too

    # -- endings ------------------------------------------------------------

    def continuations_left(self) -> bool:
        return len(self.pieces) < self.spec.max_continuations

    def _awaiting_results(self) -> bool:
        """Whether the model is about to read tool results (so it is mid-task)."""
        last = self.view[-1] if self.view else None
        return bool(
            self.calls
            and last is not None
            and any(isinstance(b, ToolResultBlock) for b in last.content)
        )

    def _finish(self, response: LLMResponse, *, limit: bool = False) -> RunState:
        state, stop = self.state, response.stop_reason
        before = [m.text for m in self.paused]  # the resumed turn is one reply
        sources = sources_line([*(b for m in self.paused for b in m.content), *response.content])
        paused = {id(m) for m in self.paused}
        state.messages[:] = [m for m in state.messages if id(m) not in paused]
        text = "".join([*before, *self.pieces, response.text])
        joined = bool(self.pieces or self.paused)
        content: tuple[Block, ...] = (TextBlock(text),) if joined else response.content
        if content:
            self._append(ChatMessage("assistant", content))
        text = text.strip()
        if limit:
            state.hit_iteration_limit = True
            log.warning(
                "run.iteration_limit run=%s limit=%d",
                self.spec.context.run_id,
                self.spec.max_iterations,
            )
            state.final_text = join(text, ITERATION_LIMIT_NOTE.format(n=self.spec.max_iterations))
        elif stop == "refusal":
            log.warning("run.refusal run=%s", self.spec.context.run_id)
            state.final_text = text or REFUSAL_REPLY
        elif stop == "max_tokens":
            state.final_text = join(text, MAX_TOKENS_NOTE)
        elif stop == "model_context_window_exceeded":
            state.final_text = join(text, CONTEXT_NOTE)
        else:
            state.final_text = text
        if sources and state.final_text:  # the pages the reply cites, as links
            state.final_text = join(state.final_text, sources)
        return state

    def _stop_looping(self, tool: str) -> RunState:
        """The run repeats itself: it ends here, without another LLM call."""
        log.warning("run.loop run=%s tool=%s calls=%d", self.spec.context.run_id, tool, self.calls)
        self.state.final_text = LOOP_REPLY.format(tool=tool)
        return self.state

    def _limit_reached(self) -> RunState:
        self.state.hit_iteration_limit = True
        note = ITERATION_LIMIT_NOTE.format(n=self.spec.max_iterations)
        self.state.final_text = join(last_assistant_text(self.state.messages), note)
        log.warning("run.iteration_limit run=%s", self.spec.context.run_id)
        return self.state

    def _append(self, message: ChatMessage) -> bool:
        """Add a message to the run; blank text is left out (the API refuses it).
        False when nothing was left to add."""
        kept = tuple(b for b in message.content if not blank(b))
        if not kept:
            return False
        if len(kept) != len(message.content):
            message = ChatMessage(message.role, kept)
        self.view.append(message)
        self.state.messages.append(message)
        return True
