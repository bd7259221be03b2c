"""Usage this period (the budget month): tokens, estimated cost and runs, per
user and in total by platform and model, from `token_logs` and `runs`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func
from sqlmodel import col, select

from bot.accounts.identity import current_period
from bot.store import Store
from bot.store.models import Run, TokenLog

_TOKENS = (
    col(TokenLog.input_tokens)
    + col(TokenLog.output_tokens)
    + col(TokenLog.cache_read_tokens)
    + col(TokenLog.cache_write_tokens)
)


def period_start(period: str) -> datetime:
    year, month = (int(part) for part in period.split("-"))
    return datetime(year, month, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class UsageLine:
    key: str
    tokens: int
    cost_usd: float
    runs: int = 0


@dataclass(frozen=True, slots=True)
class UserUsage:
    period: str
    input_tokens: int
    output_tokens: int
    cache_tokens: int
    cost_usd: float
    runs: int
    audio_seconds: float = 0.0
    """Voice messages and audio transcribed for the user's runs."""
    document_chars: int = 0
    """Characters of the documents they sent that were read."""

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_tokens


@dataclass(frozen=True, slots=True)
class UsageReport:
    period: str
    top_users: list[UsageLine]
    """key: the user id as text."""
    by_platform: list[UsageLine]
    by_model: list[UsageLine]

    @property
    def total_tokens(self) -> int:
        return sum(line.tokens for line in self.by_platform)

    @property
    def total_cost(self) -> float:
        return sum(line.cost_usd for line in self.by_platform)


class UsageBook:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def for_user(self, user_id: int, period: str | None = None) -> UserUsage:
        period = period or current_period()
        start = period_start(period)
        async with self._store.read(heavy=True) as session:
            row = (
                await session.exec(
                    select(
                        func.coalesce(func.sum(TokenLog.input_tokens), 0),
                        func.coalesce(func.sum(TokenLog.output_tokens), 0),
                        func.coalesce(
                            func.sum(
                                col(TokenLog.cache_read_tokens) + col(TokenLog.cache_write_tokens)
                            ),
                            0,
                        ),
                        func.coalesce(func.sum(TokenLog.cost_usd), 0.0),
                    ).where(TokenLog.user_id == user_id, col(TokenLog.created_at) >= start)
                )
            ).one()
            runs, seconds, chars = (
                await session.exec(
                    select(
                        func.count(),
                        func.coalesce(func.sum(Run.audio_seconds), 0.0),
                        func.coalesce(func.sum(Run.document_chars), 0),
                    )
                    .select_from(Run)
                    .where(Run.user_id == user_id, col(Run.started_at) >= start)
                )
            ).one()
        return UserUsage(
            period,
            int(row[0]),
            int(row[1]),
            int(row[2]),
            float(row[3]),
            int(runs),
            float(seconds),
            int(chars),
        )

    async def report(self, top: int = 10, period: str | None = None) -> UsageReport:
        period = period or current_period()
        start = period_start(period)
        since = col(TokenLog.created_at) >= start
        tokens = func.coalesce(func.sum(_TOKENS), 0)
        cost = func.coalesce(func.sum(TokenLog.cost_usd), 0.0)
        async with self._store.read(heavy=True) as session:
            users = (
                await session.exec(
                    select(TokenLog.user_id, tokens, cost)
                    .where(since)
                    .group_by(col(TokenLog.user_id))
                    .order_by(tokens.desc(), col(TokenLog.user_id))
                    .limit(top)
                )
            ).all()
            runs = dict(
                (
                    await session.exec(
                        select(Run.user_id, func.count())
                        .where(col(Run.started_at) >= start)
                        .group_by(col(Run.user_id))
                    )
                ).all()
            )
            platforms = (
                await session.exec(
                    select(TokenLog.platform, tokens, cost)
                    .where(since)
                    .group_by(col(TokenLog.platform))
                    .order_by(tokens.desc())
                )
            ).all()
            models = (
                await session.exec(
                    select(TokenLog.model, tokens, cost)
                    .where(since)
                    .group_by(col(TokenLog.model))
                    .order_by(tokens.desc())
                )
            ).all()
        return UsageReport(
            period,
            [UsageLine(str(u), int(t), float(c), int(runs.get(u, 0))) for u, t, c in users],
            [UsageLine(p, int(t), float(c)) for p, t, c in platforms],
            [UsageLine(m, int(t), float(c)) for m, t, c in models],
        )
