"""Durable dedupe of platform deliveries: a unique (platform, event_id) row is
claimed before any work, so redeliveries and restarts never answer twice."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from bot.store import Store
from bot.store.models import ProcessedEvent
from bot.types import utcnow

log = logging.getLogger("switchboard.dedupe")


class EventLog:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def claim(self, platform: str, event_id: str) -> bool:
        """True if this delivery is new (and is now recorded), False if seen before."""
        try:
            async with self._store.write() as session:
                session.add(ProcessedEvent(platform=platform, event_id=event_id))
        except IntegrityError:
            log.info("event.duplicate platform=%s event_id=%s", platform, event_id)
            return False
        return True

    async def finish(self, platform: str, event_id: str, status: str) -> None:
        async with self._store.write() as session:
            await session.exec(
                update(ProcessedEvent)
                .where(
                    col(ProcessedEvent.platform) == platform,
                    col(ProcessedEvent.event_id) == event_id,
                )
                .values(status=status, finished_at=utcnow())
            )

    async def unfinished(self, limit: int = 20) -> Sequence[ProcessedEvent]:
        """Deliveries claimed but never finished (the process stopped mid-run)."""
        async with self._store.read() as session:
            return (
                await session.exec(
                    select(ProcessedEvent)
                    .where(ProcessedEvent.status == "received")
                    .order_by(col(ProcessedEvent.id).desc())
                    .limit(limit)
                )
            ).all()
