"""The claim of the messages waiting for a conversation (`Inbox.claim_pending`,
after every run and with every lease taken) takes exactly that conversation's
waiting messages, oldest first, and finds them by the index of waiting
messages: a backlog elsewhere, or the conversation's own long past, is not
searched. SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import event

from bot.pipeline.intake import Inbox
from bot.store import Store
from tests.harness import message


async def leave(inbox: Inbox, event_id: str, channel: str, pending: bool) -> None:
    msg = dataclasses.replace(message(event_id, platform_channel_id=channel), event_id=event_id)
    assert await inbox.accept(msg)
    if pending:  # left for the instance running its conversation
        assert await inbox.requeue(msg.platform, [event_id]) == 1
    else:
        await inbox.finish(msg.platform, [event_id], "answered")


async def test_a_claim_takes_its_conversations_waiting_messages_by_their_index(
    store: Store,
) -> None:
    inbox = Inbox(store, "instance-a", 30)
    for i in range(60):
        await leave(inbox, f"other-{i}", f"busy-{i % 6}", pending=True)  # a backlog elsewhere
        await leave(inbox, f"past-{i}", "room", pending=False)  # this conversation's past
    await leave(inbox, "first", "room", pending=True)
    await leave(inbox, "second", "room", pending=True)

    seen: list[tuple[str, Any]] = []

    def record(_c: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))

    event.listen(store.engine.sync_engine, "before_cursor_execute", record)
    try:
        claimed = await inbox.claim_pending(message("x").conversation_key)
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", record)
    assert [t.event_id for t in claimed] == ["first", "second"]
    assert await inbox.claim_pending(message("x").conversation_key) == []  # taken once

    statement, parameters = next((s, p) for s, p in seen if s.lstrip().startswith("UPDATE"))
    async with store.write() as session:
        connection = await session.connection()
        if store.is_sqlite:
            explain = "EXPLAIN QUERY PLAN "
        else:  # with a few hundred rows a scan may be cheaper: ask whether it *can*
            await connection.exec_driver_sql("SET LOCAL enable_seqscan = off")
            explain = "EXPLAIN "
        plan = " ".join(
            str(row) for row in await connection.exec_driver_sql(explain + statement, parameters)
        )
    assert "ix_inbox_pending_conversation_key" in plan, plan
