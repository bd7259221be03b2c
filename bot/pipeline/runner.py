"""One run of the agent for a batch of messages of one conversation:
budget → history and prompt → the loop (a cancellable task with a timeout) →
persist (one transaction) → compaction when the conversation has grown.

The pipeline decides what reaches a run and delivers the replies; `RunControl`
decides when a run starts and which messages it answers. Every LLM call of the
run is metered against the user's budget (`bot.pipeline.metering`); the turn is
committed with its replies in the outbox (`bot.pipeline.persist`).

Over 500 lines: one run's life from its start to its outcome (how it began,
how it ended and what the user is told) reads as one story; its parts that
stand alone live beside it (metering, trust, live, persist, turns).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from bot.accounts.budgets import BudgetStatus
from bot.accounts.economy import economy_model, share_left
from bot.accounts.holds import BudgetRefused, HoldOwner
from bot.accounts.identity import UserRecord
from bot.agent.delegate import DelegateTask, subagent_limits
from bot.agent.events import RunEvents
from bot.agent.history import HistoryPolicy, Viewer, build_history
from bot.agent.prompt import PromptContext, build_system
from bot.agent.sanitize import SILENT_TOKEN, is_silent, sanitize
from bot.agent.state import ContextLimits, RunInput, RunSpec, RunState
from bot.agent.untrusted import screen_memories
from bot.conversations import ConversationRecord, ConversationState
from bot.errors import BudgetExceeded, ProviderError
from bot.llm.failures import explain
from bot.llm.tokens import prompt_tokens
from bot.logs import claim_run_id, current_run_id, new_run_id, run_scope
from bot.personas import PersonaRecord
from bot.pipeline import turns
from bot.pipeline.control import Batch, RunEnd, Ticket
from bot.pipeline.live import LiveReply, open_live, settle
from bot.pipeline.metering import RunMeter
from bot.pipeline.outbox import Outgoing
from bot.pipeline.persist import Saved
from bot.pipeline.services import Services
from bot.pipeline.trust import initial_taint, joined, known_tools, prompts, tool_kinds
from bot.pipeline.turns import TurnRecord, TurnSaved
from bot.ports import ToolContext
from bot.store.transient import is_transient, retrying
from bot.tools.registry import tool_spec
from bot.tools.search import offer
from bot.types import IncomingMessage, Outcome, Reply, ReplyKind

log = logging.getLogger("switchboard.pipeline")

INTERNAL_ERROR_REPLY = "Sorry, something went wrong on my side. The error has been logged."
TIMEOUT_REPLY = "_(This took longer than {seconds:g} seconds, so I stopped.)_"
RETRY_AFTER_S = (0.5, 2.0)
"""A run that met a database failure that passes (`bot.store.transient`) is
run again after each of these pauses; after the last, it fails as any other."""


@dataclass(frozen=True, slots=True)
class _Run:
    id: str
    user: UserRecord
    conversation: ConversationRecord
    persona: PersonaRecord
    model: str
    first: IncomingMessage


@dataclass(slots=True)
class _Result:
    status: str = "completed"
    """completed | silent | failed | cancelled | timeout | refused | loop"""
    reply_text: str | None = None
    error: str | None = None
    notice: str | None = None
    """Text for the user that is not an answer (errors, timeouts)."""


@dataclass(frozen=True, slots=True)
class RunResult:
    outcome: Outcome
    outgoing: list[Outgoing] | None
    """The replies stored in the outbox, to send now; None when they could not be
    stored (the turn waits in the spool): send the outcome's replies as they are."""


Adopt = Callable[[Batch], Awaitable[list[Ticket]]]
"""Messages of the run's conversation other instances left in the inbox, as
tickets added to the batch (`Pipeline._adopt_pending`)."""


