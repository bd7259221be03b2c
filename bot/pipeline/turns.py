"""Persisting one run: the user messages it answered, every tool call and
result, the reply, the run record, its trace spans, token logs, the budget
settlement, the final state of its inbox messages and its replies in the
outbox — in one transaction, with SQLAlchemy Core (one INSERT per table,
`bot.store.rows`), not the ORM's unit of work. (On PostgreSQL a live turn's
inbox end, charge and outbox are one statement, its other rows riding on it:
`bot.pipeline.turn_statement`.)

The inbox update is also the fence: it only finishes messages still leased to
this instance, and if another instance has taken one over (this process
stalled past its lease) the whole turn is rolled back and nothing is sent.

Over 500 lines: a turn's rows and the one transaction that writes them are one
concept (the rows, the fence and the settlement must change together); the
write is to move into bot/store as the `save_turn` operation (issue 52 item 1)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import String, Text, bindparam, func, update
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.accounts.budgets import Budgets, Charge
from bot.accounts.identity import UserRecord
from bot.agent.state import RunInput, RunState
from bot.agent.traces import Span
from bot.config import Price
from bot.conversations import ConversationRecord
from bot.errors import BotError
from bot.llm.pricing import estimate_cost
from bot.llm.types import ChatMessage, TextBlock, ToolResultBlock, ToolUseBlock
from bot.pipeline import turn_statement
from bot.pipeline.intake import OPEN_STATES
from bot.pipeline.outbox import Outbox, Outgoing
from bot.store.models import InboxItem, Message, Run, StoredFile, TokenLog
from bot.store.rows import MAX_KEPT_ROWS, NewRow, execute, insert_rows, keepable, multi_row, new_row
from bot.store.traces import span_rows
from bot.types import IncomingMessage, Reply, Role, Usage, utcnow

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
    """completed | silent | failed | cancelled | timeout | refused"""
    reply_text: str | None
    """The sanitized reply as sent (None: nothing to record as the final answer)."""
    error: str | None = None
    replies: Sequence[Reply] = ()
    """What to send (stored in the outbox with the turn)."""
    owed: Sequence[int] | None = None
    """Tokens the run used and did not charge yet (the run's meter); None:
    charge the run's whole usage here (unmetered)."""
    release_holds: bool = False
    """The run held budget (`bot.accounts.holds`): its holds are released here."""
    lease_owner: str | None = None
    """This instance: only messages it still holds are finished."""
    interrupted: bool = False
    """Stopped by shutdown: the messages go back to the inbox, so no message rows
    are written and they are not finished (the run's spans and tokens are)."""

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
    outgoing: list[Outgoing] = field(default_factory=list)
    """The replies stored in the outbox, to send now."""


class LeaseLost(BotError):
    """Another instance took over a message of this run: the turn is not ours."""


INBOX_STATE = {"completed": "answered", "refused": "answered", "loop": "answered"}
"""A run's status as the final state of the messages it answered (a refusal,
or the line that the run stopped going in circles, is their answer)."""


@dataclass(slots=True)
class TurnRows:
    """Everything one turn writes, as rows and statements' inputs: what
    `record_turn` commits, and what the spool keeps when it cannot."""

    run: NewRow
    messages: list[NewRow]
    files: list[NewRow]
    spans: list[NewRow]
    tokens: list[NewRow]
    user_id: int
    role: Role
    platform: str
    inbox_keys: list[str]
    inbox_state: str
    error: str | None
    owed: list[int]
    lease_owner: str | None = None
    release_holds: bool = False


def turn_rows(turn: TurnRecord, prices: Mapping[str, Price]) -> TurnRows:
    state, first = turn.state, turn.first
    conversation_id = turn.conversation.id
    run = new_row(
        Run,
        id=turn.run_id,
        conversation_id=conversation_id,
        user_id=turn.user.id,
        source=first.source,
        status="interrupted" if turn.interrupted else turn.status,
        model=turn.model,
        persona_name=turn.persona_name,
        iterations=state.iterations,
        tokens=state.usage.total,
        audio_seconds=sum(item.audio_seconds for _, item in state.inputs),
        document_chars=sum(item.document_chars for _, item in state.inputs),
        error=turn.error,
        started_at=first.received_at,
        finished_at=utcnow(),
    )
    finish = not turn.interrupted and first.source == "user"
    # Refused before any call: nothing of it joins the conversation.
    unanswered = turn.interrupted or (turn.status == "refused" and not state.calls)
    return TurnRows(
        run=run,
        messages=[] if unanswered else _message_rows(turn),
        files=[]
        if turn.interrupted
        else [f for m in turn.messages for f in _files(m, conversation_id, turn.run_id)],
        spans=span_rows(turn.run_id, state.spans),
        tokens=token_logs(
            state.calls,
            run_id=turn.run_id,
            user_id=turn.user.id,
            conversation_id=conversation_id,
            platform=first.platform,
            purpose="wakeup" if first.source == "scheduler" else "chat",
            prices=prices,
        ),
        user_id=turn.user.id,
        role=turn.user.role,
        platform=first.platform,
        inbox_keys=[m.dedupe_key for m in turn.messages if m.dedupe_key] if finish else [],
        inbox_state=INBOX_STATE.get(turn.status, turn.status),
        error=turn.error,
        owed=list(turn.owed) if turn.owed is not None else [state.usage.total],
        lease_owner=turn.lease_owner,
        release_holds=turn.release_holds,
    )


async def record_turn(
    session: AsyncSession,
    turn: TurnRecord,
    budgets: Budgets,
    prices: Mapping[str, Price],
    outbox: Outbox | None = None,
) -> TurnSaved:
    rows = turn_rows(turn, prices)
    return await write_turn(session, rows, budgets, outbox, turn.replies)


async def write_turn(
    session: AsyncSession,
    rows: TurnRows,
    budgets: Budgets,
    outbox: Outbox | None = None,
    replies: Sequence[Reply] = (),
    *,
    at_once: bool = False,
) -> TurnSaved:
    """Write a turn in the caller's transaction: the one copy of what a turn
    writes. When its messages were already finished by someone else (a
    spooled turn replayed after another instance took them over), only what
    was spent is recorded; when a message of a live turn is no longer leased
    to this instance, `LeaseLost` (the caller's transaction rolls back).

    `at_once` (PostgreSQL): a live turn that `fits` ends its messages, is
    charged and adds its replies in one statement (`bot.pipeline.turn_statement`),
    the rows written before it riding on it; otherwise statement by statement."""
    one = at_once and outbox is not None and fits(rows, replies)
    # Inserts are kept back (wait=False): a failure is raised by the next
    # statement that waits, or by the commit.
    await insert_rows(session, [rows.run], wait=False)
    finished = True if one else await _finish_inbox(session, rows)
    messages = rows.messages if finished else []
    if finished:
        await insert_rows(session, messages, wait=False)
        await insert_rows(session, rows.files, wait=False)
    await insert_rows(session, rows.spans, wait=False)
    await insert_rows(session, rows.tokens, wait=False)
    if rows.release_holds:
        await execute(session, *budgets.release_write(rows.run["id"]), wait=False)
    if one:
        assert outbox is not None
        return TurnSaved(*await _end_at_once(session, rows, budgets, outbox, replies))
    charge = await budgets.charge(session, rows.user_id, rows.role, owed(rows))
    outgoing: list[Outgoing] = []
    if outbox is not None and replies and finished:
        outgoing = await outbox.add(session, replies, run_id=rows.run["id"])
    return TurnSaved(charge, len(messages), outgoing)


def fits(rows: TurnRows, replies: Sequence[Reply]) -> bool:
    """Whether the turn can end in one statement (`write_turn`'s `at_once`): a
    live turn (fenced by its lease) whose rows are all kept back."""
    return (
        rows.lease_owner is not None
        and len(replies) <= MAX_KEPT_ROWS
        and all(keepable(group) for group in (rows.messages, rows.files, rows.spans, rows.tokens))
    )


async def _end_at_once(
    session: AsyncSession,
    rows: TurnRows,
    budgets: Budgets,
    outbox: Outbox,
    replies: Sequence[Reply],
) -> tuple[Charge | None, int, list[Outgoing]]:
    """The inbox's end (the fence), the charge and the outbox rows of a live
    turn (`fits`), as one statement (`turn_statement.statement`): as `TurnSaved`."""
    params: dict[str, Any] = {}
    keys = sorted(set(rows.inbox_keys))
    if keys:
        params |= finish_params(rows, keys)
    tokens = owed(rows)
    charge = budgets.charge_write(rows.user_id, rows.role, tokens)
    if charge is not None:
        params |= charge[1]
    outgoing, created = outbox.rows(replies, run_id=rows.run["id"])
    added = None
    if outgoing:
        added, values = multi_row(outgoing)
        params |= values
    ends = turn_statement.statement(FINISH_INBOX if keys else None, charge and charge[0], added)
    row = (await execute(session, ends, params)).one()
    if keys and int(row.finished) < len(keys):
        raise LeaseLost(f"run {rows.run['id']}: a message of this run was taken over")
    ids = [int(i) for i in row.outbox.split(",")] if row.outbox else []
    if len(ids) != len(outgoing):
        raise RuntimeError(f"outbox: {len(outgoing)} rows written, {len(ids)} ids returned")
    found = None if row.used is None else (row.used, row.overage)
    charged = None if charge is None else Budgets.charged(rows.user_id, tokens, found)
    return (
        charged,
        len(rows.messages),
        [Outgoing(i, reply, created_at=created) for i, reply in zip(ids, replies, strict=True)],
    )


def owed(rows: TurnRows) -> int:
    """What the turn still owes its budget, as one charge. Charging the sum is
    charging each in turn: `used` climbs to the cap either way, and the rest
    is overage."""
    return sum(rows.owed)


async def _finish_inbox(session: AsyncSession, rows: TurnRows) -> bool:
    """Finish the turn's inbox messages; False when none was left to finish."""
    keys = set(rows.inbox_keys)
    if not keys:
        return True
    result = await execute(session, FINISH_INBOX, finish_params(rows, list(keys)))
    done = int(result.rowcount or 0)
    if rows.lease_owner is not None and done < len(keys):
        raise LeaseLost(f"run {rows.run['id']}: a message of this run was taken over")
    return done > 0


def finish_params(rows: TurnRows, keys: list[str]) -> dict[str, Any]:
    """`FINISH_INBOX`'s parameters for the turn's messages `keys`."""
    return {
        "f_platform": rows.platform,
        "f_keys": keys,
        "f_owner": rows.lease_owner,
        "f_state": rows.inbox_state,
        "f_now": utcnow(),
        "f_run": rows.run["id"],
        "f_error": rows.error[:2000] if rows.error else None,
    }


FINISH_INBOX = (
    update(InboxItem)
    .where(
        col(InboxItem.platform) == bindparam("f_platform"),
        col(InboxItem.event_id).in_(bindparam("f_keys", expanding=True)),
        col(InboxItem.state).in_(OPEN_STATES),
        bindparam("f_owner", type_=String).is_(None)
        | (col(InboxItem.lease_owner) == bindparam("f_owner", type_=String)),
    )
    .values(
        state=bindparam("f_state"),
        finished_at=bindparam("f_now"),
        run_id=bindparam("f_run"),
        error=func.coalesce(bindparam("f_error", type_=Text), col(InboxItem.error)),
    )
)
"""The turn's messages finished (only those still leased to this instance when
`f_owner` is given), built once: `bot.pipeline.intake.finish_statement` with
the fence."""


def token_logs(
    spans: Sequence[Span],
    *,
    run_id: str,
    user_id: int,
    conversation_id: int | None,
    platform: str,
    purpose: str,
    prices: Mapping[str, Price],
) -> list[NewRow]:
    """One token log per span that used tokens and was not logged as it was
    settled (`Span.logged`); LLM calls get `purpose`, internal calls
    (compaction, memory flush) their own kind."""
    return [
        token_log(
            span.kind,
            span.name,
            span.usage,
            run_id=run_id,
            user_id=user_id,
            conversation_id=conversation_id,
            platform=platform,
            purpose=purpose,
            prices=prices,
        )
        for span in spans
        if (span.usage.total or not span.is_error) and not span.logged
    ]


def token_log(
    kind: str,
    model: str,
    usage: Usage,
    *,
    run_id: str,
    user_id: int,
    conversation_id: int | None,
    platform: str,
    purpose: str,
    prices: Mapping[str, Price],
) -> NewRow:
    """The token log of one call: written with its turn (`token_logs`), or
    with its settlement (`bot.pipeline.metering.RunMeter.token_log`)."""
    return new_row(
        TokenLog,
        run_id=run_id,
        user_id=user_id,
        conversation_id=conversation_id,
        platform=platform,
        model=model,
        purpose=purpose if kind == "llm" else kind,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost_usd=estimate_cost(model, usage, prices),
    )


def _message_rows(turn: TurnRecord) -> list[NewRow]:
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
    rows: list[NewRow] = []
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
            new_row(
                Message,
                conversation_id=conversation_id,
                run_id=turn.run_id,
                role="assistant",
                text=turn.reply_text,
                silent=turn.status == "silent",
            )
        )
    elif turn.status in ("cancelled", "timeout"):  # so the next run knows
        rows.append(
            new_row(
                Message,
                conversation_id=conversation_id,
                run_id=turn.run_id,
                role="assistant",
                text=STOPPED_NOTE if turn.status == "cancelled" else TIMEOUT_NOTE,
                silent=True,
            )
        )
    return rows


