"""The audit log: who did what, where, and whether it was allowed."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from sqlmodel import col, select

from bot.store import Store
from bot.store.models import AuditEntry

log = logging.getLogger("switchboard.audit")


class Audit:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def record(
        self,
        *,
        actor: str,
        action: str,
        outcome: str = "ok",
        actor_user_id: int | None = None,
        target: str | None = None,
        where: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        async with self._store.write() as session:
            session.add(
                AuditEntry(
                    actor_user_id=actor_user_id,
                    actor=actor,
                    action=action,
                    target=target,
                    outcome=outcome,
                    where=where,
                    details=dict(details) if details else None,
                )
            )
        log.info(
            "audit action=%s outcome=%s actor=%s target=%s where=%s",
            action,
            outcome,
            actor,
            target,
            where,
        )

    async def recent(
        self,
        limit: int = 50,
        *,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
    ) -> Sequence[AuditEntry]:
        """The newest `limit` entries, newest first; `actor`, `action` and
        `target` keep only the entries whose field contains that text."""
        query = select(AuditEntry)
        for column, text in (
            (AuditEntry.actor, actor),
            (AuditEntry.action, action),
            (AuditEntry.target, target),
        ):
            if text:
                query = query.where(col(column).contains(text, autoescape=True))
        async with self._store.read() as session:
            return (
                await session.exec(query.order_by(col(AuditEntry.id).desc()).limit(limit))
            ).all()
