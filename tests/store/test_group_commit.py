"""SQLite's group commit (`bot.store.group`): writes queued behind one another
share one transaction and one commit, each returns only once it is durable,
and a failure stays the failing write's own unless the transaction is lost,
when every write of the group raises and none is stored."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError

from bot.store import Store, db, sqlite_driver
from bot.store.rows import insert_rows
from tests.conftest import Database
from tests.paths import REPO_ROOT
from tests.store.test_direct import items

pytestmark = pytest.mark.fast_path  # its mechanism (bot/store/compat.py)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = Database("sqlite", tmp_path).store()  # on by default
    await store.upgrade()
    try:
        yield store
    finally:
        await store.dispose()


def stored(store: Store) -> set[str]:
    """The inbox's event ids as another connection sees them (committed)."""
    assert store.url.database
    with sqlite3.connect(store.url.database) as other:
        return {row[0] for row in other.execute("SELECT event_id FROM inbox")}


def commits(store: Store) -> list[int]:
    counted: list[int] = []
    event.listen(store.engine.sync_engine, "commit", lambda _c: counted.append(1))
    return counted


def fail_the_next_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's next COMMIT fails, as on a disk that cannot take it."""
    real = sqlite_driver.Connection._commit
    failures = [sqlite3.OperationalError("disk I/O error")]

    def commit(self: sqlite_driver.Connection) -> None:
        if failures:
            raise failures.pop()
        real(self)

    monkeypatch.setattr(sqlite_driver.Connection, "_commit", commit)


async def write(store: Store, *events: str, seen: list[str] | None = None) -> None:
    """Insert `events` in one write whose block gives the loop a turn (as a
    real one may), so the writes started with it queue on the lock; `seen`:
    what another connection saw of them once the write returned."""
    async with store.write() as session:
        await insert_rows(session, items(*events, key=events[0]))
        await asyncio.sleep(0)
    if seen is not None:
        seen += [e for e in events if e in stored(store)]


async def test_writes_queued_together_share_one_commit_and_each_is_durable_when_it_returns(
    store: Store,
):
    counted = commits(store)
    seen: list[str] = []
    await asyncio.gather(*(write(store, f"e{i}", seen=seen) for i in range(30)))
    assert sorted(seen) == sorted(f"e{i}" for i in range(30))  # committed when it returned
    assert stored(store) == {f"e{i}" for i in range(30)}
    assert len(counted) in (1, 2, 3)  # one group (a flusher may commit a last few)
    assert not store._group.open


async def test_with_group_commit_off_every_write_of_a_burst_commits_alone(tmp_path: Path):
    """`[database] group_commit = false`: the same burst, one commit per write."""
    store = Database("sqlite", tmp_path).store(group_commit=False)
    await store.upgrade()
    try:
        counted = commits(store)
        await asyncio.gather(*(write(store, f"e{i}") for i in range(30)))
        assert stored(store) == {f"e{i}" for i in range(30)}
        assert len(counted) == 30
    finally:
        await store.dispose()


async def test_writes_of_a_group_go_on_in_the_order_they_came(store: Store):
    """The write that commits a group lets those before it go on first: what
    came first (a message's intake) reaches its next step first."""
    done: list[int] = []

    async def numbered(i: int) -> None:
        await write(store, f"o{i}")
        done.append(i)

    await asyncio.gather(*(numbered(i) for i in range(20)))
    assert done == list(range(20))


async def test_a_write_alone_commits_at_once(store: Store):
    counted = commits(store)
    await write(store, "alone")
    assert stored(store) == {"alone"} and len(counted) == 1
    assert not store._group.open


async def test_a_write_of_the_group_that_fails_fails_alone(store: Store):
    async with store.write() as session:
        await insert_rows(session, items("taken"))
    outcomes = await asyncio.gather(
        write(store, "a1"),
        write(store, "b1", "taken"),  # a duplicate: a redelivery's IntegrityError
        write(store, "c1"),
        return_exceptions=True,
    )
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], IntegrityError)
    assert stored(store) == {"taken", "a1", "c1"}  # b1 went with its savepoint


async def test_a_failed_commit_fails_every_write_of_its_group_and_the_next_write_works(
    store: Store, monkeypatch: pytest.MonkeyPatch
):
    fail_the_next_commit(monkeypatch)
    outcomes = await asyncio.gather(
        *(write(store, f"g{i}") for i in range(5)), return_exceptions=True
    )
    assert all(isinstance(o, OperationalError) for o in outcomes), outcomes
    assert "disk I/O error" in str(outcomes[0])
    assert stored(store) == set()  # none of them
    await write(store, "after")
    assert stored(store) == {"after"}


async def test_a_redelivery_of_a_message_its_group_then_loses_is_not_taken_for_a_duplicate(
    store: Store, monkeypatch: pytest.MonkeyPatch
):
    """A message's second delivery finds the first one's row, written but not
    committed yet, and the group's commit fails: the second delivery raises
    the database's failure, not the duplicate it seemed (taken for a duplicate,
    it would be acknowledged, and the message never stored)."""
    fail_the_next_commit(monkeypatch)
    first, again = await asyncio.gather(
        write(store, "m1"), write(store, "m1"), return_exceptions=True
    )
    assert isinstance(first, OperationalError) and isinstance(again, OperationalError), again
    assert stored(store) == set()
    await write(store, "m1")  # the platform delivers it again: stored now
    assert stored(store) == {"m1"}


