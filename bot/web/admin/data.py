"""The overview's own numbers, read straight from the tables: messages and
tokens per UTC day, and recent delivery failures. (Usage this month, top users
and budgets come from `bot.accounts`, the inbox depth from the service's inbox.)"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import func
from sqlmodel import col, select

from bot.store import Store
from bot.store.columns import utc_day
from bot.store.models import DeliveryFailure, Message, TokenLog
from bot.types import utcnow


@dataclass(frozen=True, slots=True)
class Day:
    day: date
    messages: int
    """Messages people sent (stored user turns)."""
    tokens: int
    """Every token the model read or wrote (input, output, cache)."""


async def daily_activity(store: Store, days: int = 14, now: datetime | None = None) -> list[Day]:
    """The last `days` UTC days, oldest first, today included (zero when quiet)."""
    today = (now or utcnow()).astimezone(UTC).date()
    first = today - timedelta(days=days - 1)
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    message_day = utc_day(col(Message.created_at))
    token_day = utc_day(col(TokenLog.created_at))
    tokens = (
        col(TokenLog.input_tokens)
        + col(TokenLog.output_tokens)
        + col(TokenLog.cache_read_tokens)
        + col(TokenLog.cache_write_tokens)
    )
    async with store.read(heavy=True) as session:
        messages = dict(
            (
                await session.exec(
                    select(message_day, func.count())
                    .where(Message.role == "user", col(Message.created_at) >= start)
                    .group_by(message_day)
                )
            ).all()
        )
        spent = dict(
            (
                await session.exec(
                    select(token_day, func.coalesce(func.sum(tokens), 0))
                    .where(col(TokenLog.created_at) >= start)
                    .group_by(token_day)
                )
            ).all()
        )
    out = []
    for n in range(days):
        day = first + timedelta(days=n)
        key = day.isoformat()
        out.append(Day(day, int(messages.get(key, 0)), int(spent.get(key, 0))))
    return out


@dataclass(frozen=True, slots=True)
class Failures:
    last_7_days: int
    recent: Sequence[DeliveryFailure]


async def delivery_failures(store: Store, limit: int = 5, now: datetime | None = None) -> Failures:
    since = (now or utcnow()) - timedelta(days=7)
    async with store.read() as session:
        count = (
            await session.exec(
                select(func.count())
                .select_from(DeliveryFailure)
                .where(col(DeliveryFailure.created_at) >= since)
            )
        ).one()
        recent = (
            await session.exec(
                select(DeliveryFailure).order_by(col(DeliveryFailure.id).desc()).limit(limit)
            )
        ).all()
    return Failures(int(count), recent)
