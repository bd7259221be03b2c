"""The floors of `tests.benchmarks.pipeline`: a minimal durable bot doing the
same essential I/O per message as the service, and nothing else. Per message,
the inbox row in one transaction; then the user's message and the reply, the
outbox row and the inbox row's status in a second one. On SQLite with
aiosqlite (a worker thread) in WAL mode; on PostgreSQL with asyncpg (which
prepares and caches its statements), in the benchmark's own schema.

Sequential: one message after another (`minimal_bot`, measured by the
benchmark in windows alternating with the service's). Concurrent: n messages
at once with the model's delay between the two transactions (the wall time).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiosqlite
import asyncpg

from bot.config.sections import DatabaseSettings
from tests.benchmarks.counting import socket_writes


def service_connections() -> int:
    """The most connections the service's pool opens by default (pool_size +
    max_overflow): the PostgreSQL floors' pool size."""
    database = DatabaseSettings()
    return database.pool_size + database.max_overflow


FLOOR_TABLES = (
    "CREATE TABLE inbox (event_id TEXT PRIMARY KEY, payload TEXT, status TEXT);"
    "CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation TEXT, role TEXT,"
    " content TEXT);"
    "CREATE TABLE outbox (id INTEGER PRIMARY KEY, conversation TEXT, content TEXT);"
)


def _remove(path: str) -> None:
    for stale in (path, path + "-wal", path + "-shm"):
        Path(stale).unlink(missing_ok=True)


async def open_floor(url: str, name: str) -> aiosqlite.Connection:
    """A fresh floor database beside the SQLite file of `url` (one left by an
    earlier mode or run on the same `--database-url` is replaced)."""
    path = url.split("///", 1)[1] + name
    _remove(path)
    db = await aiosqlite.connect(path, isolation_level=None)
    try:
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.executescript(FLOOR_TABLES)
    except BaseException:
        await db.close()  # its worker thread would keep the process from exiting
        raise
    return db


async def floor_accept(db: aiosqlite.Connection, i: int) -> None:
    """The minimal bot's first transaction: the inbox row."""
    await db.execute("BEGIN")
    await db.execute("INSERT INTO inbox VALUES (?, ?, 'pending')", (f"e{i}", f"message number {i}"))
    await db.execute("COMMIT")


async def floor_finish(db: aiosqlite.Connection, i: int, conversation: str) -> None:
    """Its second: the user's message and the reply, the outbox row, the inbox
    row's status."""
    await db.execute("BEGIN")
    await db.executemany(
        "INSERT INTO messages (conversation, role, content) VALUES (?, ?, ?)",
        [(conversation, "user", f"message number {i}"), (conversation, "assistant", "ok")],
    )
    await db.execute(
        "INSERT INTO outbox (conversation, content) VALUES (?, ?)", (conversation, "ok")
    )
    await db.execute("UPDATE inbox SET status = 'answered' WHERE event_id = ?", (f"e{i}",))
    await db.execute("COMMIT")


FloorMessage = Callable[[int], Awaitable[None]]
"""The minimal bot handling message `i`: its two transactions."""


@asynccontextmanager
async def minimal_bot(url: str, schema: str | None) -> AsyncIterator[FloorMessage]:
    """The sequential floor, open: per message, the inbox insert in one
    transaction; then the user's message and the reply, the outbox row and the
    inbox row's status in a second one. On SQLite (`url` a file: the floor's
    own file beside it) with aiosqlite, a worker thread, in WAL mode; on
    PostgreSQL with asyncpg on one connection, in `schema`."""
    if url.startswith("sqlite"):
        db = await open_floor(url, ".floor")

        async def one(i: int) -> None:
            await floor_accept(db, i)
            await floor_finish(db, i, f"c{i % 50}")

        try:
            yield one
        finally:
            await db.close()
        return
    conn = await asyncpg.connect(_dsn(url), server_settings={"search_path": schema or "public"})

    async def one_pg(i: int) -> None:
        await pg_accept(conn, i)
        await pg_finish(conn, i, f"c{i % 50}")

    try:
        await conn.execute(PG_TABLES)
        yield one_pg
    finally:
        await conn.close()


async def floor_round_trips(one: FloorMessage, start: int, n: int = 20) -> float:
    """Round trips per message of the floor `one` (PostgreSQL), over `n`
    untimed messages numbered from `start`."""
    with socket_writes() as writes:
        for i in range(start, start + n):
            await one(i)
    return writes[0] / n


async def minimal_bot_concurrent(url: str, n: int, delay: float) -> float:
    """The floor for `concurrent`: `minimal_bot`'s two transactions per message
    with the model's `delay` between them, n messages at once (transactions
    take turns on the one connection). Returns the wall time."""
    db = await open_floor(url, ".floor-concurrent")
    turn = asyncio.Lock()

    async def one(i: int) -> None:
        async with turn:
            await floor_accept(db, i)
        await asyncio.sleep(delay)
        async with turn:
            await floor_finish(db, i, f"c{i}")

    try:
        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        return time.perf_counter() - started
    finally:
        await db.close()


PG_TABLES = (
    "CREATE TABLE floor_inbox (event_id TEXT PRIMARY KEY, payload TEXT, status TEXT);"
    "CREATE TABLE floor_messages (id BIGSERIAL PRIMARY KEY, conversation TEXT,"
    " role TEXT, content TEXT);"
    "CREATE TABLE floor_outbox (id BIGSERIAL PRIMARY KEY, conversation TEXT, content TEXT);"
)


async def pg_accept(conn: asyncpg.Connection, i: int) -> None:
    """`floor_accept` on PostgreSQL."""
    async with conn.transaction():
        await conn.execute(
            "INSERT INTO floor_inbox VALUES ($1, $2, 'pending')", f"e{i}", f"message number {i}"
        )


async def pg_finish(conn: asyncpg.Connection, i: int, conversation: str) -> None:
    """`floor_finish` on PostgreSQL."""
    async with conn.transaction():
        await conn.executemany(
            "INSERT INTO floor_messages (conversation, role, content) VALUES ($1, $2, $3)",
            [(conversation, "user", f"message number {i}"), (conversation, "assistant", "ok")],
        )
        await conn.execute(
            "INSERT INTO floor_outbox (conversation, content) VALUES ($1, $2)", conversation, "ok"
        )
        await conn.execute(
            "UPDATE floor_inbox SET status = 'answered' WHERE event_id = $1", f"e{i}"
        )


def _dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def minimal_bot_concurrent_postgres(url: str, schema: str, n: int, delay: float) -> float:
    """`minimal_bot_concurrent` on PostgreSQL: each transaction on a connection
    of a pool as large as the service's (`service_connections`). Returns the
    wall time. Its tables are made afresh (`minimal_bot` may have made them)."""
    pool = await asyncpg.create_pool(
        _dsn(url),
        min_size=1,
        max_size=service_connections(),
        server_settings={"search_path": schema},
    )

    async def one(i: int) -> None:
        async with pool.acquire() as conn:
            await pg_accept(conn, i)
        await asyncio.sleep(delay)
        async with pool.acquire() as conn:
            await pg_finish(conn, i, f"c{i}")

    try:
        async with pool.acquire() as conn:
            await conn.execute(
                "DROP TABLE IF EXISTS floor_inbox, floor_messages, floor_outbox;" + PG_TABLES
            )
        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        return time.perf_counter() - started
    finally:
        await pool.close()