async def test_a_write_through_the_orm_that_fails_loses_its_group_and_all_of_it_raises(
    store: Store,
):
    """A write that went through the Session rolls the whole transaction back
    when it fails: the writes before it in the group raise (a database error,
    as a failed commit), and none is stored."""

    async def orm_then_fail() -> None:
        async with store.write() as session:
            session.add(items("orm")[0])
            await session.flush()
            raise ValueError("the caller gave up")

    outcomes = await asyncio.gather(
        write(store, "first"), orm_then_fail(), write(store, "later"), return_exceptions=True
    )
    assert isinstance(outcomes[0], OperationalError)
    assert "ValueError: the caller gave up" in str(outcomes[0])
    assert isinstance(outcomes[1], ValueError)
    assert outcomes[2] is None  # began a group of its own after
    assert stored(store) == {"later"}


async def test_a_write_through_the_orm_commits_its_group_at_once(store: Store):
    async def orm() -> None:
        async with store.write() as session:
            session.add(items("orm")[0])
            await asyncio.sleep(0)

    await asyncio.gather(write(store, "x1"), orm(), write(store, "x2"))
    assert stored(store) == {"x1", "orm", "x2"}


async def test_a_write_cancelled_while_it_waits_for_its_group_holds_up_no_one(store: Store):
    first = asyncio.create_task(write(store, "c0"))
    others = [asyncio.create_task(write(store, f"c{i}")) for i in range(1, 5)]
    for _ in range(3):  # c0 has finished its block and waits for the group
        await asyncio.sleep(0)
    first.cancel()
    await asyncio.wait_for(asyncio.gather(*others), 5)
    assert {f"c{i}" for i in range(1, 5)} <= stored(store)


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from bot.store import Store
    from bot.store.rows import insert_rows
    from tests.store.test_direct import items

    async def one(store, n):
        async with store.write() as session:
            await insert_rows(session, items(f"a{n}", f"b{n}", key=f"k{n}"))
            await asyncio.sleep(0)
        print(n, flush=True)  # returned: taken as stored

    async def main():
        store = Store(sys.argv[1], group_commit=True)
        await store.upgrade()
        n = 0
        while True:
            await asyncio.gather(*(one(store, n + i) for i in range(20)))
            n += 20

    asyncio.run(main())
    """
)


@pytest.mark.slow  # a writer process started and killed
def test_killed_while_groups_are_open_loses_no_write_that_returned(tmp_path: Path):
    """The process killed at an arbitrary moment of grouped writes: every write
    that returned is stored, whole (both its rows), and none is half there."""
    database = tmp_path / "killed.db"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, f"sqlite+aiosqlite:///{database}"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert writer.stdout is not None
    returned = []
    for line in writer.stdout:
        returned.append(int(line))
        if len(returned) == 1357:  # mid-group, most likely
            os.kill(writer.pid, signal.SIGKILL)
            break
    writer.wait(10)
    with sqlite3.connect(database) as db:
        events = {row[0] for row in db.execute("SELECT event_id FROM inbox")}
    for n in returned:
        assert f"a{n}" in events and f"b{n}" in events
    numbers = {int(e[1:]) for e in events}
    for n in numbers:
        assert f"a{n}" in events and f"b{n}" in events  # never half a write


async def test_dispose_lets_the_writes_in_progress_finish_first(store: Store):
    """A store disposed of while a write is under way (a task not stopped yet)
    closes the writer connection once that write, and those queued behind it,
    have committed: none is failed by the connection closed under it."""
    started = asyncio.Event()

    async def slow(event: str) -> None:
        async with store.write() as session:
            await insert_rows(session, items(event, key=event))
            started.set()
            await asyncio.sleep(0.1)
            await insert_rows(session, items(f"{event}-more", key=f"{event}-more"))

    writes = [asyncio.create_task(slow("first")), asyncio.create_task(write(store, "queued"))]
    await started.wait()
    await store.dispose()
    await asyncio.gather(*writes)
    assert stored(store) == {"first", "first-more", "queued"}


async def test_dispose_waits_for_a_stuck_write_only_so_long_and_says_so(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    monkeypatch.setattr(db, "DISPOSE_WAIT_S", 0.2)
    started, stuck = asyncio.Event(), asyncio.Event()

    async def stuck_write() -> None:
        async with store.write() as session:
            await insert_rows(session, items("stuck"))
            started.set()
            await stuck.wait()
            await insert_rows(session, items("never", key="k2"))

    writing = asyncio.create_task(stuck_write())
    await started.wait()
    await store.dispose()
    assert "store.dispose_before_writes_finished" in caplog.text
    stuck.set()
    with pytest.raises(SQLAlchemyError, match="closed"):  # closed under it: it fails, loudly
        await writing
    assert stored(store) == set()


async def test_dispose_commits_a_group_left_open_for_a_write_queued_behind_it(store: Store):
    """The write under way finishes while a write queued after the dispose
    waits, so it leaves its group open for that one: the dispose, next on the
    lock, commits the group before it closes the connection."""
    started = asyncio.Event()

    async def slow() -> None:
        async with store.write() as session:
            await insert_rows(session, items("first"))
            started.set()
            await asyncio.sleep(0.1)

    first = asyncio.create_task(slow())
    await started.wait()
    disposing = asyncio.create_task(store.dispose())
    await asyncio.sleep(0)  # the dispose waits on the lock
    late = asyncio.create_task(write(store, "late"))
    outcomes = await asyncio.gather(first, disposing, late, return_exceptions=True)
    assert outcomes == [None, None, None]
    assert stored(store) == {"first", "late"}
