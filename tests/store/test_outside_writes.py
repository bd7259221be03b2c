"""What another process writes reaches this process's caches: on SQLite the
writer sees another connection's commit at the next message's intake
(`Store.write(fresh=True)`, `bot.store.outside`); on PostgreSQL every instance
hears an account's change when its transaction commits (`announce_account`),
and not before, on a listening connection that is made again when lost."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlmodel import select

from bot.store import Store
from bot.store import coordination as coordination_module
from bot.store.coordination import ACCOUNT, MISSED, Coordination, announce_account
from bot.store.leases import Leases
from bot.store.models import AuditEntry
from bot.store.outside import OutsideWrites
from tests.conftest import POSTGRES_URL, Database


async def write_something(store: Store, *, fresh: bool = True) -> None:
    async with store.write(fresh=fresh) as session:
        session.add(AuditEntry(actor="test", action="/something"))


def database_file(store: Store) -> str:
    assert store.url.database is not None
    return store.url.database


async def test_the_next_write_sees_a_commit_made_by_another_connection(
    sqlite_store: Store,
) -> None:
    told: list[int] = []
    sqlite_store.outside.watch(lambda: told.append(1))
    await write_something(sqlite_store)
    assert told == [1]  # a new writer: what happened before it is not known
    for _ in range(20):
        await write_something(sqlite_store)
    async with sqlite_store.read() as session:
        await session.get(AuditEntry, 1)
    assert told == [1]  # its own writes and reads are not news

    other = sqlite3.connect(database_file(sqlite_store))  # as the CLI's process would
    other.execute(
        "INSERT INTO audit_log (actor, action, outcome, created_at) "
        "VALUES ('cli', '/role', 'ok', '2026-11-29 00:00:00')"
    )
    other.commit()
    await write_something(sqlite_store, fresh=False)  # not a message's intake: no look
    assert told == [1]
    await write_something(sqlite_store)
    assert told == [1, 1]
    await write_something(sqlite_store)
    assert told == [1, 1]  # told once

    other.execute("PRAGMA wal_checkpoint(PASSIVE)")  # as the side checkpoints: no news
    other.execute("SELECT count(*) FROM audit_log").fetchall()
    other.close()
    await write_something(sqlite_store)
    assert told == [1, 1]


async def test_a_failing_watcher_is_logged_and_the_others_are_told(
    sqlite_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    told: list[str] = []

    def broken() -> None:
        raise RuntimeError("cache gone")

    sqlite_store.outside.watch(broken)
    sqlite_store.outside.watch(lambda: told.append("second"))
    with caplog.at_level(logging.ERROR, logger="switchboard.store"):
        await write_something(sqlite_store)
    assert told == ["second"]
    assert "store.watcher_failed" in caplog.text and "cache gone" in caplog.text
    await write_something(sqlite_store)  # the write itself went on
    async with sqlite_store.read() as session:
        assert await session.get(AuditEntry, 2) is not None


class Unreadable:
    """A writer whose data version cannot be read while `failing` (a disk error)."""

    def __init__(self) -> None:
        self.failing = False

    async def data_version(self) -> int:
        if self.failing:
            raise sqlite3.OperationalError("disk I/O error")
        return 1


async def test_a_data_version_that_cannot_be_read_counts_as_news(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outside, writer, told = OutsideWrites(), Unreadable(), []
    outside.watch(lambda: told.append(1))
    await outside.look(writer)
    await outside.look(writer)
    assert told == [1]
    writer.failing = True
    with caplog.at_level(logging.WARNING, logger="switchboard.store"):
        await outside.look(writer)
    assert told == [1, 1] and "store.data_version_failed: disk I/O error" in caplog.text
    writer.failing = False
    await outside.look(writer)  # read again: what happened meanwhile is not known
    await outside.look(writer)
    assert told == [1, 1, 1]


postgres = pytest.mark.skipif(not POSTGRES_URL, reason="SWITCHBOARD_TEST_POSTGRES_URL not set")


@pytest.mark.parametrize(
    "shape",
    ["sqlite+aiosqlite:///{path}?timeout=5", "sqlite+aiosqlite:///file:{path}?mode=rwc&uri=true"],
)
async def test_a_database_url_with_parameters_still_sees_other_processes_writes(
    tmp_path: Path, shape: str
) -> None:
    """The URL's parameters (a busy timeout, a `file:` URI's mode) are applied
    by the Store's own driver, which looks for other processes' writes."""
    path = tmp_path / "bot.db"
    store = Store(shape.format(path=path), busy_timeout_ms=200)
    try:
        await store.upgrade()
        told: list[int] = []
        store.outside.watch(lambda: told.append(1))
        await write_something(store)
        other = sqlite3.connect(path)
        other.execute(
            "INSERT INTO audit_log (actor, action, outcome, created_at) "
            "VALUES ('cli', '/role', 'ok', '2026-11-29 00:00:00')"
        )
        other.commit()
        other.close()
        await write_something(store)
        assert told == [1, 1]
        async with store.read() as session:
            assert len((await session.exec(select(AuditEntry))).all()) == 3
    finally:
        await store.dispose()


@postgres
async def test_instances_hear_an_account_changed_when_its_transaction_commits(
    pg: Database, tmp_path: Path
) -> None:
    here, elsewhere = pg.store(), pg.store()
    await here.upgrade()
    other_schema = Database("postgres", tmp_path / "other")
    await other_schema.create()
    stranger = other_schema.store()
    coordination = Coordination(here, Leases(here, "here", 30), pg.schema)
    strange = Coordination(stranger, Leases(stranger, "stranger", 30), other_schema.schema)
    heard: list[tuple[str, str]] = []
    heard_by_stranger: list[tuple[str, str]] = []
    try:
        await coordination.listen(lambda kind, key: heard.append((kind, key)))
        await strange.listen(lambda kind, key: heard_by_stranger.append((kind, key)))

        with pytest.raises(RuntimeError):
            async with elsewhere.write() as session:
                await announce_account(session, elsewhere, 41)
                raise RuntimeError("the change failed: rolled back")
        async with elsewhere.write() as session:
            await announce_account(session, elsewhere, 42)
            await asyncio.sleep(0.3)
            assert heard == []  # not before it commits
        for _ in range(100):
            if heard:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        assert heard == [(ACCOUNT, "42")]
        assert heard_by_stranger == []  # another schema: another deployment
    finally:
        await coordination.close()
        await strange.close()
        for store in (here, elsewhere, stranger):
            await store.dispose()
        await other_schema.drop()


async def test_sqlite_sends_no_notice(sqlite_store: Store) -> None:
    async with sqlite_store.write() as session:
        await announce_account(session, sqlite_store, 42)  # nothing to send: no error


async def wait_until(check: Callable[[], bool], within: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def missed_then_heard(heard: list[tuple[str, str]], elsewhere: Store) -> None:
    """Callbacks hear `MISSED` once listening (again), then the notice of a
    change `elsewhere` commits after, and nothing else."""
    await wait_until(lambda: (MISSED, "") in heard)
    async with elsewhere.write() as session:
        await announce_account(session, elsewhere, 7)
    await wait_until(lambda: (ACCOUNT, "7") in heard)
    assert heard == [(MISSED, ""), (ACCOUNT, "7")]


@postgres
async def test_a_lost_listening_connection_listens_again_and_says_what_it_missed(
    pg: Database, caplog: pytest.LogCaptureFixture
) -> None:
    here, elsewhere = pg.store(), pg.store()
    await here.upgrade()
    coordination = Coordination(here, Leases(here, "here", 30), pg.schema)
    heard: list[tuple[str, str]] = []
    try:
        await coordination.listen(lambda kind, key: heard.append((kind, key)))
        async with elsewhere.write() as session:  # the database cuts the listener
            listening = text(  # this test's schema's: other tests listen beside it (xdist)
                "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN%'"
                " AND pid <> pg_backend_pid() AND application_name = :mine"
            ).bindparams(mine=f"switchboard:{pg.schema}")
            listeners = list((await session.exec(listening)).all())  # type: ignore[call-overload]
            assert len(listeners) == 1
            cut = text("SELECT pg_terminate_backend(:pid)").bindparams(pid=listeners[0][0])
            await session.exec(cut)  # type: ignore[call-overload]
        with caplog.at_level(logging.INFO, logger="switchboard.control"):
            await missed_then_heard(heard, elsewhere)
        assert "control.listener_lost" in caplog.text
    finally:
        await coordination.close()
        await here.dispose()
        await elsewhere.dispose()


class SlowToConnect:
    """An engine whose connections take `delay` seconds to open."""

    def __init__(self, engine: Any, delay: float) -> None:
        self._engine, self._delay = engine, delay

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def connect(self) -> Any:
        await asyncio.sleep(self._delay)
        return await self._engine.connect()


@postgres
async def test_a_first_listen_later_than_the_wait_says_what_it_missed(
    pg: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`listen` returned before the first connection listened: what was sent
    in between is lost, so callbacks hear `MISSED` once it listens (caches
    drop everything), then the notices that follow."""
    here, elsewhere = pg.store(), pg.store()
    await here.upgrade()
    monkeypatch.setattr(coordination_module, "LISTEN_FIRST_WAIT_S", 0.2)
    monkeypatch.setattr(here, "engine", SlowToConnect(here.engine, 1.0))
    coordination = Coordination(here, Leases(here, "here", 30), pg.schema)
    heard: list[tuple[str, str]] = []
    try:
        await asyncio.wait_for(coordination.listen(lambda k, key: heard.append((k, key))), 0.9)
        async with elsewhere.write() as session:  # nobody listens yet: lost
            await announce_account(session, elsewhere, 6)
        await missed_then_heard(heard, elsewhere)
    finally:
        await coordination.close()
        await here.dispose()
        await elsewhere.dispose()


