"""One path for every message: gate → dedupe → command → resolve → agent → deliver.

`Pipeline.handle` is what adapters (and the scheduler) call. It never raises
for a per-message failure: failures are logged, recorded and answered with a
short error notice; the returned `Outcome` says what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from bot.agent.content import user_content
from bot.agent.history import to_chat_messages
from bot.agent.loop import AgentLoop, RunSpec, RunState
from bot.agent.prompt import PromptContext, build_system
from bot.agent.sanitize import SILENT_TOKEN, is_silent, sanitize
from bot.budget import Budgets
from bot.commands import Commands
from bot.config import Settings
from bot.conversations import ConversationRecord, Conversations, ConversationState
from bot.dedupe import EventLog
from bot.errors import BudgetExceeded, ProviderError
from bot.identity import Identity, UserRecord
from bot.llm.types import ChatMessage
from bot.personas import PersonaBook, PersonaRecord
from bot.ports import Adapter, CommandInfo, ToolContext
from bot.store import Store
from bot.store.models import DeliveryFailure, Message
from bot.tools.registry import ToolRegistry
from bot.turns import TurnRecord, record_turn
from bot.types import IncomingMessage, Outcome, Reply, ReplyKind

log = logging.getLogger("switchboard.pipeline")

RunStatus = Literal["completed", "silent", "failed"]

TYPING_INTERVAL_S = 4.0
PROVIDER_ERROR_REPLY = (
    "Sorry, I couldn't get an answer from the AI service just now ({reason}). "
    "Please try again in a moment."
)
INTERNAL_ERROR_REPLY = "Sorry, something went wrong on my side. The error has been logged."
PROVIDER_REASONS = {
    "Overloaded": "the service is overloaded",
    "ProviderRateLimited": "rate limited",
    "ProviderUnavailable": "the service is unreachable",
    "ProviderAuthError": "the service rejected our credentials",
    "ContextWindowExceeded": "the conversation is too long",
    "ProviderBadRequest": "the request was rejected",
}


@dataclass(frozen=True, slots=True)
class Services:
    """Everything the pipeline needs, built by `bot.app`."""

    settings: Settings
    store: Store
    identity: Identity
    budgets: Budgets
    personas: PersonaBook
    conversations: Conversations
    commands: Commands
    tools: ToolRegistry
    agent: AgentLoop
    events: EventLog


@dataclass(slots=True)
class _Result:
    status: RunStatus = "completed"
    reply_text: str | None = None
    error: str | None = None
    error_kind: str = ""


class Pipeline:
    def __init__(self, services: Services) -> None:
        self.s = services
        self._adapters: dict[str, Adapter] = {}
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._active: set[asyncio.Task[object]] = set()

    # -- adapters -----------------------------------------------------------

    def attach(self, adapter: Adapter) -> None:
        self._adapters[adapter.platform] = adapter

    def command_infos(self) -> Sequence[CommandInfo]:
        return self.s.commands.infos()

    async def drain(self, grace: float) -> None:
        """Wait for in-flight messages to finish (used at shutdown)."""
        pending = {t for t in self._active if not t.done()}
        if pending:
            log.info("pipeline.draining runs=%d grace=%ss", len(pending), grace)
            await asyncio.wait(pending, timeout=grace)

    # -- the path -----------------------------------------------------------

    async def handle(
        self,
        msg: IncomingMessage,
        *,
        deliver: bool = True,
        on_accepted: Callable[[], None] | None = None,
    ) -> Outcome:
        task = asyncio.current_task()
        if task is not None:
            self._active.add(task)
        try:
            return await self._handle(msg, deliver, on_accepted)
        finally:
            if task is not None:
                self._active.discard(task)

    async def _handle(
        self, msg: IncomingMessage, deliver: bool, on_accepted: Callable[[], None] | None
    ) -> Outcome:
        # The gate is a pure check, so it runs before dedupe: ignored group
        # chatter costs no database write.
        if not self._addressed(msg):
            if msg.chat_type == "group" and self.s.settings.keep_group_context(msg.platform):
                await self._keep_as_context(msg)
                return Outcome("context")
            return Outcome("ignored")
        key = msg.dedupe_key
        if key and not await self.s.events.claim(msg.platform, key):
            return Outcome("duplicate")
        if on_accepted is not None:  # durably ours: the platform may forget it now
            on_accepted()
        try:
            user = await self.s.identity.resolve(msg)
            if msg.source == "user" and self.s.commands.is_command(msg.text):
                return await self._command(msg, user, deliver)
            conversation = await self.s.conversations.resolve(msg)
            async with self._conversation_lock(conversation.key):
                return await self._run(msg, user, conversation, deliver)
        except Exception:
            log.exception(
                "pipeline.failed platform=%s conversation=%s", msg.platform, msg.conversation_key
            )
            await self._finish_event(msg, "failed")
            reply = self._reply(msg, INTERNAL_ERROR_REPLY, "error")
            return await self._deliver(Outcome("failed", (reply,)), deliver)

    def _addressed(self, msg: IncomingMessage) -> bool:
        return msg.addressed or not self.s.settings.require_mention(msg.platform)

    async def _command(self, msg: IncomingMessage, user: UserRecord, deliver: bool) -> Outcome:
        result = await self.s.commands.dispatch(msg, user)
        await self._finish_event(msg, "command")
        reply = self._reply(msg, result.text, "command", private=result.private)
        return await self._deliver(Outcome("command", (reply,)), deliver)

    async def _run(
        self,
        msg: IncomingMessage,
        user: UserRecord,
        conversation: ConversationRecord,
        deliver: bool,
    ) -> Outcome:
        """Budget → persona → agent → persist → deliver, under the conversation lock."""
        llm = self.s.settings.llm
        refusal: str | None = None
        async with self.s.store.read() as session:  # all reads of a run, one session
            try:
                await self.s.budgets.check(user, session)
                state = await self.s.conversations.state(session, conversation, llm.history_turns)
            except BudgetExceeded as exc:
                refusal = str(exc)
        if refusal is not None:  # refused before any LLM call
            log.info("budget.refused user=%s %s", user.id, refusal)
            await self._finish_event(msg, "refused")
            reply = self._reply(msg, _budget_refusal(refusal), "refusal", private=True)
            return await self._deliver(Outcome("refused", (reply,)), deliver)

        content = user_content(msg)
        notice: tuple[Reply, ...] = ()
        if content.problems:
            text = "I couldn't use " + "; ".join(content.problems) + "."
            notice = (self._reply(msg, text, "notice"),)
            if not content.usable:  # nothing left to answer: no LLM call
                await self._finish_event(msg, "refused")
                return await self._deliver(Outcome("refused", notice), deliver)
            await self._deliver(Outcome("refused", notice), deliver)
        persona = self.s.personas.resolve(msg.platform, msg.platform_server_id, state.persona_name)
        run_id = secrets.token_hex(8)
        model = persona.model or (llm.fast_model if msg.source == "scheduler" else llm.model)
        user_text = content.text
        run = RunState(messages=[ChatMessage("user", content.blocks)])
        spec = self._spec(msg, user, conversation, persona, state, model, run_id)
        started = time.perf_counter()
        result = await self._agent(spec, run, msg)

        async with self.s.store.write() as session:
            turn = TurnRecord(
                run_id=run_id,
                msg=msg,
                user=user,
                conversation=conversation,
                persona_name=persona.name,
                model=model,
                state=run,
                status=result.status,
                reply_text=result.reply_text,
                user_text=user_text,
                error=result.error,
            )
            charge = await record_turn(session, turn, self.s.budgets, llm.prices)
        usage = run.usage
        log.info(
            "run.%s run=%s conversation=%s user=%s model=%s iterations=%d tokens_in=%d "
            "tokens_out=%d cache_read=%d cache_write=%d budget_used=%s overage=%s ms=%.0f",
            result.status,
            run_id,
            conversation.key,
            user.id,
            model,
            run.iterations,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            charge.used if charge else "-",
            charge.overage if charge else "-",
            (time.perf_counter() - started) * 1000,
        )
        if result.status == "silent":
            return Outcome("silent", notice, run_id)
        if result.status == "failed":
            reason = PROVIDER_REASONS.get(result.error_kind, "provider error")
            reply = self._reply(msg, PROVIDER_ERROR_REPLY.format(reason=reason), "error")
            return _with(notice, await self._deliver(Outcome("failed", (reply,), run_id), deliver))
        assert result.reply_text is not None
        reply = self._reply(msg, result.reply_text, "answer")
        return _with(notice, await self._deliver(Outcome("answered", (reply,), run_id), deliver))

    async def _agent(self, spec: RunSpec, run: RunState, msg: IncomingMessage) -> _Result:
        """Run the agent loop; provider errors become a failed result (recorded,
        then reported to the user as an error notice, never as an answer)."""
        try:
            async with self._typing(msg):
                await self.s.agent.run(spec, run)
        except ProviderError as exc:
            kind = type(exc).__name__
            log.error(
                "run.provider_error run=%s conversation=%s error=%s: %s",
                spec.context.run_id,
                spec.context.conversation_key,
                kind,
                exc,
            )
            return _Result("failed", error=f"{kind}: {exc}", error_kind=kind)
        text = sanitize(run.final_text)
        if is_silent(text):
            return _Result("silent", SILENT_TOKEN)
        return _Result("completed", text)

    def _spec(
        self,
        msg: IncomingMessage,
        user: UserRecord,
        conversation: ConversationRecord,
        persona: PersonaRecord,
        state: ConversationState,
        model: str,
        run_id: str,
    ) -> RunSpec:
        llm = self.s.settings.llm
        tools = tuple(self.s.tools.available(user.role, persona.tool_modules))
        prompt = PromptContext(
            platform=msg.platform,
            chat_type=msg.chat_type,
            persona_name=persona.name,
            persona_prompt=persona.prompt,
            model=model,
            conversation_key=conversation.key,
            user_name=user.display_name or user.platform_user_id,
            user_role=user.role.value,
            tools=tools,
            source=msg.source,
            mode="minimal" if msg.source == "scheduler" else "full",
        )
        return RunSpec(
            model=model,
            system=build_system(prompt),
            history=tuple(to_chat_messages(state.history)),
            tools=tools,
            context=ToolContext(
                user_id=user.id,
                role=user.role,
                conversation_id=conversation.id,
                conversation_key=conversation.key,
                platform=msg.platform,
                run_id=run_id,
                chat_type=msg.chat_type,
            ),
            max_tokens=persona.max_tokens or llm.max_tokens,
            max_iterations=llm.max_iterations,
            timeout=llm.timeout_seconds,
        )

    # -- delivery -----------------------------------------------------------

    def _reply(
        self, msg: IncomingMessage, text: str, kind: ReplyKind, *, private: bool = False
    ) -> Reply:
        return Reply(text, msg.target(as_reply=msg.chat_type == "group"), kind, private)

    async def _deliver(self, outcome: Outcome, deliver: bool) -> Outcome:
        if deliver:
            for reply in outcome.replies:
                await self.send(reply)
        return outcome

    async def send(self, reply: Reply) -> bool:
        """Send through the platform's adapter; a failure is recorded, never lost."""
        adapter = self._adapters.get(reply.target.platform)
        try:
            if adapter is None:
                raise LookupError(f"no adapter running for platform {reply.target.platform!r}")
            await adapter.send(reply)
            return True
        except Exception as exc:
            await self.record_delivery_failure(reply, exc)
            return False

    async def record_delivery_failure(self, reply: Reply, error: BaseException) -> None:
        """Log and store a reply that could not be delivered (`delivery_failures`)."""
        target = reply.target
        reason = f"{type(error).__name__}: {error}"
        log.error(
            "delivery.failed platform=%s channel=%s thread=%s reason=%s",
            target.platform,
            target.channel_id,
            target.thread_id,
            reason,
        )
        try:
            async with self.s.store.write() as session:
                session.add(
                    DeliveryFailure(
                        platform=target.platform,
                        conversation_key=target.conversation_key,
                        channel_id=target.channel_id,
                        thread_id=target.thread_id,
                        text=reply.text,
                        reason=reason[:2000],
                    )
                )
        except Exception:
            log.exception("delivery.failure_not_recorded platform=%s", target.platform)

    # -- helpers ------------------------------------------------------------

    async def _keep_as_context(self, msg: IncomingMessage) -> None:
        """Store a group message the bot was not asked about, so a later
        question in the same conversation can refer to it. No run, no reply."""
        user = await self.s.identity.resolve(msg)
        conversation = await self.s.conversations.resolve(msg)
        async with self.s.store.write() as session:
            session.add(
                Message(
                    conversation_id=conversation.id,
                    role="user",
                    text=user_content(msg).text,
                    user_id=user.id,
                    platform_message_id=msg.platform_message_id,
                    created_at=msg.received_at,
                )
            )

    async def _finish_event(self, msg: IncomingMessage, status: str) -> None:
        if msg.dedupe_key:
            try:
                await self.s.events.finish(msg.platform, msg.dedupe_key, status)
            except Exception:
                log.exception("event.finish_failed platform=%s", msg.platform)

    def _conversation_lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    @contextlib.asynccontextmanager
    async def _typing(self, msg: IncomingMessage) -> AsyncIterator[None]:
        adapter = self._adapters.get(msg.platform)
        if adapter is None or msg.source != "user":
            yield
            return
        target = msg.target()

        async def keep_typing() -> None:
            while True:
                try:
                    await adapter.show_typing(target)
                except Exception as exc:  # cosmetic: never fail a run over it
                    log.debug("typing.failed platform=%s: %s", msg.platform, exc)
                await asyncio.sleep(TYPING_INTERVAL_S)

        task = asyncio.create_task(keep_typing())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _with(first: tuple[Reply, ...], outcome: Outcome) -> Outcome:
    """The outcome with replies already sent before it listed first."""
    if not first:
        return outcome
    return Outcome(outcome.status, (*first, *outcome.replies), outcome.run_id)


def _budget_refusal(detail: str) -> str:
    return (
        "You've used up your token allowance for this month, so I can't answer right now. "
        f"({detail}.) Ask an admin if you need more."
    )
