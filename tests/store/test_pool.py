"""PostgreSQL's pool: connections opened for a burst stay open while it lasts
(SQLAlchemy's queue pool closed each one beyond pool_size as it came back, so a
burst opened a connection every few statements), at most pool_size +
max_overflow of them, and the pool is back to pool_size once they go unneeded."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bot.store.pool import KeepingPool
from tests.conftest import POSTGRES_URL, Database

pytestmark = [
    pytest.mark.fast_path,
    pytest.mark.postgres,
    pytest.mark.skipif(not POSTGRES_URL, reason="SWITCHBOARD_TEST_POSTGRES_URL not set"),
]


class Opened:
    """Connections the pool opened and closed (its own events)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.opened = 0
        self.closed = 0
        event.listen(engine.sync_engine.pool, "connect", self._connect)
        event.listen(engine.sync_engine.pool, "close", self._close)

    def _connect(self, *_: object) -> None:
        self.opened += 1

    def _close(self, *_: object) -> None:
        self.closed += 1


async def burst(engine: AsyncEngine, at_once: int) -> set[int]:
    """`at_once` statements holding a connection each at the same time; the
    server backends that answered them."""
    gate = asyncio.Event()
    arrived = 0

    async def one() -> int:
        nonlocal arrived
        async with engine.connect() as conn:
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            arrived += 1
            if arrived == at_once:
                gate.set()
            await gate.wait()  # every connection is out at once
            return int(pid)

    return set(await asyncio.gather(*(one() for _ in range(at_once))))


async def test_a_burst_beyond_pool_size_reuses_its_connections_instead_of_reopening(
    pg: Database,
) -> None:
    store = pg.store(pool_size=2, max_overflow=3)
    counted = Opened(store.engine)
    try:
        backends = [await burst(store.engine, 5) for _ in range(4)]
        # five opened for the first burst, kept for the next three (the queue
        # pool opened three more for each: 5 + 3 + 3 + 3)
        assert counted.opened == 5
        assert counted.closed == 0
        assert backends[1] == backends[2] == backends[3] == backends[0]
    finally:
        await store.dispose()


async def test_the_pool_never_opens_more_than_pool_size_plus_max_overflow(pg: Database) -> None:
    store = pg.store(pool_size=2, max_overflow=3, pool_timeout=0.5)
    counted = Opened(store.engine)
    held = [await store.engine.connect() for _ in range(5)]
    try:
        for conn in held:
            await conn.execute(text("SELECT 1"))
        with pytest.raises(PoolTimeout):
            async with store.engine.connect() as sixth:
                await sixth.execute(text("SELECT 1"))
        assert counted.opened == 5
    finally:
        for conn in held:
            await conn.close()
        await store.dispose()


async def test_overflow_connections_are_closed_once_unneeded_for_a_while(pg: Database) -> None:
    assert POSTGRES_URL
    engine = create_async_engine(
        POSTGRES_URL,
        connect_args={"server_settings": {"search_path": pg.schema or "public"}},
        **KeepingPool.sized(2, 3, idle_s=0.3),
    )
    counted = Opened(engine)
    try:
        await burst(engine, 5)
        await burst(engine, 5)  # within idle_s of the first: kept
        assert (counted.opened, counted.closed) == (5, 0)
        await asyncio.sleep(0.4)
        for _ in range(5):  # light use, one at a time: the extra three go
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        assert counted.closed == 3
        assert engine.sync_engine.pool.checkedin() == 2  # type: ignore[attr-defined]
        await burst(engine, 5)  # a new burst opens what it needs again
        assert counted.opened == 8
    finally:
        await engine.dispose()


async def test_kept_connections_the_server_cut_while_idle_are_replaced_not_failed(
    pg: Database,
) -> None:
    """Every connection a burst left open is ended by the server (a restart, an
    administrator) while idle in the pool: the next burst's statements all run,
    on new backends, none fails."""
    store = pg.store(pool_size=2, max_overflow=3)
    counted = Opened(store.engine)
    try:
        kept = await burst(store.engine, 5)
        async with store.urgent_engine.connect() as other:
            await other.execute(
                text("SELECT pg_terminate_backend(pid) FROM unnest(CAST(:pids AS int[])) AS pid"),
                {"pids": sorted(kept)},
            )
            alive = text("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(:pids)")
            for _ in range(500):
                left = (await other.execute(alive, {"pids": sorted(kept)})).scalar_one()
                await other.rollback()  # a new snapshot of pg_stat_activity next time
                if left == 0:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError(f"{left} of the backends still there")
        await asyncio.sleep(0.2)  # the server's goodbyes reach the idle connections
        again = await burst(store.engine, 5)
        assert not again & kept
        assert counted.opened == 10
    finally:
        await store.dispose()


async def test_a_disposed_pool_is_recreated_with_the_same_sizes(pg: Database) -> None:
    store = pg.store(pool_size=2, max_overflow=3)
    try:
        await store.engine.dispose()  # SQLAlchemy replaces the pool (`recreate`)
        pool = store.engine.sync_engine.pool
        assert isinstance(pool, KeepingPool)
        assert (pool.keep, pool.size()) == (2, 5)
        assert len(await burst(store.engine, 5)) == 5
    finally:
        await store.dispose()
