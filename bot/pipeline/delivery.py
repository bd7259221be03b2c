"""Delivery: a reply is stored in the outbox first, then sent through the
platform's adapter, part by part, each part recorded as it goes; a reply that
cannot be delivered is recorded in `delivery_failures`, never lost silently.
Also the typing indicator shown while a run goes on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from bot.metrics import Metrics
from bot.pipeline.admission import current_slot
from bot.pipeline.intake import Inbox
from bot.pipeline.outbox import Outbox, OutboxProgress, Outgoing
from bot.ports import Adapter, FileFetcher
from bot.store import Store
from bot.store.models import DeliveryFailure
from bot.types import IncomingMessage, Reply

log = logging.getLogger("switchboard.pipeline")

TYPING_INTERVAL_S = 4.0


@dataclass(frozen=True, slots=True)
class Ended:
    """How the delivery of one outbox row ended, still to record."""

    outbox_id: int
    state: str
    parts: tuple[str, ...]
    error: str | None = None


class Delivery:
    def __init__(
        self, store: Store, inbox: Inbox, outbox: Outbox, metrics: Metrics | None = None
    ) -> None:
        self._store = store
        self._metrics = metrics or Metrics()
        self.inbox = inbox
        self.outbox = outbox
        self._adapters: dict[str, Adapter] = {}

    def attach(self, adapter: Adapter) -> None:
        self._adapters[adapter.platform] = adapter

    def adapter(self, platform: str) -> Adapter | None:
        return self._adapters.get(platform)

    @property
    def platforms(self) -> list[str]:
        return list(self._adapters)

    async def fetch_files(self, msg: IncomingMessage) -> IncomingMessage:
        """`msg` with its files downloaded, when its adapter fetches them late."""
        missing = any(a.data is None and a.problem is None for a in msg.attachments)
        adapter = self._adapters.get(msg.platform)
        if missing and isinstance(adapter, FileFetcher):
            return await adapter.fetch_files(msg)
        return msg

    async def conclude(
        self,
        msgs: Sequence[IncomingMessage],
        state: str,
        replies: Sequence[Reply] = (),
        *,
        deliver: bool = True,
        error: str | None = None,
    ) -> list[Outgoing]:
        """Record the final state of `msgs` and store their `replies` (when this
        side delivers them), in one transaction. Returns the replies to send."""
        keys = [m.dedupe_key for m in msgs if m.dedupe_key and m.source == "user"]
        stored = list(replies) if deliver else []
        if not keys and not stored:
            return []
        async with self._store.write() as session:
            if keys:
                await self.inbox.finish(msgs[0].platform, keys, state, error=error, session=session)
            return await self.outbox.add(session, stored)

    async def send_all(self, items: Sequence[Outgoing], ended: list[Ended] | None = None) -> None:
        """Deliver `items`; with `ended`, how each ended is appended there for the
        caller to record in a write of its own (`bot.pipeline.hand_back`) instead of
        one write per reply."""
        for number, item in enumerate(items, 1):
            await self.deliver(item, ended, final=number == len(items))

    async def finish_ended(self, ended: Sequence[Ended]) -> None:
        """Record `ended` when the caller's write failed: one by one, retried."""
        for end in ended:
            await self._finish(end.outbox_id, end.state, list(end.parts), end.error)

    async def send_unstored(self, reply: Reply) -> bool:
        """Send a reply the database could not store (its turn is spooled)."""
        adapter = self._adapters.get(reply.target.platform)
        try:
            if adapter is None:
                raise LookupError(f"no adapter running for platform {reply.target.platform!r}")
            await adapter.send(reply)
        except Exception as exc:
            await self.record_failure(reply, exc)
            return False
        self._metrics.reply_sent(reply.target.platform)
        return True

    async def send(self, reply: Reply) -> bool:
        """Store the reply in the outbox, then deliver it."""
        stored = await self.outbox.store([reply])
        return all([await self.deliver(item) for item in stored])

    async def deliver(
        self, item: Outgoing, ended: list[Ended] | None = None, *, final: bool = True
    ) -> bool:
        """Send one stored reply (after the parts already sent); the row records
        how it ended (now, or by the caller: see `send_all`). A failure is
        recorded, never lost. Each part is recorded as it goes out, except the
        last one when the end is recorded right after it: now (no `ended`), or
        by the caller when this is the `final` reply it sends before recording."""
        reply = item.reply
        progress = OutboxProgress(
            self.outbox,
            item.id,
            list(item.done),
            item.resumed,
            item.created_at,
            record_last=not (ended is None or final),
        )
        adapter = self._adapters.get(reply.target.platform)
        try:
            if adapter is None:
                raise LookupError(f"no adapter running for platform {reply.target.platform!r}")
            await adapter.send(reply, progress)
        except Exception as exc:
            await self.record_failure(reply, exc, run_id=item.run_id)
            error = f"{type(exc).__name__}: {exc}"
            if ended is not None:
                ended.append(Ended(item.id, "failed", tuple(progress.parts), error))
            else:
                await self._finish(item.id, "failed", progress.parts, error)
            return False
        self._metrics.reply_sent(reply.target.platform)
        if ended is not None:
            ended.append(Ended(item.id, "sent", tuple(progress.parts)))
        else:
            await self._finish(item.id, "sent", progress.parts)
        return True

    async def _finish(
        self, outbox_id: int, state: str, parts: list[str], error: str | None = None
    ) -> None:
        """Record how a delivery ended; retried for a while, because a row left
        pending would be sent again once its lease expires."""
        for delay in (0.2, 0.5, 1.0, 2.0, 4.0, 0.0):
            try:
                await self.outbox.finish(outbox_id, state, parts, error)
                return
            except Exception:
                if not delay:
                    log.exception("outbox.not_finished outbox=%s state=%s", outbox_id, state)
                    return
                await asyncio.sleep(delay)

    async def record_failure(
        self, reply: Reply, error: BaseException, *, run_id: str | None = None
    ) -> None:
        """Log and store a reply that could not be delivered (`delivery_failures`).
        The log line carries the run that wrote the reply: the current run's, or
        `run_id` for a reply sent outside it (taken over from a dead sender), so
        an operator can tie the ERROR to the run's recorded outbox failure."""
        target = reply.target
        reason = f"{type(error).__name__}: {error}"
        self._metrics.delivery_failed(target.platform)
        log.error(
            "delivery.failed platform=%s channel=%s thread=%s reason=%s",
            target.platform,
            target.channel_id,
            target.thread_id,
            reason,
            extra={"run_id": run_id} if run_id else None,
        )
        try:
            async with self._store.write() as session:
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

    @contextlib.asynccontextmanager
    async def typing(self, msg: IncomingMessage) -> AsyncIterator[None]:
        adapter = self._adapters.get(msg.platform)
        if adapter is None or msg.source != "user":
            yield
            return
        target = msg.target()
        slot = current_slot.get()

        async def keep_typing() -> None:
            while True:
                # Not while the run waits for its slot back (the service is
                # busy): under sustained overload thousands of runs may wait so,
                # and their indicators would be thousands of platform calls.
                if slot is None or not slot.queued:
                    try:
                        await adapter.show_typing(target)
                    except Exception as exc:  # cosmetic: never fail a run over it
                        log.debug("typing.failed platform=%s: %s", msg.platform, exc)
                await asyncio.sleep(TYPING_INTERVAL_S)

        task = asyncio.create_task(keep_typing())
        try:
            yield
        finally:
            # Not waited for: cancelled, it starts no other request (its next
            # step raises), and waiting for it to end cost every message a
            # turn of the event loop.
            task.cancel()
