"""Long-term memories, per user, with full-text search.

The same code runs on both databases: SQLite searches the FTS5 table
`memories_fts` (kept in step with `memories` by triggers), PostgreSQL a GIN
index on ``to_tsvector('simple', text)``; both are created by migration 0003.
A query is split into words, each matched as a prefix (so "deploy" finds
"deployment"), any word may match, and results are ranked (bm25 / ts_rank).

Most users have no memories, so `search` first asks whether the user has any
and remembers the answer: "some" for good (memories are never deleted), "none"
for `NO_MEMORIES_TTL_S`, the backstop: a memory saved by this process counts
at once, and one saved by another process at its next message too (`forget`
drops "none": on SQLite once the writer sees another process's commit,
`bot.store.outside`; on PostgreSQL when the save's notice arrives, as
`announce_account` tells every instance when the save commits).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, exists, func, text
from sqlmodel import col, select

from bot.store import Store, mechanisms
from bot.store.coordination import announce_account
from bot.store.forgotten import Forgotten
from bot.store.models import Memory
from bot.store.rows import execute

MAX_MEMORY_CHARS = 2000
MAX_QUERY_TERMS = 16
_STOPWORDS = """
a an and are as at be but by can could did do does for from had has have he her his how
i if in into is it its me my no not of on or our she so that the their them then there
these they this to was we were what when where which who why will with would you your
yours please tell know about just like want need get
"""
STOPWORDS = frozenset(re.findall(r"\w+", _STOPWORDS))
NO_MEMORIES_TTL_S = 10.0
_NO_CACHE = mechanisms.off("caches")
"""How long "this user has no memories" is trusted without asking the database."""
CACHE_LIMIT = 10_000


_ANY = select(exists().where(col(Memory.user_id) == bindparam("m_user_id")))
"""Whether a user has memories, built once (a Core statement: the driver path)."""


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    id: int
    text: str
    created_at: datetime

    def line(self) -> str:
        return f"#{self.id} ({self.created_at:%Y-%m-%d}): {self.text}"


def search_terms(query: str) -> list[str]:
    """Distinct lower-case words worth searching for, in order."""
    terms: list[str] = []
    for word in re.findall(r"\w+", query.lower()):
        word = word.strip("_")
        if len(word) >= 2 and word not in STOPWORDS and word not in terms:
            terms.append(word)
    return terms[:MAX_QUERY_TERMS]


def _record(row: Memory) -> MemoryRecord:
    assert row.id is not None
    return MemoryRecord(row.id, row.text, row.created_at)


class MemoryStore:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._some: set[int] = set()
        """Users known to have memories."""
        self._none_since: dict[int, float] = {}
        """Users known to have none, since this `time.monotonic()`."""
        self._forgotten = Forgotten(CACHE_LIMIT)
        """when each user's "none" was dropped: a read begun before is not cached"""

    async def save(
        self,
        user_id: int,
        content: str,
        *,
        conversation_id: int | None = None,
        run_id: str | None = None,
    ) -> tuple[MemoryRecord, bool]:
        """Store a memory; (record, False) when the same text is already stored."""
        content = " ".join(content.split())
        if not content:
            raise ValueError("a memory needs some text")
        if len(content) > MAX_MEMORY_CHARS:
            raise ValueError(f"a memory is at most {MAX_MEMORY_CHARS:,} characters")
        async with self._store.write() as session:
            existing = (
                await session.exec(
                    select(Memory).where(Memory.user_id == user_id, Memory.text == content)
                )
            ).first()
            if existing is not None:
                return _record(existing), False
            row = Memory(
                user_id=user_id, text=content, conversation_id=conversation_id, run_id=run_id
            )
            session.add(row)
            await session.flush()
            # other instances may hold "no memories" for this user
            await announce_account(session, self._store, user_id)
            self._known_some(user_id)
            return _record(row), True

    async def get(self, user_id: int, memory_id: int) -> MemoryRecord | None:
        async with self._store.read() as session:
            row = await session.get(Memory, memory_id)
        return _record(row) if row is not None and row.user_id == user_id else None

    async def search(self, user_id: int, query: str, limit: int = 5) -> list[MemoryRecord]:
        """The user's memories best matching any word of `query`, best first."""
        if limit <= 0 or self._none_lately(user_id):
            return []
        terms = search_terms(query)
        if not terms or not await self._any(user_id):
            return []
        if self._store.is_sqlite:
            statement = text(
                "SELECT memories.id FROM memories_fts JOIN memories "
                "ON memories.id = memories_fts.rowid "
                "WHERE memories_fts MATCH :q AND memories.user_id = :user_id "
                "ORDER BY bm25(memories_fts), memories.id DESC LIMIT :limit"
            )
            q = " OR ".join(f'"{term}"*' for term in terms)
        else:
            statement = text(
                "SELECT id FROM memories WHERE user_id = :user_id "
                "AND to_tsvector('simple', text) @@ to_tsquery('simple', :q) "
                "ORDER BY ts_rank(to_tsvector('simple', text), to_tsquery('simple', :q)) DESC, "
                "id DESC LIMIT :limit"
            )
            q = " | ".join(f"'{term}':*" for term in terms)
        async with self._store.read() as session:
            connection = await session.connection()
            result = await connection.execute(
                statement, {"q": q, "user_id": user_id, "limit": limit}
            )
            ids = [int(row[0]) for row in result]
            if not ids:
                return []
            rows = (await session.exec(select(Memory).where(col(Memory.id).in_(ids)))).all()
        by_id = {row.id: row for row in rows}
        return [_record(by_id[i]) for i in ids if i in by_id]

    async def _any(self, user_id: int) -> bool:
        """Whether the user has memories (cached, see the module doc)."""
        if not _NO_CACHE:
            if user_id in self._some:
                return True
            if self._none_lately(user_id):
                return False
        read_at = time.monotonic()
        async with self._store.read() as session:
            found = bool((await execute(session, _ANY, {"m_user_id": user_id})).scalar())
        self.presence_read(user_id, found, read_at)
        return found

    def _none_lately(self, user_id: int) -> bool:
        """The user had no memories when last looked (within the TTL)."""
        since = self._none_since.get(user_id)
        return since is not None and time.monotonic() - since < NO_MEMORIES_TTL_S

    def presence_read(self, user_id: int, has_any: bool, read_at: float) -> None:
        """Whether the user has memories, as a read begun at `read_at` found
        (`_any`'s, or their account's): cached. "Some" known here stays
        (memories are never deleted; one saved here after that read began
        counts); "none" is not cached when the user's "none" was dropped
        since (a memory saved elsewhere while the read was on its way)."""
        if has_any:
            self._known_some(user_id)
        elif user_id not in self._some and self._forgotten.fresh(user_id, read_at):
            self._known_none(user_id, read_at)

    def forget(self, user_id: int | None = None) -> None:
        """Drop "no memories" known of a user (or of all): their account
        changed elsewhere (a memory saved there, a merge moving memories); a
        read of it on its way meanwhile is not cached."""
        self._forgotten.forget(user_id)
        if user_id is None:
            self._none_since.clear()
        else:
            self._none_since.pop(user_id, None)

    def user_created(self, user_id: int) -> None:
        """A user just created here has no memories (cached like a read of it)."""
        self._known_none(user_id, time.monotonic())

    def _known_none(self, user_id: int, since: float) -> None:
        if len(self._none_since) >= CACHE_LIMIT:
            self._none_since.clear()
        self._none_since[user_id] = since

    def _known_some(self, user_id: int) -> None:
        if len(self._some) >= CACHE_LIMIT:
            self._some.clear()
        self._some.add(user_id)
        self._none_since.pop(user_id, None)

    async def count(self, user_id: int) -> int:
        async with self._store.read() as session:
            return int(
                (
                    await session.exec(
                        select(func.count()).select_from(Memory).where(Memory.user_id == user_id)
                    )
                ).one()
            )
