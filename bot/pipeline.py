"""One path for every message: gate → dedupe → command → resolve → guard →
run control → agent → deliver.

`Pipeline.handle` is what adapters (and the scheduler) call. It never raises
for a per-message failure: failures are logged, recorded and answered with a
short error notice; the returned `Outcome` says what happened. It returns once
the message has been answered (so a piped terminal chat reads the next line
only after the reply): by a run it drove, or — "merged" — by the run of its
conversation that took it in (see `bot.agent.control`). The run itself is
`bot.runner.Runner`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from bot.agent.compactor import Compactor
from bot.agent.content import user_content
from bot.agent.control import Batch, RunControl, Ticket
from bot.agent.events import EventBus
from bot.agent.guard import BLOCKED_REPLY, Guard
from bot.agent.loop import AgentLoop
from bot.agent.state import RunInput
from bot.budget import Budgets
from bot.commands import Commands
from bot.config import Settings
from bot.conversations import ConversationRecord, Conversations
from bot.dedupe import EventLog
from bot.identity import Identity, UserRecord
from bot.memory import MemoryStore
from bot.personas import PersonaBook
from bot.ports import Adapter, CommandInfo
from bot.runner import INTERNAL_ERROR_REPLY, Runner
from bot.store import Store
from bot.store.models import DeliveryFailure, Message
from bot.tools.registry import ToolRegistry
from bot.types import IncomingMessage, Outcome, Reply, ReplyKind

log = logging.getLogger("switchboard.pipeline")

TYPING_INTERVAL_S = 4.0


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
    control: RunControl
    bus: EventBus
    guard: Guard
    memories: MemoryStore
    compactor: Compactor


class Pipeline:
    def __init__(self, services: Services) -> None:
        self.s = services
        self.events = services.bus
        """Run events for subscribers (`bot.agent.events`)."""
        self._runner = Runner(services)
        self._adapters: dict[str, Adapter] = {}
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
            _, late = await asyncio.wait(pending, timeout=grace)
            for task in late:  # recorded as cancelled while the store is still open
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=grace)
        await self.s.control.drain(grace)

    async def idle(self) -> None:
        """Wait for background work (compaction) to finish."""
        await self.s.control.idle()

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
            prepared = await self._prepare(msg, user, conversation, deliver)
            if isinstance(prepared, Outcome):
                return prepared
            item, notices = prepared
            # Replies of a message answered through the caller's own channel
            # (deliver=False) must come back to it: such a message runs alone.
            group = (user.id, msg.source) if deliver and msg.source == "user" else object()
            outcome = await self.s.control.submit(
                conversation.key,
                f"{msg.platform}:{msg.platform_channel_id}",
                Ticket(item, group),
                lambda batch: self._run(batch, user, conversation, deliver),
            )
            if outcome.status == "failed" and outcome.run_id is None and not outcome.replies:
                await self._finish_event(msg, "failed")  # merged into a run that crashed
            if notices and not deliver:  # not sent: the caller gets them first
                outcome = dataclasses.replace(outcome, replies=(*notices, *outcome.replies))
            return outcome
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

    async def _prepare(
        self,
        msg: IncomingMessage,
        user: UserRecord,
        conversation: ConversationRecord,
        deliver: bool,
    ) -> tuple[RunInput, tuple[Reply, ...]] | Outcome:
        """The message as run input (and notices about unusable attachments),
        after the input guard; or the outcome when it goes no further (blocked,
        or nothing usable in it)."""
        if msg.source == "user":
            checked = self.s.guard.check(msg.text, where=conversation.key, user=user.handle)
            if checked.blocked:
                await self._finish_event(msg, "blocked")
                reply = self._reply(msg, BLOCKED_REPLY, "refusal")
                return await self._deliver(Outcome("refused", (reply,)), deliver)
            if checked.text != msg.text:
                msg = dataclasses.replace(msg, text=checked.text)
        content = user_content(msg)
        notices: tuple[Reply, ...] = ()
        if content.problems:
            text = "I couldn't use " + "; ".join(content.problems) + "."
            notices = (self._reply(msg, text, "notice"),)
            if not content.usable:  # nothing left to answer: no LLM call
                await self._finish_event(msg, "refused")
                return await self._deliver(Outcome("refused", notices), deliver)
            await self._deliver(Outcome("refused", notices), deliver)
        return RunInput(content.blocks, content.text, origin=msg), notices

    async def _run(
        self, batch: Batch, user: UserRecord, conversation: ConversationRecord, deliver: bool
    ) -> Outcome:
        first: IncomingMessage = batch.tickets[0].payload.origin
        batch.owner = user.id
        async with self._typing(first):
            outcome = await self._runner.run(batch, user, conversation)
        return await self._deliver(outcome, deliver)

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
