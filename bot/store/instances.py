"""The instances registry: every serving process marks itself seen each sweep,
so an operator sees which instances are alive (`switchboard admin instances`)."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import delete, update
from sqlmodel import col, select

from bot.store.db import Store
from bot.store.models import Instance
from bot.types import utcnow


class Instances:
    def __init__(self, store: Store, instance_id: str) -> None:
        self._store = store
        self.id = instance_id

    async def register(self, platforms: Sequence[str]) -> None:
        now = utcnow()
        async with self._store.write() as session:
            row = await session.get(Instance, self.id)
            if row is None:
                row = Instance(id=self.id, host=socket.gethostname()[:200], pid=os.getpid())
            row.platforms, row.seen_at = list(platforms), now
            session.add(row)

    async def seen(self) -> None:
        async with self._store.write() as session:
            await session.exec(
                update(Instance).where(col(Instance.id) == self.id).values(seen_at=utcnow())
            )

    async def remove(self) -> None:
        async with self._store.write() as session:
            await session.exec(delete(Instance).where(col(Instance.id) == self.id))

    async def listing(self, gone_after: timedelta = timedelta(days=1)) -> list[Instance]:
        async with self._store.read() as session:
            rows = await session.exec(
                select(Instance)
                .where(col(Instance.seen_at) >= utcnow() - gone_after)
                .order_by(col(Instance.started_at))
            )
            return list(rows.all())
