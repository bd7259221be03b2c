"""Persisting one run: the user message, every tool call and result, the reply,
the run record, token logs and the budget charge — in one transaction."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import update
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.agent.loop import RunState
from bot.budget import Budgets, Charge
from bot.config import Price
from bot.conversations import ConversationRecord
from bot.identity import UserRecord
from bot.llm.types import ChatMessage, TextBlock, ToolResultBlock, ToolUseBlock
from bot.pricing import estimate_cost
from bot.store.models import Message, ProcessedEvent, Run, StoredFile, TokenLog
from bot.types import IncomingMessage, utcnow


@dataclass(frozen=True, slots=True)
class TurnRecord:
    run_id: str
    msg: IncomingMessage
    user: UserRecord
    conversation: ConversationRecord
    persona_name: str
    model: str
    state: RunState
    status: str
    """completed | silent | failed | cancelled"""
    reply_text: str | None
    """The sanitized reply as sent (None: nothing to record as the final answer)."""
    user_text: str
    error: str | None = None


async def record_turn(
    session: AsyncSession,
    turn: TurnRecord,
    budgets: Budgets,
    prices: Mapping[str, Price],
) -> Charge | None:
    msg, state = turn.msg, turn.state
    conversation_id = turn.conversation.id
    now = utcnow()
    session.add(
        Run(
            id=turn.run_id,
            conversation_id=conversation_id,
            user_id=turn.user.id,
            source=msg.source,
            status=turn.status,
            model=turn.model,
            persona_name=turn.persona_name,
            iterations=state.iterations,
            tokens=state.usage.total,
            error=turn.error,
            started_at=msg.received_at,
            finished_at=now,
        )
    )
    rows = [
        Message(
            conversation_id=conversation_id,
            run_id=turn.run_id,
            role="user",
            text=turn.user_text,
            user_id=turn.user.id,
            platform_message_id=msg.platform_message_id,
            data=_attachment_meta(msg),
            created_at=msg.received_at,
        )
    ]
    # state.messages[0] is the user message; the final assistant message is
    # replaced by the sanitized reply.
    steps = state.messages[1:]
    if (
        turn.reply_text is not None
        and steps
        and steps[-1].role == "assistant"
        and not any(isinstance(b, ToolUseBlock) for b in steps[-1].content)
    ):
        steps = steps[:-1]
    for message in steps:
        rows.extend(_rows_for(message, conversation_id, turn.run_id))
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
    session.add_all(rows)
    for attachment in msg.attachments:
        if attachment.data is not None:
            session.add(
                StoredFile(
                    conversation_id=conversation_id,
                    run_id=turn.run_id,
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
    for call in state.calls:
        session.add(
            TokenLog(
                run_id=turn.run_id,
                user_id=turn.user.id,
                conversation_id=conversation_id,
                platform=msg.platform,
                model=call.model,
                purpose="wakeup" if msg.source == "scheduler" else "chat",
                input_tokens=call.usage.input_tokens,
                output_tokens=call.usage.output_tokens,
                cache_read_tokens=call.usage.cache_read_tokens,
                cache_write_tokens=call.usage.cache_write_tokens,
                cost_usd=estimate_cost(call.model, call.usage, prices),
            )
        )
    if msg.dedupe_key:
        await session.exec(
            update(ProcessedEvent)
            .where(
                col(ProcessedEvent.platform) == msg.platform,
                col(ProcessedEvent.event_id) == msg.dedupe_key,
            )
            .values(status=turn.status, finished_at=now)
        )
    return await budgets.charge(session, turn.user.id, turn.user.role, state.usage.total)


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