async def test_listening_where_no_database_answers_returns_and_keeps_trying(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nowhere = Store("postgresql+asyncpg://postgres@127.0.0.1:9/none")  # nothing listens there
    coordination = Coordination(nowhere, Leases(nowhere, "here", 30))
    with caplog.at_level(logging.WARNING, logger="switchboard.control"):
        await asyncio.wait_for(coordination.listen(lambda kind, key: None), 10)
        await wait_until(lambda: caplog.text.count("control.listen_failed") >= 2)
    await coordination.close()  # stops trying
    await nowhere.dispose()


async def test_listening_where_a_database_never_answers_returns_in_bounded_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A connect that hangs (the server accepts and says nothing) does not hold
    up whoever starts listening (the recovery loop) past `LISTEN_FIRST_WAIT_S`."""
    accepted: list[asyncio.StreamWriter] = []

    async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # never answers

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setattr(coordination_module, "LISTEN_FIRST_WAIT_S", 0.3)
    mute = Store(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/none")
    coordination = Coordination(mute, Leases(mute, "here", 30))
    try:
        await asyncio.wait_for(coordination.listen(lambda kind, key: None), 5)
        assert accepted  # it did try, and is still trying
    finally:
        await coordination.close()  # stops trying, the hanging connect with it
        await mute.dispose()
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()
