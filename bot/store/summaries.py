"""A conversation's compaction, written: its summary row, the spans and token
logs of the call that made it, and its charge, in one write transaction.

The storage operation of `bot.pipeline.compactor`, which decides what to
summarize and gives the outcome as values (`NewSummary`, the spans); the
rows go out held back (`wait=False`: on PostgreSQL riding on the charge's
statement, or sent before the commit), so the write costs one round trip
more than the charge alone, not one per table."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store.db import Store
from bot.store.models import ConversationSummary
from bot.store.rows import NewRow, insert_rows, new_row
from bot.store.traces import SpanFacts, span_rows


@dataclass(frozen=True, slots=True)
class NewSummary:
    """A compaction of a conversation (`ConversationSummary`'s columns)."""

    conversation_id: int
    up_to_message_id: int
    summary: str
    kind: str
    messages: int
    run_id: str
    model: str
    error: str | None


async def save_summary(
    store: Store,
    summary: NewSummary,
    spans: Iterable[SpanFacts],
    token_logs: Sequence[NewRow],
    then: Callable[[AsyncSession], Awaitable[object]] | None = None,
) -> None:
    """Write `summary` with the spans and token logs of its run, then `then`
    (the charge, which waits for its row) in the same transaction."""
    async with store.write() as session:
        row = new_row(
            ConversationSummary,
            conversation_id=summary.conversation_id,
            up_to_message_id=summary.up_to_message_id,
            summary=summary.summary,
            kind=summary.kind,
            messages=summary.messages,
            run_id=summary.run_id,
            model=summary.model,
            error=summary.error,
        )
        await insert_rows(session, [row], wait=False)
        await insert_rows(session, span_rows(summary.run_id, spans), wait=False)
        await insert_rows(session, token_logs, wait=False)
        if then is not None:
            await then(session)
