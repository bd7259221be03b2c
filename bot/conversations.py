"""Conversations: one per (platform, channel, thread), created on first use,
and the stored history sent back to the LLM.

The identity of a conversation (id, key, platform, channel, thread, server)
never changes, so it is cached in memory (one get-or-create statement when it
is not); what can change (`/new`, `/persona`)
is read fresh with the history, in the same statement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from operator import itemgetter
from typing import Any, NamedTuple

from sqlalchemy import (
    Integer,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal_column,
    null,
    type_coerce,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.history_rows import KeptRows
from bot.store import Store, mechanisms
from bot.store.models import Conversation, ConversationSummary, Message, Run
from bot.store.rows import NewRow, Write, execute, new_row
from bot.types import IncomingMessage, conversation_key

CACHE_LIMIT = 10_000
_NO_CACHE = mechanisms.off("caches")


class HistoryRow(NamedTuple):
    """The fields of a stored message that matter for the LLM (a named tuple:
    a conversation's state makes dozens per message)."""

    role: str
    text: str
    tool_use_id: str | None = None
    tool_name: str | None = None
    data: dict[str, Any] | None = None
    is_error: bool = False
    id: int | None = None
    user_id: int | None = None
    """Whose row it is: the sender of a user message, else the user of the run
    that wrote it (None for rows of no run and no sender)."""


@dataclass(frozen=True, slots=True)
class ConversationRecord:
    id: int
    key: str
    platform: str
    channel_id: str
    thread_id: str | None
    server_id: str | None


_RECORD_COLUMNS = (
    col(Conversation.id),
    col(Conversation.key),
    col(Conversation.platform),
    col(Conversation.channel_id),
    col(Conversation.thread_id),
    col(Conversation.server_id),
)


def _upsert_statement(dialect: Any, keys: tuple[str, ...]) -> Any:
    """The get-or-create statement for the columns `keys`, their values the
    parameters `c_<key>` (named: it may run as a part of a larger statement)."""
    columns = Conversation.__table__.c  # type: ignore[attr-defined]
    base = dialect.insert(Conversation).values(
        {k: bindparam(f"c_{k}", type_=columns[k].type) for k in keys}
    )
    created_at = bindparam("c_created_at", type_=columns["created_at"].type)
    # Created by this statement (not found): the row has the creation time it gave.
    created = (col(Conversation.created_at) == created_at).label("created")
    return base.on_conflict_do_update(
        index_elements=[col(Conversation.key)], set_={"key": base.excluded.key}
    ).returning(*_RECORD_COLUMNS, created)


_UPSERT: dict[tuple[str, tuple[str, ...]], Any] = {}
"""The get-or-create statements, built once per dialect and columns."""

MAX_HISTORY_ROWS = 2000
"""Safety cap on rows loaded for one run; compaction keeps histories far shorter."""


def _state_statement() -> Any:
    """A conversation's state in one query: a head row (`part` 0: the persona
    choice, the history start (`/new`), the latest compaction summary after it,
    whether the conversation has any message, and how many rows lie in
    (`k_from`, `k_to`]: whether the rows kept from its last read are still all
    there) and its history rows (`part` 1), the newest `c_limit` of those
    after `k_to` when the kept rows are still right (the boundary is `k_from`
    and `k_count` rows are in that range), else of all after the boundary.
    Unsorted: ordering the union cost SQLite two temporary B-trees, more than
    the caller's sort of rows that come back in order anyway."""
    start = func.coalesce(col(Conversation.history_start_id), 0)

    def latest(column: Any) -> Any:
        return (
            select(column)
            .where(
                col(ConversationSummary.conversation_id) == col(Conversation.id),
                col(ConversationSummary.up_to_message_id) >= start,
            )
            .order_by(col(ConversationSummary.id).desc())
            .limit(1)
            .scalar_subquery()
        )

    has_rows = exists().where(col(Message.conversation_id) == col(Conversation.id))
    kept = (
        select(func.count())
        .where(
            col(Message.conversation_id) == col(Conversation.id),
            col(Message.id) > bindparam("k_from", type_=Integer),
            col(Message.id) <= bindparam("k_to", type_=Integer),
        )
        .scalar_subquery()
    )
    head = (
        select(  # type: ignore[call-overload]
            col(Conversation.persona_name).label("persona_name"),
            start.label("start_id"),
            latest(col(ConversationSummary.summary)).label("summary"),
            latest(col(ConversationSummary.up_to_message_id)).label("up_to"),
            has_rows.label("any_rows"),
            kept.label("kept_count"),
        )
        .where(col(Conversation.id) == bindparam("c_id"))
        .cte("head")
        .prefix_with("MATERIALIZED")  # read once, though used twice
    )
    up_to = func.coalesce(head.c.up_to, 0)
    boundary = case((up_to > head.c.start_id - 1, up_to), else_=head.c.start_id - 1)
    after = case(
        (
            and_(
                boundary == bindparam("k_from", type_=Integer),
                head.c.kept_count == bindparam("k_count", type_=Integer),
            ),
            bindparam("k_to", type_=Integer),
        ),
        else_=boundary,
    )
    rows = (
        select(  # type: ignore[call-overload]
            col(Message.role),
            col(Message.text),
            col(Message.tool_use_id),
            col(Message.tool_name),
            col(Message.data),
            col(Message.is_error),
            col(Message.id),
            col(Message.user_id),
            col(Run.user_id).label("run_user_id"),
        )
        .outerjoin(Run, col(Run.id) == col(Message.run_id))
        .where(
            col(Message.conversation_id) == bindparam("c_id"),
            col(Message.id) > select(after).select_from(head).scalar_subquery(),
        )
        .order_by(col(Message.id).desc())
        .limit(bindparam("c_limit"))
        .subquery("r")
    )

    def none(like: Any) -> Any:
        return type_coerce(null(), like.type).label(like.name)

    return union_all(
        select(literal_column("0").label("part"), *head.c, *(none(c) for c in rows.c)),
        select(literal_column("1"), *(none(c) for c in head.c), *rows.c),
    )


_STATE = _state_statement()
"""Built once: it runs for every message."""
_HEAD_COLUMNS = slice(1, 7)
_ROW_COLUMNS = slice(7, None)
_ROW_ID = itemgetter(13)
"""Where `_STATE`'s head and history rows have their values (in no set
order: the query does not sort what it returns, the caller does)."""


@dataclass(frozen=True, slots=True)
class ConversationState:
    """The mutable part, read fresh for every run."""

    persona_name: str | None
    history: list[HistoryRow]
    """Rows after the boundary: the last `/new` and the last compaction."""
    summary: str | None = None
    """The compaction summary standing in for the rows before the boundary."""
    boundary: int = 0
    """Rows with a larger id are in `history`."""


RECORD_WIDTH = len(_RECORD_COLUMNS) + 1
"""Columns of a conversation's row as `upserting`'s statement returns it (the
last: whether the statement created it, `created`)."""


def created(row: Sequence[Any]) -> bool:
    """Whether the get-or-create statement whose row this is created the
    conversation (rather than finding it)."""
    return bool(row[RECORD_WIDTH - 1])


def _new_row(
    key: str, platform: str, channel_id: str, thread_id: str | None, server_id: str | None
) -> NewRow:
    return new_row(
        Conversation,
        key=key,
        platform=platform,
        channel_id=channel_id,
        thread_id=thread_id or "",
        server_id=server_id,
    )


def _returned(row: Sequence[Any]) -> ConversationRecord:
    return ConversationRecord(row[0], row[1], row[2], row[3], row[4] or None, row[5])


def _record(row: Conversation) -> ConversationRecord:
    assert row.id is not None
    return ConversationRecord(
        id=row.id,
        key=row.key,
        platform=row.platform,
        channel_id=row.channel_id,
        thread_id=row.thread_id or None,
        server_id=row.server_id,
    )


class Conversations:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._cache: dict[str, ConversationRecord] = {}
        self._rows = KeptRows()

    async def resolve(self, msg: IncomingMessage) -> ConversationRecord:
        return await self.resolve_key(
            msg.platform, msg.platform_channel_id, msg.platform_thread_id, msg.platform_server_id
        )

    async def resolve_key(
        self, platform: str, channel_id: str, thread_id: str | None, server_id: str | None
    ) -> ConversationRecord:
        key = conversation_key(platform, channel_id, thread_id)
        found = None if _NO_CACHE else self._cache.get(key)
        if found is None:  # not seen here yet: created, or the row as stored
            async with self._store.write() as session:
                found = await self._upsert(session, key, platform, channel_id, thread_id, server_id)
        self._remember(found)
        return found

    async def resolve_in(
        self, session: AsyncSession, msg: IncomingMessage
    ) -> tuple[Callable[[], None], bool]:
        """`resolve(msg)`'s write in the caller's transaction (a new user's
        account: one transaction for both). Returns what to call once that
        transaction has committed (`resolve` then needs no database), and
        whether this transaction created the conversation (`created`)."""
        write = self.upserting(msg)
        if write is None:
            return partial(self._remember, self._cache[msg.conversation_key]), False
        row = (await execute(session, *write)).one()
        return self.stored(row), created(row)

    def upserting(self, msg: IncomingMessage) -> Write | None:
        """`resolve_in`'s statement, for a caller that runs it as a part of a
        larger one (its row, `RECORD_WIDTH` columns, goes to `stored`); None
        when the conversation is known here (nothing to write)."""
        if msg.conversation_key in self._cache and not _NO_CACHE:
            return None
        return self._upsert_write(
            _new_row(
                msg.conversation_key,
                msg.platform,
                msg.platform_channel_id,
                msg.platform_thread_id,
                msg.platform_server_id,
            )
        )

    def _upsert_write(self, row: NewRow) -> Write:
        """The get-or-create statement for `row` and its parameters."""
        keys = tuple(row)
        statement = _UPSERT.get((self._store.dialect, keys))
        if statement is None:
            dialect = postgresql if self._store.dialect == "postgresql" else sqlite
            statement = _UPSERT[self._store.dialect, keys] = _upsert_statement(dialect, keys)
        return statement, {f"c_{key}": value for key, value in row.items()}

    def stored(self, row: Sequence[Any]) -> Callable[[], None]:
        """The conversation from `upserting`'s row: what to call once its
        transaction has committed."""
        return partial(self._remember, _returned(row))

    def _remember(self, found: ConversationRecord) -> None:
        if len(self._cache) >= CACHE_LIMIT:
            self._cache.clear()
        self._cache[found.key] = found

    async def _upsert(
        self,
        session: AsyncSession,
        key: str,
        platform: str,
        channel_id: str,
        thread_id: str | None,
        server_id: str | None,
    ) -> ConversationRecord:
        """One statement: INSERT … ON CONFLICT (key) DO UPDATE (a no-op) …
        RETURNING, so a conversation created concurrently is returned as stored
        (no error, no second query)."""
        write = self._upsert_write(_new_row(key, platform, channel_id, thread_id, server_id))
        return _returned((await execute(session, *write)).one())

    async def get(self, key: str) -> ConversationRecord | None:
        async with self._store.read() as session:
            row = (await session.exec(select(Conversation).where(Conversation.key == key))).first()
        return None if row is None else _record(row)

    async def by_id(self, conversation_id: int) -> ConversationRecord | None:
        async with self._store.read() as session:
            row = await session.get(Conversation, conversation_id)
        return None if row is None else _record(row)

    async def state(
        self, session: AsyncSession, conversation: ConversationRecord, max_rows: int = 0
    ) -> ConversationState:
        """The persona choice, the latest compaction summary and the rows after it
        (and after the last `/new`), oldest first; at most `max_rows` (the newest).
        One statement (`_STATE`): the rows read are those added since the last
        read when the rows kept from it are still all there, else all of them."""
        limit = max_rows or MAX_HISTORY_ROWS
        kept = self._rows.get(conversation.id) if limit == MAX_HISTORY_ROWS else None
        params = {
            "c_id": conversation.id,
            "k_from": kept.boundary if kept else 0,
            "k_to": kept.last_id if kept else 0,
            "k_count": kept.count if kept else -1,
            "c_limit": limit,
        }
        found = (await execute(session, _STATE, params)).all()
        heads = [row for row in found if row[0] == 0]
        if not heads:
            raise LookupError(f"no conversation {conversation.id}")
        head = heads[0]
        rows = sorted((row for row in found if row[0] != 0), key=_ROW_ID)  # oldest first
        persona_name, start_id, summary, up_to, any_rows, kept_count = head[_HEAD_COLUMNS]
        boundary = max(up_to if up_to is not None else 0, int(start_id) - 1)
        summary = summary or None
        if not any_rows:
            self._rows.forget(conversation.id)
            return ConversationState(persona_name, [], summary, boundary)
        if kept is not None and (kept.boundary, kept.count) != (boundary, kept_count):
            kept = None  # a /new, a compaction, or rows that appeared below: all were read
        new = [
            HistoryRow(
                role,
                text,
                tool_use_id,
                tool_name,
                data,
                bool(is_error),
                row_id,
                user_id if user_id is not None else run_user,
            )
            for role, text, tool_use_id, tool_name, data, is_error, row_id, user_id, run_user in (
                row[_ROW_COLUMNS] for row in rows
            )
        ]
        if limit != MAX_HISTORY_ROWS:
            return ConversationState(persona_name, new, summary, boundary)
        history = self._rows.merge(conversation.id, kept, boundary, new, limit)
        return ConversationState(persona_name, list(history), summary, boundary)

    def created_state(self, conversation: ConversationRecord) -> ConversationState:
        """The state of a conversation that the transaction which took its
        run's lease created: no persona of its own, no rows, no summary, and no
        run could write to it since. Nothing to read. (Context stored without a
        run meanwhile, group chatter, is read by the next run.)"""
        self._rows.forget(conversation.id)
        return ConversationState(None, [])

    async def add_context(
        self,
        conversation_id: int,
        user_id: int,
        text: str,
        platform_message_id: str | None,
        at: datetime,
    ) -> None:
        """Store a message the bot was not asked about (group chatter), for later
        questions to refer to. No run, no reply."""
        async with self._store.write() as session:
            session.add(
                Message(
                    conversation_id=conversation_id,
                    role="user",
                    text=text,
                    user_id=user_id,
                    platform_message_id=platform_message_id,
                    created_at=at,
                )
            )

    async def start_fresh(self, conversation_id: int) -> None:
        """Forget the history of a conversation for the LLM (`/new`); rows stay."""
        async with self._store.write() as session:
            last = (
                await session.exec(
                    select(func.max(Message.id)).where(Message.conversation_id == conversation_id)
                )
            ).one()
            await session.exec(
                update(Conversation)
                .where(col(Conversation.id) == conversation_id)
                .values(history_start_id=(last or 0) + 1)
            )

    async def set_persona(self, conversation_id: int, persona_name: str | None) -> None:
        async with self._store.write() as session:
            await session.exec(
                update(Conversation)
                .where(col(Conversation.id) == conversation_id)
                .values(persona_name=persona_name)
            )
