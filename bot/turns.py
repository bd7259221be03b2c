"""Persisting one run: the user messages it answered, every tool call and
result, the reply, the run record, its trace spans, token logs and the budget
charge — in one transaction."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import update
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.agent.state import RunInput, RunState
from bot.agent.traces import Span, span_rows
from bot.budget import Budgets, Charge
from bot.config import Price
from bot.conversations import ConversationRecord
from bot.identity import UserRecord
from bot.llm.types import ChatMessage, TextBlock, ToolResultBlock, ToolUseBlock
from bot.pricing import estimate_cost
from bot.store.models import Message, ProcessedEvent, Run, StoredFile, TokenLog
from bot.types import IncomingMessage, utcnow

STOPPED_NOTE = "(Stopped before finishing: the run was cancelled.)"
TIMEOUT_NOTE = "(Stopped before finishing: the run took too long.)"


@dataclass(frozen=True, slots=True)
class TurnRecord:
    run_id: str
    user: UserRecord
    conversation: ConversationRecord
    persona_name: str
    model: str
    state: RunState
    status: str
    """completed | silent | failed | cancelled | timeout"""
    reply_text: str | None
    """The sanitized reply as sent (None: nothing to record as the final answer)."""
    error: str | None = None

    @property
    def messages(self) -> list[IncomingMessage]:
        return [i.origin for _, i in self.state.inputs if isinstance(i.origin, IncomingMessage)]

    @property
    def first(self) -> IncomingMessage:
        return self.messages[0]


@dataclass(frozen=True, slots=True)
class TurnSaved:
    charge: Charge | None
    rows: int
    """Conversation messages written."""


async def record_turn(
    session: AsyncSession,
    turn: TurnRecord,
    budgets: Budgets,
    prices: Mapping[str, Price],
) -> TurnSaved:
    state, first = turn.state, turn.first
    conversation_id = turn.conversation.id
    now = utcnow()
    session.add(
        Run(
            id=turn.run_id,
            conversation_id=conversation_id,
            user_id=turn.user.id,
            source=first.source,
            status=turn.status,
            model=turn.model,
            persona_name=turn.persona_name,
            iterations=state.iterations,
            tokens=state.usage.total,
            error=turn.error,
            started_at=first.received_at,
            finished_at=now,
        )
    )
    rows = _message_rows(turn)
    session.add_all(rows)
    for msg in turn.messages:
        _add_files(session, msg, conversation_id, turn.run_id)
    session.add_all(span_rows(turn.run_id, state.spans))
    purpose = "wakeup" if first.source == "scheduler" else "chat"
    session.add_all(
        token_logs(
            state.calls,
            run_id=turn.run_id,
            user_id=turn.user.id,
            conversation_id=conversation_id,
            platform=first.platform,
            purpose=purpose,
            prices=prices,
        )
    )
    keys = [m.dedupe_key for m in turn.messages if m.dedupe_key]
    if keys:
        await session.exec(
            update(ProcessedEvent)
            .where(
                col(ProcessedEvent.platform) == first.platform,
                col(ProcessedEvent.event_id).in_(keys),
            )
            .values(status=turn.status, finished_at=now)
        )
    charge = await budgets.charge(session, turn.user.id, turn.user.role, state.usage.total)
    return TurnSaved(charge, len(rows))


def token_logs(
    spans: Sequence[Span],
    *,
    run_id: str,
    user_id: int,
    conversation_id: int | None,
    platform: str,
    purpose: str,
    prices: Mapping[str, Price],
) -> list[TokenLog]:
    """One token log per span that used tokens; LLM calls get `purpose`, internal
    calls (compaction, memory flush) their own kind."""
    return [
        TokenLog(
            run_id=run_id,
            user_id=user_id,
            conversation_id=conversation_id,
            platform=platform,
            model=span.name,
            purpose=purpose if span.kind == "llm" else span.kind,
            input_tokens=span.usage.input_tokens,
            output_tokens=span.usage.output_tokens,
            cache_read_tokens=span.usage.cache_read_tokens,
            cache_write_tokens=span.usage.cache_write_tokens,
            cost_usd=estimate_cost(span.name, span.usage, prices),
        )
        for span in spans
        if span.usage.total or not span.is_error
    ]


def _message_rows(turn: TurnRecord) -> list[Message]:
    """Rows in the order the model saw them; the final assistant message is
    replaced by the sanitized reply."""
    state, conversation_id = turn.state, turn.conversation.id
    inputs: dict[int, list[RunInput]] = {}
    for at, item in state.inputs:
        inputs.setdefault(at, []).append(item)
    input_blocks = {id(b) for _, i in state.inputs for b in i.blocks}
    steps = list(enumerate(state.messages))
    last = state.messages[-1] if state.messages else None
    if (
        turn.reply_text is not None
        and len(steps) > 1
        and last is not None
        and last.role == "assistant"
        and not any(isinstance(b, ToolUseBlock) for b in last.content)
    ):
        steps = steps[:-1]
    rows: list[Message] = []
    for index, message in steps:
        if message.role == "user":
            kept = tuple(b for b in message.content if id(b) not in input_blocks)
            rows += _rows_for(ChatMessage("user", kept), conversation_id, turn.run_id)
            rows += [_input_row(item, turn) for item in inputs.get(index, ())]
        else:
            rows += _rows_for(message, conversation_id, turn.run_id)
    for at in sorted(set(inputs) - {i for i, _ in steps}):  # inputs never sent (stopped)
        rows += [_input_row(item, turn) for item in inputs[at]]
    if turn.reply_text is not None:
        rows.append(
            Message(
                conversation_id=conversation_id,
                run_id=turn.run_id,
                role="assistant",
                text=turn.reply_text,
                silent=turn.status == "silent",
            )
        )
    elif turn.status in ("cancelled", "timeout"):  # so the next run knows
        rows.append(
            Message(
                conversation_id=conversation_id,
                run_id=turn.run_id,
                role="assistant",
                text=STOPPED_NOTE if turn.status == "cancelled" else TIMEOUT_NOTE,
                silent=True,
            )
        )
    return rows


def _input_row(item: RunInput, turn: TurnRecord) -> Message:
    msg = item.origin
    assert isinstance(msg, IncomingMessage)
    received: datetime = msg.received_at
    return Message(
        conversation_id=turn.conversation.id,
        run_id=turn.run_id,
        role="user",
        text=item.text,
        user_id=turn.user.id,
        platform_message_id=msg.platform_message_id,
        data=_attachment_meta(msg),
        created_at=received,
    )


def _rows_for(message: ChatMessage, conversation_id: int, run_id: str) -> list[Message]:
    rows: list[Message] = []
    for block in message.content:
        if isinstance(block, TextBlock) and block.text.strip():
            rows.append(
                Message(
                    conversation_id=conversation_id,
                    run_id=run_id,
                    role="assistant" if message.role == "assistant" else "user",
                    text=block.text,
                )
            )
        elif isinstance(block, ToolUseBlock):
            rows.append(
                Message(
                    conversation_id=conversation_id,
                    run_id=run_id,
                    role="tool_call",
                    tool_use_id=block.id,
                    tool_name=block.name,
                    data=dict(block.input),
                )
            )
        elif isinstance(block, ToolResultBlock):
            rows.append(
                Message(
                    conversation_id=conversation_id,
                    run_id=run_id,
                    role="tool_result",
                    tool_use_id=block.tool_use_id,
                    text=block.content,
                    is_error=block.is_error,
                )
            )
    return rows


def _add_files(
    session: AsyncSession, msg: IncomingMessage, conversation_id: int, run_id: str
) -> None:
    for attachment in msg.attachments:
        if attachment.data is not None:
            session.add(
                StoredFile(
                    conversation_id=conversation_id,
                    run_id=run_id,
                    platform=msg.platform,
                    platform_file_id=attachment.file_id,
                    kind=attachment.kind,
                    name=attachment.name,
                    mime_type=attachment.mime_type,
                    size=len(attachment.data),
                    sha256=hashlib.sha256(attachment.data).hexdigest(),
                    data=attachment.data,
                )
            )


def _attachment_meta(msg: IncomingMessage) -> dict[str, object] | None:
    if not msg.attachments:
        return None
    return {
        "attachments": [
            {
                "kind": a.kind,
                "file_id": a.file_id,
                "name": a.name,
                "mime_type": a.mime_type,
                "size": a.size,
            }
            for a in msg.attachments
        ]
    }
