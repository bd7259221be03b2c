"""SQLite: writes that share a transaction (group commit, a savepoint each)
keep SQLite's journals of those savepoints in memory. On SQLite's default
(`temp_store` = file) the savepoints' journal moved to a temporary file once
it passed 64 KiB, a few writes into a group, and every write after it paid
write() calls on that file: about 48 per message in a burst of 1,000."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from bot.store import Store
from bot.store.models import InboxItem
from bot.store.rows import NewRow, insert_rows, new_row


def temporary_files() -> list[str]:
    """The files of SQLite's temporary storage this process holds open
    (named etilqs_*, deleted as soon as opened)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "etilqs_" in target:
            found.append(target)
    return found


def seed(n: int) -> NewRow:
    return new_row(
        InboxItem,
        platform="t",
        event_id=f"{n:04d}-seed",
        conversation_key=f"t:{n:04d}",
        payload={"text": "x" * 400},
    )


async def test_writes_grouped_into_one_transaction_open_no_temporary_file(tmp_path: Path):
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'group.db'}")
    await store.upgrade()
    try:
        # A table with rows and an index or two to change: each write below
        # changes pages that existed before its savepoint.
        for batch in range(4):
            async with store.write() as session:
                await insert_rows(session, [seed(i * 4 + batch) for i in range(500)])
        held: list[list[str]] = []

        async def write(i: int) -> None:
            async with store.write() as session:
                # rows spread over the indexes' pages, as a turn's rows spread
                # over its tables' (past 64 KiB of pages changed)
                await insert_rows(
                    session,
                    [new_row(InboxItem, platform="t", event_id=f"{j:04d}-burst-{i}",
                             conversation_key=f"t:{j:04d}:{i}", payload={"text": "y" * 40})
                     for j in range(0, 2000, 80)],
                )  # fmt: skip
                held.append(temporary_files())

        stats = store.sqlite_writes
        assert stats is not None
        commits = stats.commits
        await asyncio.gather(*(write(i) for i in range(60)))
        grouped = stats.commits - commits
        # they did share transactions (how many share one depends on how busy the
        # machine is: a loaded one finishes some before the next arrives)
        assert len(held) == 60 and grouped < 60
        assert [files for files in held if files] == []
    finally:
        await store.dispose()