class Runner:
    def __init__(
        self,
        services: Services,
        adopt: Adopt | None = None,
        adapter: Callable[[str], object] | None = None,
    ) -> None:
        self.s = services
        self._adopt = adopt
        self._adapter = adapter
        """The adapter of a platform (streamed replies), if any."""

    async def run(
        self,
        batch: Batch,
        user: UserRecord,
        conversation: ConversationRecord,
        deliver: bool = True,
        created: bool = False,
    ) -> RunResult:
        """`created`: the transaction that took the conversation's lease, held
        since, created it (nothing to read of it)."""
        s, llm = self.s, self.s.settings.llm
        first: IncomingMessage = batch.tickets[0].payload.origin
        budget, history = await retrying(
            lambda: self._begin(user, conversation, created), f"run.begin user={user.id}"
        )
        persona = s.personas.resolve(first.platform, first.platform_server_id, history.persona_name)
        model = persona.model or (llm.fast_model if first.source == "scheduler" else llm.model)
        if isinstance(budget, BudgetStatus) and (
            economy := economy_model(s.budgets.settings, budget)
        ):
            log.info(
                "run.economy user=%s model=%s share_left=%.3f (instead of %s)",
                user.id,
                economy,
                share_left(budget) or 0.0,
                model,
            )
            model = economy
        run = _Run(claim_run_id(), user, conversation, persona, model, first)
        # The run's lines carry its id; it is the message's own unless another
        # run took that one (`bot.logs.claim_run_id`).
        same = run.id == current_run_id()
        with contextlib.nullcontext() if same else run_scope(run.id):
            if isinstance(budget, BudgetRefused):  # before any LLM call
                return await self._refuse(run, batch, budget, deliver)
            retries, again = iter(RETRY_AFTER_S), False
            while True:
                delay = next(retries, None)
                with run_scope(run.id) if again else contextlib.nullcontext():
                    result = await self._execute(run, batch, history, budget.limit, deliver, delay)
                if result is not None:
                    return result
                assert delay is not None
                await asyncio.sleep(delay)
                run, again = dataclasses.replace(run, id=new_run_id()), True
                log.info("run.again run=%s conversation=%s", run.id, conversation.key)

    async def _begin(
        self, user: UserRecord, conversation: ConversationRecord, created: bool
    ) -> tuple[BudgetStatus | BudgetRefused, ConversationState]:
        """The user's budget (or its refusal) and the conversation's state.
        `created`: the transaction that took the conversation's lease, held
        since, created it (nothing to read of it)."""
        s = self.s
        if created:
            history = s.conversations.created_state(conversation)
            try:
                return await s.budgets.check(user), history
            except BudgetRefused as refused:
                return refused, history
        async with s.store.read(warm=True) as session:  # all reads of a run, one session
            history = await s.conversations.state(session, conversation)
            try:
                return await s.budgets.check(user, session), history
            except BudgetRefused as refused:
                return refused, history

    async def _refuse(
        self, run: _Run, batch: Batch, refused: BudgetRefused, deliver: bool
    ) -> RunResult:
        """Refused before any LLM call (nothing is left that a call could use):
        the run is recorded with the figures, the messages answered with the
        refusal, in one transaction."""
        started = time.perf_counter()
        first = run.first
        state = RunState.answering([t.payload for t in batch.tickets])
        result = _Result("refused", error=str(refused), notice=refused.reply)
        reply = _reply(first, refused.reply, "refusal", True)
        outcome = Outcome("refused", (reply,), run.id)
        replies = outcome.replies if deliver else ()
        saved = await self.s.writer.save(self._turn(run, state, batch, result, None, replies))
        _log_run(result.status, run, state, started, saved.turn, result.error)
        self._count(result.status, first, started)
        return _ended(outcome, saved)

    async def _execute(
        self,
        run: _Run,
        batch: Batch,
        history: ConversationState,
        limit: int | None,
        deliver: bool,
        retry: float | None = None,
    ) -> RunResult | None:
        """Run the agent and save its turn. None: it met a database failure
        that passes, and `retry` (a pause) says it will be run again: what it
        spent is saved, its messages not finished."""
        s, first, conversation = self.s, run.first, run.conversation
        inputs: list[RunInput] = [t.payload for t in batch.tickets]
        state = RunState.answering(inputs)
        meter = self._meter(run, limit, batch)
        spec = await self._spec(run, batch, inputs, history, meter, state)
        events = RunEvents(s.bus, run.id, conversation.key)
        events.emit("run.started", source=first.source, model=run.model, inputs=len(inputs))
        started = time.perf_counter()
        live = self._live(run, deliver)
        try:
            end, error = await s.control.run_task(
                batch, s.agent.run(spec, state), s.settings.agent.run_timeout_seconds
            )
        except asyncio.CancelledError:  # shutting down: the messages go back to the inbox
            await self._abandon(run, live)
            events.emit("run.cancelled", reason="shutdown")
            shutdown = _Result("cancelled", error="shutdown")
            turn = self._turn(run, state, batch, shutdown, meter, interrupted=True)
            await asyncio.shield(s.writer.save(turn, retry_seconds=2.0))
            raise
        if retry is not None and error is not None and is_transient(error):
            # The database failed in a way that passes: run the messages again
            # (they stay leased here); not an apology.
            log.warning(
                "run.retry_transient run=%s conversation=%s in=%.1fs: %s: %s",
                run.id,
                conversation.key,
                retry,
                type(error).__name__,
                error,
            )
            await self._abandon(run, live)
            events.emit("run.cancelled", reason="retry")
            failed = _Result("cancelled", error=f"{type(error).__name__}: {error}"[:2000])
            turn = self._turn(run, state, batch, failed, meter, interrupted=True)
            await s.writer.save(turn)
            return None
        result = self._classify(end, error, state, spec, run)
        outcome = self._outcome(result, first, run.id, _echoes(state))
        held = s.actions.take_held(run.id) if s.actions is not None else []
        if held:  # the Confirm / Cancel prompts go out with the run's answer
            outcome = dataclasses.replace(outcome, replies=outcome.replies + prompts(held, first))
        if live is not None:  # the reply replaces what was streamed
            outcome = await settle(live, outcome, first)
        replies = outcome.replies if deliver else ()
        saved = await s.writer.save(self._turn(run, state, batch, result, meter, replies))
        _log_run(result.status, run, state, started, saved.turn, result.error)
        self._count(result.status, first, started)
        self._emit_end(events, result, state)
        if saved.turn is not None and result.status in ("completed", "silent"):
            self._maybe_compact(run, history, state, saved.turn)
        return _ended(outcome, saved)

    async def _abandon(self, run: _Run, live: LiveReply | None) -> None:
        """The run stops without an answer (its messages will be run again):
        what it streamed goes, its held actions stay pending (/pending)."""
        if live is not None:
            await asyncio.shield(live.cancel())
        if self.s.actions is not None:
            self.s.actions.take_held(run.id)

    def _live(self, run: _Run, deliver: bool) -> LiveReply | None:
        if not deliver or self._adapter is None:
            return None
        s, first = self.s, run.first
        adapter = self._adapter(first.platform)
        event_id = first.dedupe_key
        record = None
        if event_id:  # crash-safe: the inbox row knows what was posted

            async def record(drafts: tuple[str, ...]) -> None:
                await s.inbox.record_drafts(first.platform, event_id, drafts)

        key = run.conversation.key
        return open_live(adapter, s.settings.streaming, s.bus, first, run.id, key, record)

    def _count(self, status: str, first: IncomingMessage, started: float) -> None:
        metrics = self.s.metrics
        metrics.run_finished(status, time.perf_counter() - started)
        if status == "silent":
            metrics.reply_suppressed(first.platform)
        elif status == "refused":
            metrics.budget_refused()

    def _meter(self, run: _Run, limit: int | None, batch: Batch) -> RunMeter:
        s, user, cap = self.s, run.user, self.s.settings.budgets.run_cap(limit)
        return RunMeter(
            s.budgets,
            user.id,
            user.role,
            limit is not None,
            cap,
            HoldOwner(run.id, run.conversation.key),
            role_now=functools.partial(s.identity.role_now, user),
            wait_limit=s.settings.agent.run_timeout_seconds,
            clock=batch,
            token_log=functools.partial(
                turns.token_log,
                run_id=run.id,
                user_id=user.id,
                conversation_id=run.conversation.id,
                platform=run.first.platform,
                purpose="wakeup" if run.first.source == "scheduler" else "chat",
                prices=s.settings.llm.prices,
            ),
        )

    # -- building the run ---------------------------------------------------

    async def _spec(
        self,
        run: _Run,
        batch: Batch,
        inputs: list[RunInput],
        history: ConversationState,
        meter: RunMeter,
        state: RunState,
    ) -> RunSpec:
        s, llm, agent = self.s, self.s.settings.llm, self.s.settings.agent
        first, user, conversation, persona, model = (
            run.first,
            run.user,
            run.conversation,
            run.persona,
            run.model,
        )
        tools, search = offer(
            s.tools.available(user.role, persona.tool_modules, persona.name),
            s.settings.mcp.inline_max_tools,
        )
        kit = s.skills.for_persona(persona.name, persona.skills)
        tools += kit.tools
        delegate = None
        modules = persona.tool_modules
        if user.role.at_least(agent.subagent_min_role) and (modules is None or "agent" in modules):
            child_limits, least = subagent_limits(agent), agent.subagent_min_role
            delegate = DelegateTask(s.agent.child(), state, child_limits, s.guard, least)
            tools += (delegate,)  # (its children's spans join `state`)
        limits = agent.limits(model)
        memories: list[str] = []
        if agent.memory and agent.memory_recall and first.source == "user":
            query = " ".join(i.text for i in inputs)
            try:
                found = await s.memories.search(user.id, query, agent.memory_recall)
                memories = [record.line() for record in found]
            except Exception:
                log.exception("memory.recall_failed user=%s", user.id)
            memories = screen_memories(s.guard, memories, conversation.key, str(user.id))
        prompt = build_system(
            PromptContext(
                platform=first.platform,
                chat_type=first.chat_type,
                persona_name=persona.name,
                persona_prompt=persona.prompt,
                model=model,
                conversation_key=conversation.key,
                user_name=user.display_name or user.platform_user_id,
                user_role=user.role.value,
                tools=tools,
                source=first.source,
                mode="minimal" if first.source == "scheduler" else "full",
                memories=memories,
                skills=kit.section,
            )
        )
        taint = initial_taint(
            first,
            (i.origin for i in inputs),
            history.history,
            user.id,
            memories,
            known_tools(s.tools),
        )
        fixed = prompt_tokens(prompt.blocks, (), tuple(tool_spec(t) for t in tools))
        private, trusted = s.tools.derived(tool_kinds)
        viewer = Viewer(user.id, s.guard, conversation.key, private, trusted)
        policy = HistoryPolicy(
            turns=llm.history_turns,
            step=agent.history_step,
            budget_tokens=int(agent.prune_threshold * limits.context_window),
            fixed_tokens=fixed,
        )

        async def inbox() -> list[RunInput]:
            taken = batch.take_more()
            if self._adopt is not None:  # left in the inbox by other instances
                taken += await self._adopt(batch)
            taken.sort(key=lambda ticket: ticket.payload.origin.received_at)
            joined(taint, first, (ticket.payload.origin for ticket in taken))
            return [ticket.payload for ticket in taken]

        spec = RunSpec(
            model=model,
            system=prompt.blocks,
            history=tuple(build_history(history.history, history.summary, policy, viewer)),
            tools=tools,
            context=ToolContext(
                user_id=user.id,
                role=user.role,
                conversation_id=conversation.id,
                conversation_key=conversation.key,
                platform=first.platform,
                run_id=run.id,
                chat_type=first.chat_type,
                untrusted=taint,
            ),
            max_tokens=persona.max_tokens or llm.max_tokens,
            max_iterations=llm.max_iterations,
            timeout=llm.timeout_seconds,
            volatile=prompt.volatile,
            limits=ContextLimits(
                window=limits.context_window,
                min_cache_tokens=limits.min_cache_tokens,
                prune_threshold=agent.prune_threshold,
                compact_threshold=agent.compact_threshold,
                keep_last=agent.keep_last_messages,
            ),
            max_continuations=agent.max_continuations,
            repeat_warn=agent.repeat_warn,
            repeat_stop=agent.repeat_stop,
            inbox=inbox if first.source == "user" else None,
            meter=meter,
            found=search.take_found if search is not None else None,
            fallback=persona.fallback if persona.fallback is not None else tuple(llm.fallback),
        )
        if delegate is not None:
            delegate.attach(spec)
        return spec

    # -- after the loop -----------------------------------------------------

    def _classify(
        self, end: RunEnd, exc: BaseException | None, state: RunState, spec: RunSpec, run: _Run
    ) -> _Result:
        run_id = spec.context.run_id
        if end == "stop":
            return _Result("cancelled", error="stopped by /stop")
        if end == "timeout":
            seconds = self.s.settings.agent.run_timeout_seconds
            log.warning("run.timeout run=%s after %gs", run_id, seconds)
            partial = sanitize(state.final_text or _last_text(state))
            note = TIMEOUT_REPLY.format(seconds=seconds)
            notice = f"{partial}\n\n{note}" if not is_silent(partial, clean=True) else note
            return _Result("timeout", error=f"timed out after {seconds:g} s", notice=notice)
        if isinstance(exc, BudgetExceeded):
            log.info("run.budget_stop run=%s: %s", run_id, exc)
            partial = sanitize(state.final_text or _last_text(state))
            note = exc.reply if isinstance(exc, BudgetRefused) else str(exc)
            notice = f"{partial}\n\n{note}" if not is_silent(partial, clean=True) else note
            return _Result("refused", error=str(exc), notice=notice)
        if isinstance(exc, ProviderError):
            kind = type(exc).__name__
            log.error(
                "run.provider_error run=%s conversation=%s error=%s: %s",
                run_id,
                spec.context.conversation_key,
                kind,
                exc,
            )
            origin = _model_origin(run) if exc.model == run.model else None
            tried = f" (tried {', '.join(exc.tried)})" if exc.tried else ""
            return _Result("failed", error=f"{kind}: {exc}{tried}", notice=explain(exc, origin))
        if exc is not None:
            log.error("run.crashed run=%s", run_id, exc_info=exc)
            return _Result(
                "failed", error=f"{type(exc).__name__}: {exc}", notice=INTERNAL_ERROR_REPLY
            )
        if state.looped is not None:  # going in circles: stopped (`bot.agent.repeats`)
            line = state.final_text
            return _Result("loop", line, error=f"loop: {state.looped}", notice=line)
        text = sanitize(state.final_text)
        if is_silent(text, clean=True):
            return _Result("silent", SILENT_TOKEN)
        return _Result("completed", text)

    def _turn(
        self,
        run: _Run,
        state: RunState,
        batch: Batch,
        result: _Result,
        meter: RunMeter | None,
        replies: Sequence[Reply] = (),
        *,
        interrupted: bool = False,
    ) -> TurnRecord:
        answered = {id(item) for _, item in state.inputs}
        late = [t.payload for t in batch.tickets if id(t.payload) not in answered]
        state.inputs.extend((len(state.messages), item) for item in late)  # queued, then stopped
        return TurnRecord(
            run_id=run.id,
            user=run.user,
            conversation=run.conversation,
            persona_name=run.persona.name,
            model=run.model,
            state=state,
            status=result.status,
            reply_text=result.reply_text,
            error=result.error,
            replies=replies,
            owed=meter.take_owed() if meter is not None else [],
            release_holds=meter is not None and meter.reserved,
            lease_owner=self.s.inbox.owner,
            interrupted=interrupted,
        )

    def _emit_end(self, events: RunEvents, result: _Result, state: RunState) -> None:
        if result.status in ("completed", "silent"):
            events.emit(
                "run.completed",
                status=result.status,
                iterations=state.iterations,
                tokens=state.usage.total,
            )
        elif result.status == "cancelled":
            events.emit("run.cancelled", reason="stop")
        elif result.status == "timeout":
            events.emit("run.cancelled", reason="timeout")
        else:
            events.emit("run.failed", error=result.error or "")

    def _maybe_compact(
        self, run: _Run, history: ConversationState, state: RunState, saved: TurnSaved
    ) -> None:
        compactor = self.s.compactor
        last_output = state.calls[-1].usage.output_tokens if state.calls else 0
        stored = len(history.history) + saved.rows
        if compactor.needed(stored, state.last_prompt_tokens + last_output, run.model):
            self.s.control.spawn(
                compactor.compact(
                    run.conversation,
                    run.user,
                    run.id,
                    chat_type=run.first.chat_type,
                    boundary=history.boundary,
                ),
                name=f"compact:{run.conversation.key}",
            )

    def _outcome(
        self, result: _Result, first: IncomingMessage, run_id: str, echoes: Sequence[str] = ()
    ) -> Outcome:
        if result.status == "silent":
            return Outcome("silent", (), run_id)
        if result.status == "cancelled":
            return Outcome("cancelled", (), run_id)
        if result.status == "refused" and result.notice is not None:
            return Outcome("refused", (_reply(first, result.notice, "refusal"),), run_id)
        if result.notice is not None:
            return Outcome("failed", (_reply(first, result.notice, "error"),), run_id)
        assert result.reply_text is not None
        text = quoted(echoes, result.reply_text)
        return Outcome("answered", (_reply(first, text, "answer"),), run_id)


