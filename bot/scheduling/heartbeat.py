"""Persona heartbeats: a persona may wake up periodically in its active
conversations (`heartbeat_minutes` in its file); the default answer is NO_REPLY.

A conversation is active when a person (not a wakeup) wrote there within
`[scheduler] heartbeat_idle_minutes`; idle ones are skipped, so they burn no
tokens. The run is charged to the last person who wrote there, through their
account on that platform. The persona files are the source of truth of
heartbeats; each run is recorded like any other (`runs`, `source="scheduler"`),
and a failed delivery in `delivery_failures`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import datetime, timedelta

from sqlalchemy import func
from sqlmodel import col, or_, select

from bot.accounts.directory import Directory
from bot.conversations import Conversations
from bot.personas import PersonaBook, PersonaRecord
from bot.scheduling.wakeups import WakeupSink
from bot.store import Store
from bot.store.leases import Leases
from bot.store.models import Conversation, Message, Run
from bot.types import IncomingMessage

log = logging.getLogger("switchboard.heartbeat")

DEFAULT_HEARTBEAT_PROMPT = (
    "Heartbeat: look at the recent conversation. If something needs a follow-up from "
    "you now (a promised answer, a reminder, a question left open), write it. "
    "Otherwise answer exactly NO_REPLY."
)


class Heartbeats:
    def __init__(
        self,
        store: Store,
        personas: PersonaBook,
        conversations: Conversations,
        directory: Directory,
        idle: timedelta,
        leases: Leases | None = None,
    ) -> None:
        self._store = store
        self._personas = personas
        self._conversations = conversations
        self._directory = directory
        self._idle = idle
        self._leases = leases
        """With several instances, each beat of a conversation is claimed here, so
        it runs on one instance only."""

    async def _claim(self, persona: PersonaRecord, key: str) -> bool:
        if self._leases is None or not persona.heartbeat_minutes:
            return True
        seconds = persona.heartbeat_minutes * 60 * 0.9  # this beat, not the next one
        name = f"heartbeat:{persona.name}:{key}"
        return await self._leases.acquire(name, seconds=seconds) is not None

    def declared(self) -> list[PersonaRecord]:
        return [
            p
            for name in self._personas.names()
            if (p := self._personas.get(name)) is not None and p.heartbeat_minutes
        ]

    async def run(
        self, sink: WakeupSink, persona_name: str, now: datetime, platforms: Collection[str]
    ) -> dict[str, str]:
        """One heartbeat of a persona: a wakeup in each of its active
        conversations on `platforms`. Returns conversation key → outcome."""
        persona = self._personas.get(persona_name)
        if persona is None or not persona.heartbeat_minutes:
            return {}
        results: dict[str, str] = {}
        for conversation_id, user_id in await self._active(now, platforms):
            record = await self._conversations.by_id(conversation_id)
            if record is None:
                continue
            async with self._store.read() as session:
                row = await session.get(Conversation, conversation_id)
            chosen = row.persona_name if row else None
            if self._personas.resolve(record.platform, record.server_id, chosen) != persona:
                continue
            account = await self._directory.account_on(user_id, record.platform)
            if account is None:
                continue
            if not await self._claim(persona, record.key):
                continue  # another instance beats this conversation this time
            msg = IncomingMessage(
                platform=record.platform,
                platform_user_id=account,
                platform_channel_id=record.channel_id,
                platform_thread_id=record.thread_id,
                platform_server_id=record.server_id,
                text=persona.heartbeat_prompt or DEFAULT_HEARTBEAT_PROMPT,
                chat_type="direct",
                source="scheduler",
                received_at=now,
            )
            outcome = await sink.handle(msg, deliver=False)
            status: str = outcome.status
            if status == "answered":
                sent = [await sink.send(reply) for reply in outcome.replies]
                status = "answered" if all(sent) else "delivery_failed"
            results[record.key] = status
            log.info(
                "heartbeat.run persona=%s conversation=%s status=%s",
                persona_name,
                record.key,
                status,
            )
        return results

    async def _active(self, now: datetime, platforms: Collection[str]) -> list[tuple[int, int]]:
        """(conversation id, last human writer) of conversations where a person
        wrote since `now - idle`, on `platforms`."""
        since = now - self._idle
        latest = (
            select(
                Message.conversation_id.label("conversation_id"),  # type: ignore[attr-defined]
                func.max(Message.id).label("message_id"),
            )
            .join(Run, col(Run.id) == col(Message.run_id), isouter=True)
            .join(Conversation, col(Conversation.id) == col(Message.conversation_id))
            .where(
                Message.role == "user",
                col(Message.user_id).is_not(None),
                col(Message.created_at) >= since,
                or_(col(Run.source).is_(None), Run.source == "user"),
                col(Conversation.platform).in_(list(platforms)),
            )
            .group_by(col(Message.conversation_id))
            .subquery()
        )
        async with self._store.read() as session:
            rows = (
                await session.exec(
                    select(Message.conversation_id, Message.user_id)
                    .join(latest, col(Message.id) == latest.c.message_id)
                    .order_by(col(Message.conversation_id))
                )
            ).all()
        return [(c, u) for c, u in rows if u is not None]
