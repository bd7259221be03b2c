"""Run control: one run at a time per conversation, collected follow-ups,
`/stop`, run timeouts and per-channel concurrency.

Every message for the agent becomes a `Ticket` submitted to its conversation's
lane. The first ticket finding the lane free drives a run (`Batch`); tickets
arriving while it goes on wait, in their messages' order (one taken over from
a dead process goes before a newer one already waiting), and the first of them
drives the next run. The run takes those of the same group (same
user, replies delivered normally) into itself — after a tool step, or instead
of an answer not yet sent (`Batch.take_more`, the loop's inbox) — so three
quick lines get one run and one reply. Tickets it could not take (another
user, a wakeup) drive the next run in arrival order. Every submitter returns
once its message has been answered: the driver with the run's outcome, the
others with a "merged" outcome naming the run.

`stop()` cancels the active run of a conversation (its task: the LLM stream or
the tools stop at once); tickets queued behind it from the same group are
taken into the cancelled run (recorded, not answered). `run_task` gives the
run its overall timeout, which stops while the run waits for the user's other
calls to settle their budget (`Batch.pause`). A semaphore per channel can hold a channel to at most
`max_concurrent` conversations (threads) running at once; 0 (the default)
leaves channels unlimited, so a busy channel runs like as many DMs: what bounds
the runs is the global cap on LLM calls in flight (`bot.llm.gate`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Hashable
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.commands.registry import CommandCall, CommandResult, CommandSpec
from bot.conversations import Conversations
from bot.pipeline.intake import CONVERSATION_LEASE
from bot.store.coordination import Coordination
from bot.store.leases import Leases
from bot.types import Outcome, Role

log = logging.getLogger("switchboard.runs")

StopReason = Literal["stop", "timeout", "shutdown"]


@dataclass(eq=False)
class Ticket:
    """One message waiting for a run of its conversation. `payload` belongs to
    the caller; tickets with the same `group` may share a run."""

    payload: Any
    group: Hashable
    outcome: asyncio.Future[Outcome] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    taken: bool = False
    order: float = 0.0
    """Its message's place in the conversation (when it was received): tickets
    wait in this order, and the first waiting drives the next run."""


@dataclass(eq=False)
class Batch:
    """The tickets one run answers; it grows while the run goes on."""

    lane: Lane
    tickets: list[Ticket]
    task: asyncio.Task[Any] | None = None
    stopped: StopReason | None = None
    owner: Hashable = None
    """Who may /stop it besides admins (the user of the run)."""
    started: bool = False
    """False while waiting for a free slot in its channel."""
    paused_for: float = 0.0
    """Seconds the run stood still waiting for budget (its timeout stops then)."""
    paused_at: float | None = None

    def pause(self) -> None:
        """The run waits for the user's other calls: its timeout stops."""
        if self.paused_at is None:
            self.paused_at = time.monotonic()

    def resume(self) -> None:
        if self.paused_at is not None:
            self.paused_for += time.monotonic() - self.paused_at
            self.paused_at = None

    def paused(self) -> float:
        """Seconds the run has stood still so far (`pause`)."""
        since = 0.0 if self.paused_at is None else time.monotonic() - self.paused_at
        return self.paused_for + since

    def take_more(self) -> list[Ticket]:
        """Tickets of the same group that arrived since the run started, up to
        the first of another group (it is answered before the ones after it)."""
        if self.stopped is not None:
            return []
        group = self.tickets[0].group
        taken = []
        for ticket in self.lane.pending:
            if ticket.taken:
                continue
            if ticket.group != group:
                break
            taken.append(ticket)
        for ticket in taken:
            ticket.taken = True
            self.lane.pending.remove(ticket)
        self.tickets.extend(taken)
        return taken

    @property
    def extra(self) -> list[Ticket]:
        return self.tickets[1:]

    @property
    def lane_key(self) -> str:
        """The conversation's key."""
        return self.lane.key


