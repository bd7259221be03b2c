"""Rows for the CLI tests that read what the service recorded (users, budgets,
runs, token logs), written straight to a database file as the service would."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from bot.store import Store
from bot.store.models import Budget, Conversation, PlatformLink, Run, TokenLog, User


@dataclass(frozen=True, slots=True)
class Seeded:
    users: dict[str, int]
    conversations: dict[str, int]


@dataclass(frozen=True, slots=True)
class SeedRun:
    id: str
    user: str
    conversation: str
    started_at: datetime
    status: str = "answered"
    tokens: int = 0
    seconds: float | None = None
    """Duration; None: not finished."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


async def seed(
    db: Path,
    users: Sequence[str],
    conversations: Sequence[str] = (),
    runs: Sequence[SeedRun] = (),
    budgets: dict[str, Budget] | None = None,
) -> Seeded:
    """`users` are console accounts ("bob" → console:bob, role guest);
    `conversations` are keys ("slack:C1:-"); a run with input or output tokens
    gets one token log line (model "claude-test") at its start."""
    store = Store(f"sqlite+aiosqlite:///{db}")
    await store.upgrade()
    user_ids: dict[str, int] = {}
    conversation_ids: dict[str, int] = {}
    async with store.write() as session:
        for name in users:
            user = User(display_name=name)
            session.add(user)
            await session.flush()
            assert user.id is not None
            user_ids[name] = user.id
            session.add(PlatformLink(user_id=user.id, platform="console", platform_user_id=name))
        for key in conversations:
            platform, channel, _ = key.split(":")
            conversation = Conversation(key=key, platform=platform, channel_id=channel)
            session.add(conversation)
            await session.flush()
            assert conversation.id is not None
            conversation_ids[key] = conversation.id
        for item in runs:
            finished = (
                None if item.seconds is None else item.started_at + timedelta(seconds=item.seconds)
            )
            session.add(
                Run(
                    id=item.id,
                    conversation_id=conversation_ids[item.conversation],
                    user_id=user_ids[item.user],
                    status=item.status,
                    model="claude-test",
                    tokens=item.tokens,
                    started_at=item.started_at,
                    finished_at=finished,
                )
            )
            if item.input_tokens or item.output_tokens:
                session.add(
                    TokenLog(
                        run_id=item.id,
                        user_id=user_ids[item.user],
                        conversation_id=conversation_ids[item.conversation],
                        platform=item.conversation.split(":")[0],
                        model="claude-test",
                        input_tokens=item.input_tokens,
                        output_tokens=item.output_tokens,
                        cost_usd=item.cost_usd,
                        created_at=item.started_at,
                    )
                )
        for name, budget in (budgets or {}).items():
            budget.user_id = user_ids[name]
            session.add(budget)
    await store.dispose()
    return Seeded(user_ids, conversation_ids)