def _input_row(item: RunInput, turn: TurnRecord) -> NewRow:
    msg = item.origin
    assert isinstance(msg, IncomingMessage)
    received: datetime = msg.received_at
    return new_row(
        Message,
        conversation_id=turn.conversation.id,
        run_id=turn.run_id,
        role="user",
        text=item.text,
        user_id=turn.user.id,
        platform_message_id=msg.platform_message_id,
        data=_attachment_meta(msg),
        created_at=received,
    )


def _rows_for(message: ChatMessage, conversation_id: int, run_id: str) -> list[NewRow]:
    rows: list[NewRow] = []
    for block in message.content:
        if isinstance(block, TextBlock) and block.text.strip():
            rows.append(
                new_row(
                    Message,
                    conversation_id=conversation_id,
                    run_id=run_id,
                    role="assistant" if message.role == "assistant" else "user",
                    text=block.text,
                )
            )
        elif isinstance(block, ToolUseBlock):
            rows.append(
                new_row(
                    Message,
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
                new_row(
                    Message,
                    conversation_id=conversation_id,
                    run_id=run_id,
                    role="tool_result",
                    tool_use_id=block.tool_use_id,
                    text=block.content,
                    is_error=block.is_error,
                )
            )
    return rows


def _files(msg: IncomingMessage, conversation_id: int, run_id: str) -> list[NewRow]:
    return [
        new_row(
            StoredFile,
            conversation_id=conversation_id,
            run_id=run_id,
            platform=msg.platform,
            platform_file_id=a.file_id,
            kind=a.kind,
            name=a.name,
            mime_type=a.mime_type,
            size=len(a.data),
            sha256=hashlib.sha256(a.data).hexdigest(),
            data=a.data,
        )
        for a in msg.attachments
        if a.data is not None
    ]


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