@dataclass(eq=False)
class Lane:
    key: str = ""
    pending: list[Ticket] = field(default_factory=list)
    """Waiting, in their messages' order (`Ticket.order`)."""
    active: Batch | None = None
    driving: bool = False
    users: int = 0
    changes: asyncio.Event = field(default_factory=asyncio.Event)

    def wait(self, ticket: Ticket) -> None:
        """Queue `ticket` in its message's order (after those of the same order)."""
        index = len(self.pending)
        while index > 0 and self.pending[index - 1].order > ticket.order:
            index -= 1
        self.pending.insert(index, ticket)
        self.changed()

    def turn(self, ticket: Ticket) -> bool:
        """`ticket` was taken into a run, or drives the next one: nothing runs
        and it is the first waiting."""
        return ticket.taken or (not self.driving and self.pending[:1] == [ticket])

    def changed(self) -> None:
        """Wake the tickets waiting for their turn (they look again)."""
        self.changes.set()
        self.changes = asyncio.Event()


RunEnd = Literal["done", "stop", "timeout"]


class RunControl:
    def __init__(self, max_concurrent: int = 0) -> None:
        self.max_concurrent = max_concurrent
        self._lanes: dict[str, Lane] = {}
        self._channels: dict[str, tuple[asyncio.Semaphore, list[int]]] = {}
        self._background: set[asyncio.Task[Any]] = set()

    async def submit(
        self,
        conversation_key: str,
        channel_key: str,
        ticket: Ticket,
        drive: Callable[[Batch], Awaitable[Outcome]],
    ) -> Outcome:
        """Answer `ticket`: drive a run, or wait for the run that took it."""
        lane = self._lanes.get(conversation_key)
        if lane is None:
            lane = self._lanes[conversation_key] = Lane(conversation_key)
        lane.users += 1
        lane.wait(ticket)
        try:
            while not lane.turn(ticket):
                await lane.changes.wait()
            if ticket.taken:
                return await ticket.outcome
            lane.driving = True
            try:
                lane.pending.remove(ticket)
                ticket.taken = True
                batch = Batch(lane, [ticket])
                batch.take_more()
                lane.active = batch
                try:
                    async with self._channel(channel_key):
                        batch.started = True
                        outcome = await drive(batch)
                except BaseException as exc:
                    # The driver's caller reports the failure; the others say
                    # nothing more (one error reply, not one per message).
                    for other in batch.extra:
                        if other.outcome.done():
                            continue
                        if isinstance(exc, asyncio.CancelledError):
                            other.outcome.cancel()
                        else:
                            other.outcome.set_result(Outcome("failed"))
                    raise
                finally:
                    lane.active = None
                merged = Outcome("merged", (), outcome.run_id)
                for other in batch.extra:
                    if not other.outcome.done():
                        other.outcome.set_result(merged)
                return outcome
            finally:
                lane.driving = False
                lane.changed()
        finally:
            if not ticket.taken and ticket in lane.pending:  # cancelled while waiting
                lane.pending.remove(ticket)
                lane.changed()
            lane.users -= 1
            if lane.users == 0 and self._lanes.get(conversation_key) is lane:
                del self._lanes[conversation_key]

    def active(self, conversation_key: str) -> Batch | None:
        lane = self._lanes.get(conversation_key)
        return lane.active if lane else None

    def busy(self, conversation_key: str) -> bool:
        """A message of the conversation is waiting for a run, or one is running."""
        return conversation_key in self._lanes

    def queued(self, conversation_key: str) -> int:
        """Messages waiting for the conversation's next run."""
        lane = self._lanes.get(conversation_key)
        return len(lane.pending) if lane else 0

    def stop(self, conversation_key: str) -> Batch | None:
        """Cancel the conversation's active run; the batch stopped, or None."""
        batch = self.active(conversation_key)
        if batch is None or batch.task is None or batch.task.done() or batch.stopped:
            return None
        batch.take_more()
        batch.stopped = "stop"
        batch.task.cancel()
        log.info("run.stop_requested conversation=%s", conversation_key)
        return batch

    async def run_task(
        self, batch: Batch, work: Coroutine[Any, Any, Any], limit_s: float
    ) -> tuple[RunEnd, BaseException | None]:
        """Run `work` as the batch's task with an overall timeout. Returns how it
        ended and the exception it raised, if any. If the caller is cancelled
        (shutdown), the task is cancelled too and the cancellation goes on."""
        task = asyncio.create_task(work)
        batch.task = task
        deadline = time.monotonic() + limit_s
        try:
            while True:  # the timeout stops while the run waits for budget
                left = deadline + batch.paused() - time.monotonic()
                done, _ = await asyncio.wait({task}, timeout=max(left, 0.0))
                if done or deadline + batch.paused() - time.monotonic() <= 0:
                    break
        except asyncio.CancelledError:
            batch.stopped = "shutdown"
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise
        if not done:
            batch.stopped = "timeout"
            task.cancel()
            await asyncio.wait({task})
        if task.cancelled():
            return ("timeout" if batch.stopped == "timeout" else "stop"), None
        return "done", task.exception()

    @contextlib.asynccontextmanager
    async def _channel(self, channel_key: str) -> AsyncIterator[None]:
        if self.max_concurrent <= 0:
            yield
            return
        entry = self._channels.get(channel_key)
        if entry is None:
            entry = self._channels[channel_key] = (asyncio.Semaphore(self.max_concurrent), [0])
        semaphore, users = entry
        users[0] += 1
        try:
            async with semaphore:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                self._channels.pop(channel_key, None)

    # -- background work (compaction after a run) ----------------------------

    def spawn(self, work: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_log_failure)
        return task

    async def idle(self) -> None:
        """Wait until no background work is left (new work included)."""
        while self._background:
            await asyncio.wait(set(self._background))

    async def drain(self, grace: float) -> None:
        """Give background work `grace` seconds, then cancel what is left."""
        pending = set(self._background)
        if not pending:
            return
        _, late = await asyncio.wait(pending, timeout=grace)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)
            log.warning("background.cancelled tasks=%d at shutdown", len(late))


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("background.failed task=%s: %s", task.get_name(), exc, exc_info=exc)


