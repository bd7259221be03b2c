"""A conversation's history rows kept between runs (`bot.history_rows`): every
read gives what a fresh read of the database gives (after new rows, `/new`, a
compaction, a row that commits below the last id kept, past the row cap),
while a kept conversation reads only the rows added since. SQLite and
PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event

from bot import conversations as conversations_module
from bot.conversations import ConversationRecord, Conversations, ConversationState
from bot.history_rows import KeptRows
from bot.store import Store
from bot.store.models import ConversationSummary, Message
from bot.store.rows import insert_rows


async def conversation(conversations: Conversations) -> ConversationRecord:
    return await conversations.resolve_key("test", "c1", None, None)


async def add(store: Store, record: ConversationRecord, *texts: str, ids: Any = None) -> None:
    rows = [
        Message(conversation_id=record.id, role="user" if i % 2 == 0 else "assistant", text=text)
        for i, text in enumerate(texts)
    ]
    for row, row_id in zip(rows, ids or [], strict=False):
        row.id = row_id
    async with store.write() as session:
        await insert_rows(session, rows)


async def state(store: Store, conversations: Conversations, record: ConversationRecord) -> Any:
    async with store.read() as session:
        return await conversations.state(session, record)


async def same_as_fresh(
    store: Store, kept: Conversations, record: ConversationRecord
) -> ConversationState:
    """The kept read, checked against a read by a Conversations that kept nothing."""
    got = await state(store, kept, record)
    fresh = await state(store, Conversations(store), record)
    assert got == fresh
    return got  # type: ignore[no-any-return]


async def test_each_read_matches_a_fresh_one_through_new_rows_a_reset_and_a_compaction(
    store: Store,
):
    conversations = Conversations(store)
    record = await conversation(conversations)
    assert (await same_as_fresh(store, conversations, record)).history == []
    await add(store, record, "one", "two")
    await same_as_fresh(store, conversations, record)
    for turn in range(3):
        await add(store, record, f"q{turn}", f"a{turn}")
        got = await same_as_fresh(store, conversations, record)
    assert [row.text for row in got.history] == ["one", "two", "q0", "a0", "q1", "a1", "q2", "a2"]

    up_to = got.history[3].id
    async with store.write() as session:
        await insert_rows(
            session,
            [ConversationSummary(conversation_id=record.id, up_to_message_id=up_to, summary="s")],
        )
    got = await same_as_fresh(store, conversations, record)
    assert [row.text for row in got.history] == ["q1", "a1", "q2", "a2"] and got.summary == "s"

    await conversations.start_fresh(record.id)  # /new
    assert (await same_as_fresh(store, conversations, record)).history == []
    await add(store, record, "after new")
    got = await same_as_fresh(store, conversations, record)
    assert [row.text for row in got.history] == ["after new"]


async def test_a_row_committed_below_the_last_id_kept_is_not_missed(store: Store):
    """PostgreSQL hands out ids before commits: a row can commit after a read
    with an id below the largest one read. The kept rows no longer count right,
    so the next read is a full one."""
    conversations = Conversations(store)
    record = await conversation(conversations)
    await add(store, record, "ten", "twenty", ids=[10_000, 10_020])
    await same_as_fresh(store, conversations, record)
    await add(store, record, "fifteen", ids=[10_015])
    got = await same_as_fresh(store, conversations, record)
    assert [row.text for row in got.history] == ["ten", "fifteen", "twenty"]


async def test_a_kept_conversation_reads_only_the_rows_added_since(
    store: Store, monkeypatch: pytest.MonkeyPatch
):
    conversations = Conversations(store)
    record = await conversation(conversations)
    await add(store, record, *(f"m{i}" for i in range(40)))
    first = await state(store, conversations, record)
    statements: list[str] = []
    read: list[list[Any]] = []

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    merge = KeptRows.merge

    def merged(self: KeptRows, conversation_id: int, kept: Any, *args: Any) -> Any:
        read.append(list(args[1]))  # the rows the statement returned
        return merge(self, conversation_id, kept, *args)

    monkeypatch.setattr(KeptRows, "merge", merged)
    await add(store, record, "q", "a")
    event.listen(store.engine.sync_engine, "before_cursor_execute", count)
    try:
        second = await state(store, conversations, record)
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", count)
    assert len(statements) == 1  # the head and the rows, one statement
    assert [row.text for row in read[0]] == ["q", "a"]  # only those after the last id kept
    assert second.history[:40] == first.history
    assert [row.text for row in second.history[40:]] == ["q", "a"]
    kept = conversations._rows.get(record.id)
    assert kept is not None and kept.last_id == second.history[-1].id and kept.count == 42


async def test_past_the_row_cap_the_newest_rows_are_read(
    store: Store, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(conversations_module, "MAX_HISTORY_ROWS", 5)
    conversations = Conversations(store)
    record = await conversation(conversations)
    await add(store, record, *(f"m{i}" for i in range(8)))
    got = await same_as_fresh(store, conversations, record)
    assert [row.text for row in got.history] == ["m3", "m4", "m5", "m6", "m7"]
    for turn in range(3):
        await add(store, record, f"q{turn}")
        got = await same_as_fresh(store, conversations, record)
    assert [row.text for row in got.history] == ["m6", "m7", "q0", "q1", "q2"]
    await add(store, record, *(f"n{i}" for i in range(6)))  # more new rows than the cap
    got = await same_as_fresh(store, conversations, record)
    assert [row.text for row in got.history] == ["n1", "n2", "n3", "n4", "n5"]


def test_only_the_most_recently_read_conversations_are_kept():
    kept = KeptRows(size=2)
    for conversation_id in (1, 2, 3):
        kept.merge(conversation_id, None, 0, [], 10)
    assert kept.get(1) is None and kept.get(2) is not None and kept.get(3) is not None
    kept.get(2)  # read: the most recent now
    kept.merge(4, None, 0, [], 10)
    assert kept.get(3) is None and kept.get(2) is not None


class Row:
    def __init__(self, row_id: int, text: str) -> None:
        self.id, self.text = row_id, text


def test_kept_text_stays_under_its_bound():
    kept = KeptRows(size=10, max_chars=100)
    kept.merge(1, None, 0, [Row(1, "x" * 40)], 10)
    kept.merge(2, None, 0, [Row(2, "y" * 40)], 10)
    kept.merge(3, None, 0, [Row(3, "z" * 40)], 10)  # 120 chars: the oldest goes
    assert kept.get(1) is None and kept.get(2) is not None and kept.get(3) is not None
    kept.merge(4, None, 0, [Row(4, "w" * 101)], 10)  # too much on its own: not kept
    assert kept.get(4) is None and kept.get(3) is not None
    kept.merge(5, None, 0, [Row(10, "a" * 10), Row(11, "b" * 10)], 3)
    grown = kept.merge(5, kept.get(5), 0, [Row(12, "c" * 5), Row(13, "d" * 5)], 3)
    assert [row.id for row in grown] == [11, 12, 13]  # the cap: the newest three
    entry = kept.get(5)
    assert entry is not None and (entry.chars, entry.count, entry.last_id) == (20, 4, 13)


async def test_the_state_of_a_conversation_that_is_not_there_is_an_error(store: Store):
    """No head row: an error naming the conversation, not an empty history."""
    missing = ConversationRecord(987_654, "test:gone", "test", "gone", None, None)
    with pytest.raises(LookupError, match="987654"):
        await state(store, Conversations(store), missing)
