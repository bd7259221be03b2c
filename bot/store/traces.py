"""What runs did: a run's spans as the rows its turn (or compaction) writes
(`span_rows`), and reading them back: the recent runs (with their
conversation and the user's first account) and one run's trace (its spans
and estimated cost), shared by `switchboard trace list|show` and the admin
dashboard's runs pages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy import func
from sqlmodel import col, select

from bot.store.db import Store
from bot.store.models import Conversation, PlatformLink, Run, TokenLog, TraceSpan
from bot.store.rows import NewRow, new_row
from bot.types import Usage


class SpanFacts(Protocol):
    """What a span row records of a step of a run (`bot.agent.traces.Span`)."""

    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def started_at(self) -> datetime: ...
    @property
    def duration_ms(self) -> int: ...
    @property
    def usage(self) -> Usage: ...
    @property
    def is_error(self) -> bool: ...
    @property
    def detail(self) -> str | None: ...
    @property
    def call_id(self) -> str | None: ...
    @property
    def under(self) -> str | None: ...


def span_rows(run_id: str, spans: Iterable[SpanFacts]) -> list[NewRow]:
    """The run's spans as the `trace_spans` rows its write inserts."""
    return [
        new_row(
            TraceSpan,
            run_id=run_id,
            kind=s.kind,
            name=s.name[:128],
            started_at=s.started_at,
            duration_ms=s.duration_ms,
            input_tokens=s.usage.input_tokens,
            output_tokens=s.usage.output_tokens,
            cache_read_tokens=s.usage.cache_read_tokens,
            cache_write_tokens=s.usage.cache_write_tokens,
            is_error=s.is_error,
            detail=s.detail,
            call_id=s.call_id,
            parent_call_id=s.under,
        )
        for s in spans
    ]


@dataclass(frozen=True, slots=True)
class Trace:
    run: Run
    conversation_key: str
    spans: list[TraceSpan]
    cost_usd: float


@dataclass(frozen=True, slots=True)
class RunLine:
    run: Run
    conversation_key: str
    user: str


async def recent_runs(
    store: Store, limit: int, user_id: int | None = None, conversation: str | None = None
) -> list[RunLine]:
    """The newest `limit` runs (of one user, in one conversation or under a
    conversation key prefix such as `slack:C1`), newest first."""
    query = select(Run, Conversation.key).join(
        Conversation, col(Conversation.id) == col(Run.conversation_id)
    )
    if user_id is not None:
        query = query.where(Run.user_id == user_id)
    if conversation:
        key = col(Conversation.key)
        query = query.where(
            (key == conversation) | key.startswith(f"{conversation}:", autoescape=True)
        )
    query = query.order_by(col(Run.started_at).desc(), col(Run.id).desc()).limit(limit)
    async with store.read() as session:
        rows = (await session.exec(query)).all()
        ids = {run.user_id for run, _ in rows}
        links = (
            await session.exec(
                select(PlatformLink)
                .where(col(PlatformLink.user_id).in_(ids))
                .order_by(col(PlatformLink.id))
            )
        ).all()
    handles: dict[int, str] = {}
    for link in links:
        handles.setdefault(link.user_id, f"{link.platform}:{link.platform_user_id}")
    return [RunLine(run, key, handles.get(run.user_id, f"#{run.user_id}")) for run, key in rows]


async def load_trace(store: Store, run_id: str) -> Trace | None:
    """One run with its spans in order and its estimated cost; None: no such run."""
    async with store.read() as session:
        run = await session.get(Run, run_id)
        if run is None:
            return None
        key = (
            await session.exec(
                select(Conversation.key).where(Conversation.id == run.conversation_id)
            )
        ).first()
        spans = (
            await session.exec(
                select(TraceSpan)
                .where(TraceSpan.run_id == run_id)
                .order_by(col(TraceSpan.started_at), col(TraceSpan.id))
            )
        ).all()
        cost = (
            await session.exec(
                select(func.coalesce(func.sum(TokenLog.cost_usd), 0.0)).where(
                    TokenLog.run_id == run_id
                )
            )
        ).one()
    return Trace(run, key or "?", list(spans), float(cost))


def nested(spans: Sequence[TraceSpan]) -> list[tuple[TraceSpan, int]]:
    """`spans` in order, each sub-agent's spans right under the
    `delegate_task` call that ran them (depth 1)."""
    calls = {s.call_id for s in spans if s.call_id}
    children: dict[str, list[TraceSpan]] = {}
    for span in spans:
        if span.parent_call_id in calls:
            children.setdefault(span.parent_call_id, []).append(span)
    out: list[tuple[TraceSpan, int]] = []
    for span in spans:
        if span.parent_call_id in calls:
            continue
        out.append((span, 0))
        out += [(child, 1) for child in children.get(span.call_id or "", [])]
    return out
