"""One path for every message: gate → inbox → command → resolve → guard →
run control → agent → outbox → deliver.

`Pipeline.handle` is what adapters (and the scheduler) call. The message is
stored in the inbox first (`bot.pipeline.intake`); only then is `on_accepted`
called, so an adapter acknowledges the platform only for what is stored. If
the inbox cannot take it, `handle` raises (the platform must deliver it
again); after that it never raises for a per-message failure: failures are
logged, recorded and answered with a short error notice; the returned
`Outcome` says what happened. It returns once the message has been answered
(so a piped terminal chat reads the next line only after the reply): by a run
it drove, or — "merged" — by the run of its conversation that took it in (see
`bot.pipeline.control`). The run itself is `bot.pipeline.runner.Runner`.

`resume` runs a message taken over from the inbox (its first process died)
through the same path. At shutdown `close_intake` refuses new messages, so
what the platform still holds goes to the next process.

Over 500 lines: one message's path from the gate to its answer reads as one
story; the stages that stand alone live beside it (intake, control, runner,
delivery).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta

from bot.accounts.identity import UserRecord
from bot.agent.content import user_content
from bot.agent.guard import BLOCKED_REPLY
from bot.agent.state import RunInput
from bot.conversations import ConversationRecord
from bot.errors import ShuttingDown
from bot.llm.gate import arrived
from bot.logs import current_run_id, run_scope
from bot.media import Media, Sender
from bot.pipeline.admission import Admission, current_slot, waiting
from bot.pipeline.arrivals import Arrivals, Place
from bot.pipeline.control import Batch, Ticket
from bot.pipeline.delivery import Delivery, Ended
from bot.pipeline.early_lease import Early, EarlyLeases
from bot.pipeline.hand_back import hand_back
from bot.pipeline.intake import Taken, with_event_id
from bot.pipeline.runner import INTERNAL_ERROR_REPLY, Runner
from bot.pipeline.services import Services
from bot.pipeline.take_lease import take_conversation
from bot.ports import Adapter, ChannelMark, CommandInfo, Leadership
from bot.store.leases import Held
from bot.store.transient import log_failure
from bot.types import IncomingMessage, Outcome, Reply, ReplyKind

log = logging.getLogger("switchboard.pipeline")

TRANSCRIPTION_FAILED_REPLY = (
    "I couldn't transcribe your voice message: the transcription service is not working "
    "right now. Your message is kept, and an operator can see it."
)


class Pipeline:
    def __init__(self, services: Services) -> None:
        self.s = services
        self.events = services.bus
        """Run events for subscribers (`bot.agent.events`)."""
        self._delivery = Delivery(services.store, services.inbox, services.outbox, services.metrics)
        self._runner = Runner(services, self._adopt_notified, self._delivery.adapter)
        self._active: set[asyncio.Task[object]] = set()
        self._resuming: set[asyncio.Task[None]] = set()
        self._left_for_us: set[str] = set()
        self._held: set[tuple[str, str]] = set()
        """(platform, event id) of the messages this process is handling."""
        inbox = services.settings.inbox
        self._admission = Admission(inbox.max_busy, inbox.max_loop_lag_ms / 1000)
        self._early = EarlyLeases(
            services.leases, services.inbox, services.identity, services.control
        )
        self._media = services.media or Media(services.settings.media, metrics=services.metrics)
        """What a message's files become for the model (`bot.media`)."""
        self._arrivals = Arrivals()
        """Messages of a conversation reach its run control in arrival order."""
        self._closed = False

    # -- adapters -----------------------------------------------------------

    def attach(self, adapter: Adapter) -> None:
        self._delivery.attach(adapter)

    def command_infos(self) -> Sequence[CommandInfo]:
        return self.s.commands.infos()

    @property
    def delivery(self) -> Delivery:
        return self._delivery

    def close_intake(self) -> None:
        """Take no new messages (shutdown): `handle` raises `ShuttingDown`."""
        self._closed = True

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
        if self._closed:
            raise ShuttingDown("shutting down: not taking messages")
        async with self._tracked(msg):
            # The gate is a pure check, so it runs first: ignored group chatter
            # costs no database write.
            if not self._addressed(msg):
                if msg.chat_type == "group" and self.s.settings.keep_group_context(msg.platform):
                    await self._keep_as_context(msg)
                    return Outcome("context")
                return Outcome("ignored")
            msg = with_event_id(msg)
            command = msg.source == "user" and self.s.commands.is_command(msg.text)
            attempt = None if command else self._early.at_intake(msg)
            place: Place | None = None
            try:
                # A wakeup's durable record is its job's claimed fire, not the inbox.
                if msg.source == "user":
                    also = self._early.at_accept(attempt) if attempt else None
                    accepted = False
                    try:
                        accepted = await self.s.inbox.accept(msg, deliver=deliver, also=also)
                    finally:
                        if attempt is not None:
                            self._early.settle(attempt, committed=accepted)
                    if not accepted:
                        return Outcome("duplicate")
                    self.s.metrics.message_received(msg.platform)
                if on_accepted is not None:  # durably ours: the platform may forget it now
                    on_accepted()
                self._hold(msg)
                place = None if command else self._arrive(msg)
                with arrived(msg.received_at.timestamp()):
                    async with self._admission.slot():
                        return await self._process(msg, deliver, place)
            finally:
                if place is not None:
                    self._arrivals.leave(place)
                if attempt is not None and (left := self._early.leftover(attempt)) is not None:
                    await asyncio.shield(self._hand_back(left))

    async def resume(
        self, msg: IncomingMessage, *, deliver: bool = True, place: Place | None = None
    ) -> Outcome:
        """Run a message taken over from the inbox (already claimed); `place`:
        its place in its conversation's line, when taken already."""
        self._hold(msg)
        if place is None:
            place = self._arrive(msg)
        try:
            with arrived(msg.received_at.timestamp()):
                async with self._tracked(), self._admission.slot():
                    return await self._process(msg, deliver, place)
        finally:
            self._arrivals.leave(place)

    async def resume_in_order(self, msgs: Sequence[IncomingMessage]) -> None:
        """Run messages taken over from the inbox, oldest first, as messages in
        hand: each takes its place in its conversation's line now, so they
        queue for their run in this order and the run may take the later ones
        in (not one after another's answer: a message arriving meanwhile would
        join the run going on and be answered before the ones still waiting)."""
        places = [self._arrive(msg) for msg in msgs]
        try:
            results = await asyncio.gather(
                *(self.resume(msg, place=place) for msg, place in zip(msgs, places, strict=True)),
                return_exceptions=True,
            )
        finally:
            for place in places:  # one that never started leaves its place too
                self._arrivals.leave(place)
        for msg, result in zip(msgs, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result
            if isinstance(result, Exception):
                log_failure(log, result, "inbox.resume_failed event_id=%s", msg.dedupe_key)

    def _arrive(self, msg: IncomingMessage) -> Place:
        return self._arrivals.arrive(msg.conversation_key, msg.received_at.timestamp())

    async def _hand_back(self, early: Early) -> None:
        """A lease taken early (at intake, or with a new account) that no run
        took over: free it; what it took from the inbox runs as if taken over."""
        await self._early.release(early)
        if early.waiting:
            log.info("lease.handed_back messages=%d (taken at intake)", len(early.waiting))
        for item in early.waiting:
            self._resume_later(item)

    def working_on(self, platform: str, event_id: str) -> bool:
        """Whether this process is already handling that message (its lease may
        have run out while it waited: the recovery sweep must not run it twice)."""
        return (platform, event_id) in self._held

    def _hold(self, msg: IncomingMessage) -> None:
        if msg.source == "user" and msg.dedupe_key:
            key = (msg.platform, msg.dedupe_key)
            self._held.add(key)
            task = asyncio.current_task()
            if task is not None:
                task.add_done_callback(lambda _: self._held.discard(key))

    @contextlib.asynccontextmanager
    async def _tracked(self, msg: IncomingMessage | None = None) -> AsyncIterator[None]:
        """While a message is handled: its task is in flight (for `drain`) and
        every line logged carries its run id (`bot.logs.run_scope`). A wakeup
        keeps the id its scheduler fire opened; everything else gets a new one."""
        task = asyncio.current_task()
        if task is not None:
            self._active.add(task)
        keep = msg is not None and msg.source == "scheduler" and current_run_id() is not None
        try:
            with contextlib.nullcontext() if keep else run_scope():
                yield
        finally:
            if task is not None:
                self._active.discard(task)

    async def _process(
        self, msg: IncomingMessage, deliver: bool, place: Place | None = None
    ) -> Outcome:
        attempt = None
        try:
            msg = await self._delivery.fetch_files(msg)
            command = msg.source == "user" and self.s.commands.is_command(msg.text)
            # A new user's account, their conversation and its lease: one transaction.
            also, attempt = (
                (None, None) if command else self._early.for_account(msg, self.s.conversations)
            )
            try:
                user = await self.s.identity.resolve(msg, also=also)
            finally:
                if attempt is not None:
                    self._early.settle(attempt, committed=attempt.stored)
            if command:
                return await self._command(msg, user, deliver)
            conversation = await self.s.conversations.resolve(msg)
            prepared = await self._prepare(msg, user, conversation, deliver)
            if isinstance(prepared, Outcome):
                return prepared
            item, notices = prepared
            # Replies of a message answered through the caller's own channel
            # (deliver=False) must come back to it: such a message runs alone.
            group = (user.id, msg.source) if deliver and msg.source == "user" else object()
            async with waiting():  # for our turn: the driver of the run takes a slot
                if place is not None:  # after the messages that arrived before
                    await self._arrivals.turn(place)
                    self._arrivals.leave(place)
                outcome = await self.s.control.submit(
                    conversation.key,
                    f"{msg.platform}:{msg.platform_channel_id}",
                    Ticket(item, group, order=msg.received_at.timestamp()),
                    lambda batch: self._run(batch, user, conversation, deliver),
                )
            if outcome.status == "failed" and outcome.run_id is None and not outcome.replies:
                await self._finish(msg, "failed")  # merged into a run that crashed
            if notices and not deliver:  # not sent: the caller gets them first
                outcome = dataclasses.replace(outcome, replies=(*notices, *outcome.replies))
            return outcome
        except Exception as exc:
            log.exception(
                "pipeline.failed platform=%s conversation=%s", msg.platform, msg.conversation_key
            )
            reply = self._reply(msg, INTERNAL_ERROR_REPLY, "error")
            error = f"{type(exc).__name__}: {exc}"
            return await self._end(msg, Outcome("failed", (reply,)), deliver, error=error)
        finally:
            if attempt is not None and (left := self._early.leftover(attempt)) is not None:
                await asyncio.shield(self._hand_back(left))

    def _addressed(self, msg: IncomingMessage) -> bool:
        return msg.addressed or not self.s.settings.require_mention(msg.platform)

    async def _command(self, msg: IncomingMessage, user: UserRecord, deliver: bool) -> Outcome:
        result = await self.s.commands.dispatch(msg, user)
        reply = self._reply(msg, result.text, "command", private=result.private)
        return await self._end(msg, Outcome("command", (reply,)), deliver)

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
                reply = self._reply(msg, BLOCKED_REPLY, "refusal")
                return await self._end(msg, Outcome("refused", (reply,)), deliver, "blocked")
            if checked.text != msg.text:
                msg = dataclasses.replace(msg, text=checked.text)
        prepared = await self._media.prepare(
            msg, Sender(conversation.id, user.id, current_run_id())
        )
        if prepared.refusal is not None:
            reply = self._reply(msg, prepared.refusal, "refusal")
            return await self._end(msg, Outcome("refused", (reply,)), deliver)
        if prepared.failure is not None:  # kept in the inbox as failed, for an operator
            reply = self._reply(msg, TRANSCRIPTION_FAILED_REPLY, "error")
            error = f"transcription failed: {prepared.failure}"
            return await self._end(msg, Outcome("failed", (reply,)), deliver, error=error)
        heard = prepared.transcripts
        if heard and msg.source == "user":  # spoken words pass the guard as typed ones do
            checks = [
                self.s.guard.check(text, where=conversation.key, user=user.handle) for text in heard
            ]
            if any(check.blocked for check in checks):
                reply = self._reply(msg, BLOCKED_REPLY, "refusal")
                return await self._end(msg, Outcome("refused", (reply,)), deliver, "blocked")
            prepared = prepared.retold([check.text for check in checks])
        content = user_content(msg, prepared)
        notices: tuple[Reply, ...] = ()
        if content.problems:
            text = "I couldn't use " + "; ".join(content.problems) + "."
            notices = (self._reply(msg, text, "notice"),)
            if not content.usable:  # nothing left to answer: no LLM call
                return await self._end(msg, Outcome("refused", notices), deliver)
            if deliver:
                for notice in notices:
                    await self.send(notice)
        echo = heard if self.s.settings.media.transcription.echo else ()  # as heard
        item = RunInput(
            content.blocks,
            content.text,
            origin=msg,
            echo=echo,
            audio_seconds=prepared.audio_seconds,
            document_chars=prepared.document_chars,
        )
        return item, notices

    async def _run(
        self, batch: Batch, user: UserRecord, conversation: ConversationRecord, deliver: bool
    ) -> Outcome:
        first: IncomingMessage = batch.tickets[0].payload.origin
        batch.owner = user.id
        if (slot := current_slot.get()) is not None:
            await slot.take()
        # One run per conversation across instances: the conversation's lease
        # (and, for a message, what others left for it, in the same transaction).
        held, pending, created, unfinished = await take_conversation(
            self.s, self._early, conversation.key, user.id, first.source
        )
        if held is None:
            if first.source == "user":
                return await self._defer(batch, conversation.key)
            log.warning("wakeup.busy conversation=%s (running elsewhere)", conversation.key)
            return Outcome("failed")
        if first.source == "user":
            # an earlier message of it open elsewhere (or a reply unsent), or
            # one taken with the lease that would run after this one
            if unfinished or any(_ahead_and_apart(item, first) for item in pending):
                return await self._defer(batch, conversation.key, held, pending)
            self._left_for_us.discard(conversation.key)
            if await self._adopt_pending(batch, conversation, pending):
                batch.tickets.sort(key=lambda t: t.payload.origin.received_at)
                first = batch.tickets[0].payload.origin
        else:  # a wakeup with the lease a message took: that message runs next
            for item in pending:
                self._resume_later(item)
        ended: list[Ended] = []  # recorded with the lease's release, one transaction
        try:
            async with self._delivery.typing(first):
                result = await self._runner.run(batch, user, conversation, deliver, created)
            if not deliver:
                return result.outcome
            if result.outgoing is None:  # the turn waits in the spool: send what we have
                for reply in result.outcome.replies:
                    await self._delivery.send_unstored(reply)
            else:
                await self._delivery.send_all(result.outgoing, ended)
            return result.outcome
        finally:
            if held is not None:
                await asyncio.shield(self._pass_on(conversation.key, held, ended))

    async def _defer(
        self, batch: Batch, key: str, held: Held | None = None, taken: Sequence[Taken] = ()
    ) -> Outcome:
        """Another instance runs this conversation, or an earlier message of it
        is unfinished: leave the batch's messages (and `taken`, claimed with
        the lease `held`, freed here) in the inbox, in order: the run holding
        the conversation takes them when it ends, the recovery sweep takes
        them with the earlier ones (oldest first) when nobody does; wake it."""
        msgs = [t.payload.origin for t in [*batch.tickets, *batch.take_more()]]
        keys = [m.dedupe_key for m in msgs if m.dedupe_key]
        for key_ in keys:  # no longer in hand: the sweep that takes them runs them
            self._held.discard((msgs[0].platform, key_))
        await self.s.inbox.requeue(msgs[0].platform, [*keys, *(t.event_id for t in taken)])
        if held is not None:
            try:
                await self.s.leases.release(held)
            except Exception:
                log.warning("lease.release_failed conversation=%s (it expires)", key, exc_info=True)
        await self.s.coordination.notify("inbox", key)
        why = "running elsewhere" if held is None else "an earlier message is unfinished"
        log.info("run.deferred conversation=%s messages=%d (%s)", key, len(keys), why)
        return Outcome("queued")

    def left_for_us(self, conversation_key: str) -> None:
        """Another instance left a message for a conversation that may be running
        here (a notification): the run takes it at its next step."""
        self._left_for_us.add(conversation_key)

    async def _adopt_notified(self, batch: Batch) -> list[Ticket]:
        key = batch.lane_key
        if key not in self._left_for_us:
            return []
        self._left_for_us.discard(key)
        conversation = await self.s.conversations.get(key)
        return [] if conversation is None else await self._adopt_pending(batch, conversation)

    async def _adopt_pending(
        self, batch: Batch, conversation: ConversationRecord, taken: list[Taken] | None = None
    ) -> list[Ticket]:
        """Messages other instances left for this conversation (it was running
        here; `taken`: already claimed): the sender's join this run (in the
        order they were received); other people's run after it. Returns the
        tickets added to the batch."""
        if taken is None:
            try:
                taken = await self.s.inbox.claim_pending(conversation.key)
            except Exception as exc:
                log_failure(log, exc, "inbox.pending_not_taken conversation=%s", conversation.key)
                return []
        group = batch.tickets[0].group
        added: list[Ticket] = []
        later = False  # after another's message: in order, after it
        for item in sorted(taken, key=lambda t: t.id):
            msg = item.message()
            if later or not (item.deliver and msg.source == "user"):
                later = True
                self._resume_later(item)
                continue
            sender = await self.s.identity.resolve(msg)
            if (sender.id, msg.source) != group:
                later = True
                self._resume_later(item)
                continue
            prepared = await self._prepare(
                await self._delivery.fetch_files(msg), sender, conversation, True
            )
            if isinstance(prepared, Outcome):
                continue  # refused on its own (blocked, nothing usable): already answered
            ticket = Ticket(prepared[0], group, taken=True)
            batch.tickets.append(ticket)
            added.append(ticket)
        if taken:
            log.info("run.adopted conversation=%s messages=%d", conversation.key, len(taken))
        return added

    async def _pass_on(self, key: str, held: Held, ended: Sequence[Ended] = ()) -> None:
        """After a run: record how its replies' deliveries ended; when nothing
        waits here for the conversation, take the messages other instances left
        for it (they run next, here); then free the lease — in one transaction.
        (When something waits here, its run adopts them first.)"""
        try:
            taken = await hand_back(self.s, key, held, ended)
        except Exception as exc:
            log_failure(log, exc, "inbox.pending_not_taken conversation=%s (the sweep will)", key)
        else:
            if taken:
                log.info("run.passed_on conversation=%s messages=%d", key, len(taken))
            for item in taken:
                self._resume_later(item)
            return
        await self._delivery.finish_ended(ended)
        try:  # at least free the lease
            await self.s.leases.release(held)
        except Exception:
            log.warning("lease.release_failed conversation=%s (it expires)", key, exc_info=True)

    def _resume_later(self, item: Taken) -> None:
        async def resume() -> None:
            try:
                await self.resume(item.message(), deliver=item.deliver)
            except Exception as exc:
                log_failure(log, exc, "inbox.resume_failed event_id=%s", item.event_id)

        task = asyncio.create_task(resume(), name=f"resume:{item.event_id}")
        self._resuming.add(task)
        task.add_done_callback(self._resuming.discard)

    def leadership(self, name: str) -> Leadership:
        return self.s.coordination.leadership(name)

    # -- delivery -----------------------------------------------------------

    def _reply(
        self, msg: IncomingMessage, text: str, kind: ReplyKind, *, private: bool = False
    ) -> Reply:
        return Reply(text, msg.target(as_reply=msg.chat_type == "group"), kind, private)

    async def _end(
        self,
        msg: IncomingMessage,
        outcome: Outcome,
        deliver: bool,
        state: str | None = None,
        *,
        error: str | None = None,
    ) -> Outcome:
        """Finish `msg` with `outcome` (its final state and replies stored in one
        transaction), then send the replies when this side delivers them."""
        outgoing = await self._delivery.conclude(
            [msg], state or outcome.status, outcome.replies, deliver=deliver, error=error
        )
        await self._delivery.send_all(outgoing)
        return outcome

    async def send(self, reply: Reply) -> bool:
        """Send through the platform's adapter; a failure is recorded, never lost."""
        return await self._delivery.send(reply)

    async def recent_channels(
        self, platform: str, within: timedelta, limit: int
    ) -> Sequence[ChannelMark]:
        return await self.s.inbox.recent_channels(platform, within, limit)

    async def record_delivery_failure(self, reply: Reply, error: BaseException) -> None:
        """Log and store a reply that could not be delivered (`delivery_failures`)."""
        await self._delivery.record_failure(reply, error)

    # -- helpers ------------------------------------------------------------

    async def _keep_as_context(self, msg: IncomingMessage) -> None:
        """Store a group message the bot was not asked about, so a later
        question in the same conversation can refer to it. No run, no reply."""
        user = await self.s.identity.resolve(msg)
        conversation = await self.s.conversations.resolve(msg)
        text = user_content(msg).text
        await self.s.conversations.add_context(
            conversation.id, user.id, text, msg.platform_message_id, msg.received_at
        )

    async def _finish(self, msg: IncomingMessage, state: str) -> None:
        try:
            await self._delivery.conclude([msg], state)
        except Exception:
            log.exception("inbox.finish_failed platform=%s", msg.platform)


def _ahead_and_apart(item: Taken, first: IncomingMessage) -> bool:
    """Whether `item`, taken with the conversation's lease, was received
    before `first` and would not join its run (another sender's; not a
    message of a person): `_adopt_pending` would run it after this run."""
    try:
        msg = item.message()
    except (ValueError, TypeError, KeyError):
        return False  # unreadable: recovery records it as failed
    joins = item.deliver and msg.source == "user" and msg.platform_user_id == first.platform_user_id
    return msg.received_at < first.received_at and not joins
