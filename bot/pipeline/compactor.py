"""Conversation compaction after a run.

When a conversation has more stored messages than `[agent] compact_messages`
since its last compaction, or its prompt passed `compact_threshold` of the
model's window, everything but the last `keep_last_messages` messages is
summarized (after a memory flush) and the summary stored; later runs start from
it (`Conversations.state`). A per-conversation lock that is never waited on
(in-process) skips a compaction when one is already running, and a run that
read its history before another compaction (or a `/new`) landed asks for none:
the history it judged is gone (in a busy conversation it used to summarize the
two messages since, for two more LLM calls). If the summary fails or times
out, the old messages are dropped anyway (a "truncation", keeping the previous
summary), so a conversation never grows without bound and never wedges.

Both internal turns read the history as someone may see it
(`bot.agent.history.viewed_messages`): the memory flush as the run's user
(another user's private tool results withheld), and a group's summary — read
on everyone's turns — as nobody, so no one's private results end up in it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlmodel.ext.asyncio.session import AsyncSession

from bot.accounts.budgets import Budgets
from bot.accounts.identity import UserRecord
from bot.agent.compaction import CompactionFailed, Summarizer
from bot.agent.flush import MemoryFlush
from bot.agent.history import NOBODY, Viewer, viewed_messages
from bot.agent.traces import Span
from bot.config import Settings
from bot.conversations import ConversationRecord, Conversations
from bot.pipeline.turns import token_logs
from bot.ports import ToolContext
from bot.store import Store
from bot.store.leases import Leases
from bot.store.summaries import NewSummary, save_summary

log = logging.getLogger("switchboard.compaction")


@dataclass(frozen=True, slots=True)
class Compaction:
    kind: str
    """"summary", or "truncation" when the summary could not be written."""
    up_to_message_id: int
    messages: int
    spans: tuple[Span, ...]
    error: str | None = None


class Compactor:
    def __init__(
        self,
        store: Store,
        conversations: Conversations,
        summarizer: Summarizer,
        flush: MemoryFlush | None,
        budgets: Budgets,
        settings: Settings,
        leases: Leases | None = None,
    ) -> None:
        self._store = store
        self._conversations = conversations
        self._summarizer = summarizer
        self._flush = flush
        self._budgets = budgets
        self._settings = settings
        self._running: set[int] = set()
        """Conversations being compacted: a lock that is tested, never waited on."""
        self._leases = leases
        """The same lock across instances: a "compaction:<key>" lease."""

    def needed(self, stored_messages: int, prompt_tokens: int, model: str) -> bool:
        agent = self._settings.agent
        window = agent.limits(model).context_window
        return (
            stored_messages > agent.compact_messages
            or prompt_tokens > agent.compact_threshold * window
        )

    def running(self, conversation_id: int) -> bool:
        return conversation_id in self._running

    async def compact(
        self,
        conversation: ConversationRecord,
        user: UserRecord,
        run_id: str,
        *,
        chat_type: str = "direct",
        boundary: int | None = None,
    ) -> Compaction | None:
        """Compact now; None when there is nothing to compact, one is running,
        or the history's `boundary` (as the run that asked saw it) has moved
        since: a compaction (or `/new`) landed after that run read its history,
        so what made it ask is gone (the next run decides afresh)."""
        if self.running(conversation.id):
            log.info("compaction.skipped conversation=%s (already running)", conversation.key)
            return None
        self._running.add(conversation.id)  # no await since the test: nobody slips in
        held = None
        try:
            if self._leases is not None:
                agent = self._settings.agent
                hold = agent.summary_timeout_seconds + agent.memory_flush_timeout_seconds + 60
                held = await self._leases.acquire(f"compaction:{conversation.key}", seconds=hold)
                if held is None:
                    log.info(
                        "compaction.skipped conversation=%s (on another instance)", conversation.key
                    )
                    return None
            return await self._compact(conversation, user, run_id, chat_type, boundary)
        finally:
            self._running.discard(conversation.id)
            if held is not None and self._leases is not None:
                await self._leases.release(held)

    async def _compact(
        self,
        conversation: ConversationRecord,
        user: UserRecord,
        run_id: str,
        chat_type: str,
        boundary: int | None,
    ) -> Compaction | None:
        agent = self._settings.agent
        async with self._store.read() as session:
            state = await self._conversations.state(session, conversation)
        if boundary is not None and state.boundary != boundary:
            log.info(
                "compaction.skipped conversation=%s (compacted or reset since run %s read it)",
                conversation.key,
                run_id,
            )
            return None
        rows = state.history
        cut = len(rows) - agent.keep_last_messages
        while 0 < cut < len(rows) and rows[cut].role == "tool_result":
            cut += 1  # keep a tool call and its results on the same side
        if cut <= 0 or cut >= len(rows) or rows[cut - 1].id is None:
            return None
        up_to = rows[cut - 1].id
        assert up_to is not None
        spans: list[Span] = []
        if self._flush is not None:
            ctx = ToolContext(
                user.id, user.role, conversation.id, conversation.key, conversation.platform, run_id
            )
            spans += await self._flush.run(
                viewed_messages(rows, Viewer(user.id)),
                ctx,
                model=self._settings.llm.auxiliary,
                fallback=tuple(self._settings.llm.fallback),
                platform=conversation.platform,
                chat_type=chat_type,
                user_name=user.display_name or user.platform_user_id,
            )
        kind, error = "summary", None
        try:
            # A group's summary is read on everyone's turns: nobody's private results.
            reader = Viewer(user.id if chat_type == "direct" else NOBODY)
            summary = await self._summarizer.summarize(
                viewed_messages(rows[:cut], reader), state.summary
            )
            text = summary.text
            spans += summary.spans
        except CompactionFailed as exc:
            kind, error, text = "truncation", str(exc), state.summary or ""
            spans += exc.spans
            log.warning(
                "compaction.failed conversation=%s run=%s: %s (dropping %d old messages instead)",
                conversation.key,
                run_id,
                exc,
                cut,
            )
        result = Compaction(kind, up_to, cut, tuple(spans), error)
        await self._save(result, text, conversation, user, run_id)
        log.info(
            "compaction.done conversation=%s kind=%s messages=%d up_to=%d",
            conversation.key,
            kind,
            cut,
            up_to,
        )
        return result

    async def _save(
        self,
        result: Compaction,
        text: str,
        conversation: ConversationRecord,
        user: UserRecord,
        run_id: str,
    ) -> None:
        tokens = sum(s.usage.total for s in result.spans)
        summary = NewSummary(
            conversation_id=conversation.id,
            up_to_message_id=result.up_to_message_id,
            summary=text,
            kind=result.kind,
            messages=result.messages,
            run_id=run_id,
            model=self._summarizer.model,
            error=result.error,
        )
        logs = token_logs(
            [s for s in result.spans if s.kind != "tool"],
            run_id=run_id,
            user_id=user.id,
            conversation_id=conversation.id,
            platform=conversation.platform,
            purpose="compaction",
            prices=self._settings.llm.prices,
        )

        async def charge(session: AsyncSession) -> object:
            return await self._budgets.charge(session, user.id, user.role, tokens)

        await save_summary(self._store, summary, result.spans, logs, charge if tokens else None)