ECHO_CHARS = 600
"""A transcript quoted above the answer is cut here (the whole is in the history)."""


def _echoes(state: RunState) -> list[str]:
    return [echo for _, item in state.inputs for echo in item.echo]


def quoted(echoes: Sequence[str], text: str) -> str:
    """`text` under the transcripts it answers, each one quoted line."""
    if not echoes:
        return text
    lines = []
    for echo in echoes:
        flat = " ".join(echo.split())
        cut = flat if len(flat) <= ECHO_CHARS else flat[: ECHO_CHARS - 1].rstrip() + "…"
        lines.append(f"> 🎤 {cut}")
    return "\n".join(lines) + "\n\n" + text


def _reply(msg: IncomingMessage, text: str, kind: ReplyKind, private: bool = False) -> Reply:
    return Reply(text, msg.target(as_reply=msg.chat_type == "group"), kind, private)


def _last_text(state: RunState) -> str:
    for message in reversed(state.messages):
        if message.role == "assistant" and message.text.strip():
            return message.text
    return ""


def _ended(outcome: Outcome, saved: Saved) -> RunResult:
    """What the caller sends, once the run's turn was saved (or not)."""
    if saved.turn is not None:
        return RunResult(outcome, saved.turn.outgoing)
    if saved.spooled:
        return RunResult(outcome, None)
    return RunResult(Outcome("failed", (), outcome.run_id), [])  # taken over: not ours to send


def _log_run(
    status: str,
    run: _Run,
    state: RunState,
    started: float,
    saved: TurnSaved | None,
    error: str | None = None,
) -> None:
    usage = state.usage
    charge = saved.charge if saved else None
    budget = f" {error}" if status == "refused" and error else ""
    log.info(
        "run.%s run=%s conversation=%s user=%s model=%s iterations=%d tokens_in=%d "
        "tokens_out=%d cache_read=%d cache_write=%d budget_used=%s overage=%s ms=%.0f%s",
        status,
        run.id,
        run.conversation.key,
        run.user.id,
        run.model,
        state.iterations,
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        charge.used if charge else "-",
        charge.overage if charge else "-",
        (time.perf_counter() - started) * 1000,
        budget,
    )


def _model_origin(run: _Run) -> str:
    """Where the run's model is configured, as people are told it."""
    persona = run.persona
    if persona.model:
        return f'the persona "{persona.name}" ({persona.source or "its file"}: model)'
    if run.first.source == "scheduler":
        return "[llm] fast_model (scheduled wakeups)"
    return "[llm] model"
