"""A process killed with writes queued on SQLite's driver (`wait=False`): the
transaction they belong to is all there after its commit returned, and none of
it is there when the process died before the commit. The writer is a real
process killed with SIGKILL at the moment it reports."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import func
from sqlmodel import col, select

from bot.store import Store
from bot.store.models import InboxItem
from bot.store.rows import insert_rows
from tests.store.test_direct import items

pytestmark = pytest.mark.slow  # seconds a test (tests/tiers.py)

ROOT = Path(__file__).resolve().parents[2]
WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from bot.store import Store
    from bot.store.rows import execute, insert_rows
    from tests.store.test_direct import CLAIM, items

    async def main(url, commit):
        store = Store(url)
        async with store.write() as session:
            await insert_rows(session, items("q1", "q2"), wait=False)
            await insert_rows(session, items("q3", key="c2"), wait=False)
            # A statement that waits: everything queued before it has run.
            await execute(session, CLAIM, {"t_key": "none", "t_until": None})
            if not commit:
                print("queued", flush=True)
                await asyncio.sleep(60)
        print("committed", flush=True)
        await asyncio.sleep(60)

    asyncio.run(main(sys.argv[1], sys.argv[2] == "commit"))
    """
)


async def killed_after(url: str, stage: str) -> None:
    """Run the writer until it prints `stage`, then SIGKILL it."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WRITER,
        url,
        "commit" if stage == "committed" else "hold",
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert line.decode().strip() == stage
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()
    assert process.returncode == -signal.SIGKILL


async def stored_events(store: Store) -> list[str]:
    async with store.read() as session:
        rows = await session.exec(select(InboxItem.event_id).order_by(col(InboxItem.id)))
        return list(rows.all())


@pytest.mark.parametrize("stage", ["queued", "committed"])
async def test_a_killed_writer_leaves_its_transaction_whole_or_absent(tmp_path: Path, stage: str):
    url = f"sqlite+aiosqlite:///{tmp_path / 'kill.db'}"
    store = Store(url)
    await store.upgrade()
    await killed_after(url, stage)
    expected = ["q1", "q2", "q3"] if stage == "committed" else []
    assert await stored_events(store) == expected
    async with store.write() as session:  # the file takes writes again
        await insert_rows(session, items("after"), wait=False)
    assert await stored_events(store) == [*expected, "after"]
    async with store.read() as session:
        count = (await session.exec(select(func.count()).select_from(InboxItem))).one()
    assert count == len(expected) + 1
    await store.dispose()
