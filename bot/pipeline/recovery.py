"""Recovery: work a dead process left behind is taken over and finished.

The `Housekeeper` runs in every process that serves platforms, every
`[inbox] sweep_seconds`:
- renews the leases of what this process holds (messages, replies, fires);
- writes the turns waiting in the spool (the database was down);
- takes over messages whose lease expired and runs them again, in order per
  conversation, releasing the budget holds of the runs that died with them in
  the same transaction; a message taken over `max_attempts` times is failed, and its
  sender gets one short apology instead of silence;
- takes over replies whose sender died and sends what is left of them;
- keeps this instance's leases (conversations it runs) alive, stops a run
  that `/stop` asked for on another instance, and marks the instance seen.

With several instances on PostgreSQL, a notification ("a message is waiting
for conversation K", "stop K") wakes it at once; otherwise (and on SQLite) it
finds the work at its next sweep.

It logs one line per recovered message or reply, and at start a summary
("recovered 3 messages, 1 reply").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from bot.accounts.budgets import Budgets
from bot.config import InboxSettings
from bot.pipeline.handle import Pipeline
from bot.pipeline.intake import CONVERSATION_LEASE, Inbox, Taken
from bot.pipeline.live import INTERRUPTED_NOTE, reply_target
from bot.pipeline.outbox import Outbox
from bot.pipeline.persist import Spool
from bot.store import Store
from bot.store.coordination import MISSED, Coordination
from bot.store.instances import Instances
from bot.store.leases import Leases
from bot.store.transient import log_failure
from bot.types import IncomingMessage, Reply

log = logging.getLogger("switchboard.recovery")

GAVE_UP_REPLY = (
    "Sorry, I couldn't answer your message: something kept failing on my side. "
    "The problem has been logged; please send it again."
)

Renewal = Callable[[], Awaitable[int]]


@dataclass
class Swept:
    messages: int = 0
    replies: int = 0
    failed: int = 0
    spooled: int = 0
    fires: int = 0

    def __str__(self) -> str:
        parts = [_count(self.messages, "message"), _count(self.replies, "reply", "replies")]
        if self.failed:
            parts.append(f"{_count(self.failed, 'message')} given up")
        if self.fires:
            parts.append(_count(self.fires, "scheduled fire"))
        if self.spooled:
            parts.append(f"{_count(self.spooled, 'spooled turn')} written")
        return "recovered " + ", ".join(parts)


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


@dataclass
class Housekeeper:
    pipeline: Pipeline
    store: Store
    inbox: Inbox
    outbox: Outbox
    spool: Spool
    budgets: Budgets
    settings: InboxSettings
    leases: Leases | None = None
    coordination: Coordination | None = None
    instances: Instances | None = None
    renewals: Sequence[Renewal] = ()
    """Other leases this process holds (scheduled fires)."""
    takeovers: Sequence[Renewal] = ()
    """Other work to take over from dead processes (scheduled fires)."""
    platforms: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None
    _work: set[asyncio.Task[Any]] = field(default_factory=set)
    _poke: asyncio.Event = field(default_factory=asyncio.Event)

    def start(self, platforms: Iterable[str]) -> None:
        self.platforms = list(platforms)
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="housekeeper")

    def poke(self) -> None:
        """Sweep now (another instance left work for us)."""
        self._poke.set()

    def on_notice(self, kind: str, key: str) -> None:
        """A notification from another instance (PostgreSQL)."""
        if kind == "inbox":
            self.pipeline.left_for_us(key)
            self.poke()
        elif kind == "stop":
            self._stop(key)
        elif kind == MISSED:  # listening again: what was sent meanwhile, the sweep finds
            self.poke()

    def _stop(self, conversation_key: str) -> None:
        if self.pipeline.s.control.stop(conversation_key) is not None:
            log.info("run.stopped_remotely conversation=%s", conversation_key)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def wait_idle(self) -> None:
        """Wait for the recovered work started so far (tests, shutdown)."""
        while pending := {t for t in self._work if not t.done()}:
            await asyncio.wait(pending)

    async def _loop(self) -> None:
        first = True
        if self.instances is not None:
            await self._quietly(self.instances.register(self.platforms))
        if self.coordination is not None:
            await self._quietly(self.coordination.listen(self.on_notice))
        while True:
            try:
                swept = await self.sweep()
                if first or swept.messages or swept.replies or swept.failed or swept.fires:
                    log.info("recovery.%s %s", "started" if first else "sweep", swept)
                first = False
            except Exception as exc:  # the next sweep tries again
                log_failure(log, exc, "recovery.sweep_failed")
            self._poke.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), self.settings.sweep_seconds)

    async def _quietly(self, work: Awaitable[Any]) -> None:
        try:
            await work
        except Exception:
            log.warning("recovery.setup_step_failed", exc_info=True)

    async def sweep(self) -> Swept:
        """One round: renew, replay the spool, take over what expired."""
        swept = Swept()
        await self._renew()
        if self.spool.pending():
            swept.spooled = await self.spool.replay(self.store, self.budgets)
        released: set[int] = set()

        async def release_their_holds(session: AsyncSession, runs: list[tuple[str, str]]) -> None:
            released.update(await self.budgets.release_dead(session, runs))

        # The dead runs' budget holds go in the transaction that takes them over.
        taken = await self.inbox.take_expired(self.platforms, also=release_their_holds)
        if released:
            log.info("budget.holds_released users=%s (their runs taken over)", sorted(released))
            await self.budgets.released(released)
        by_conversation: dict[str, list[tuple[Taken, IncomingMessage]]] = {}
        for item in taken:
            if self.pipeline.working_on(item.platform, item.event_id):
                continue  # ours, still in hand (its lease ran out while it waited)
            msg = self._message(item)
            if msg is None:
                swept.failed += 1
                continue
            if item.attempts > self.settings.max_attempts:
                await self._give_up(item, msg)
                swept.failed += 1
                continue
            log.info(
                "inbox.%s platform=%s event_id=%s conversation=%s attempt=%d",
                "recovered" if item.attempts > 1 else "taken",
                item.platform,
                item.event_id,
                item.conversation_key,
                item.attempts,
            )
            if item.drafts and item.deliver:
                self._spawn(self._close_drafts(item, msg))
            by_conversation.setdefault(item.conversation_key, []).append((item, msg))
            swept.messages += 1
        for messages in by_conversation.values():  # they queue in order, together
            self._spawn(self.pipeline.resume_in_order([msg for _, msg in messages]))
        for take_over in self.takeovers:
            try:
                swept.fires += await take_over()
            except Exception as exc:
                log_failure(log, exc, "recovery.takeover_failed")
        if self.pipeline.s.actions is not None:  # held actions nobody decided in time
            try:
                await self.pipeline.s.actions.expire()
            except Exception as exc:
                log_failure(log, exc, "recovery.expire_actions_failed")
        for outgoing in await self.outbox.take_expired(self.platforms):
            log.info(
                "outbox.recovered id=%s platform=%s parts_sent=%d",
                outgoing.id,
                outgoing.reply.target.platform,
                len(outgoing.done),
            )
            self._spawn(self.pipeline.delivery.deliver(outgoing))
            swept.replies += 1
        return swept

    async def _renew(self) -> None:
        for renew in (self.inbox.renew, self.outbox.renew, *self.renewals):
            try:
                await renew()
            except Exception:
                log.warning("lease.renew_failed", exc_info=True)
        if self.leases is not None:
            try:
                for name in await self.leases.renew():
                    if name.startswith(CONVERSATION_LEASE):
                        self._stop(name.removeprefix(CONVERSATION_LEASE))
            except Exception:
                log.warning("lease.renew_failed", exc_info=True)
        if self.instances is not None:
            await self._quietly(self.instances.seen())

    def _message(self, item: Taken) -> IncomingMessage | None:
        try:
            return item.message()
        except (ValueError, TypeError, KeyError) as exc:
            log.error("inbox.unreadable id=%s event_id=%s: %s", item.id, item.event_id, exc)
            self._spawn(self.inbox.finish(item.platform, [item.event_id], "failed", error=str(exc)))
            return None

    async def _give_up(self, item: Taken, msg: IncomingMessage) -> None:
        log.warning(
            "inbox.gave_up platform=%s event_id=%s conversation=%s attempts=%d",
            item.platform,
            item.event_id,
            item.conversation_key,
            item.attempts - 1,
        )
        apology = Reply(GAVE_UP_REPLY, reply_target(msg), "error", drafts=item.drafts)
        delivery = self.pipeline.delivery
        error = f"gave up after {item.attempts - 1} attempts"
        outgoing = await delivery.conclude([msg], "failed", [apology], error=error)
        self._spawn(delivery.send_all(outgoing))

    async def _close_drafts(self, item: Taken, msg: IncomingMessage) -> None:
        """The run that died had posted part of its answer: end those messages
        with a note (the message is answered again below them)."""
        log.info(
            "stream.interrupted platform=%s event_id=%s drafts=%d",
            item.platform,
            item.event_id,
            len(item.drafts),
        )
        note = Reply(INTERRUPTED_NOTE, reply_target(msg), "notice", drafts=item.drafts)
        try:
            delivery = self.pipeline.delivery
            async with self.store.write() as session:  # closed once, even if we die too
                outgoing = await delivery.outbox.add(session, [note])
                await self.inbox.record_drafts(item.platform, item.event_id, (), session=session)
            await delivery.send_all(outgoing)
        except Exception:
            log.exception("stream.interrupted_not_closed event_id=%s", item.event_id)

    def _spawn(self, work: Awaitable[Any]) -> None:
        async def run() -> None:
            await work

        task = asyncio.create_task(run())
        self._work.add(task)
        task.add_done_callback(self._work.discard)