def stop_command(
    control: RunControl,
    conversations: Conversations,
    leases: Leases | None = None,
    coordination: Coordination | None = None,
) -> CommandSpec:
    """`/stop`: cancel the run going on in this conversation, on this instance
    or on another one (through its lease: a stop request and a notification).
    The user the run answers may stop it, and admins."""

    async def stop(call: CommandCall) -> CommandResult:
        conversation = await conversations.resolve(call.msg)
        batch = control.active(conversation.key)
        if (batch is None or batch.task is None or batch.task.done()) and leases is not None:
            return await stop_elsewhere(call, conversation.key)
        if batch is None or batch.task is None or batch.task.done():
            return CommandResult("Nothing is running here.", private=True)
        if batch.owner != call.user.id and not call.user.role.at_least(Role.ADMIN):
            return CommandResult("Only the person it answers (or an admin) can stop it.", True)
        if control.stop(conversation.key) is None:
            return CommandResult("It is already stopping.", private=True)
        return CommandResult("Stopped.")

    async def stop_elsewhere(call: CommandCall, key: str) -> CommandResult:
        assert leases is not None
        name = CONVERSATION_LEASE + key
        running = await leases.get(name)
        if running is None or running.owner == leases.owner:
            return CommandResult("Nothing is running here.", private=True)
        if running.user_id != call.user.id and not call.user.role.at_least(Role.ADMIN):
            return CommandResult("Only the person it answers (or an admin) can stop it.", True)
        if await leases.request_stop(name, call.user.handle) is None:
            return CommandResult("Nothing is running here.", private=True)
        if coordination is not None:
            await coordination.notify("stop", key)
        log.info("run.stop_requested conversation=%s instance=%s", key, running.owner)
        return CommandResult("Stopped.")

    return CommandSpec("stop", "Stop the answer being worked on here", stop)
