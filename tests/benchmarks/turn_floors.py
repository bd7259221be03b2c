"""The floors under one message's database work (`make bench`): one turn's
rows written four ways, beside a message through the service. Prints
figures; asserts nothing.

A turn here is what the service writes when a run ends, cut to its essential
rows: the user's message and the reply, the outbox row, the run, its token log
(five INSERTs) and the inbox row's end (an UPDATE), in one transaction. Each
way writes the same rows, `--turns` times, one turn after another:

- raw SQL: the driver alone (`sqlite3` on the calling thread; asyncpg);
- a round trip: one `SELECT 1` through the async driver (aiosqlite, a worker
  thread each way; asyncpg, the socket): what each statement sent one at a
  time costs at least;
- SQLAlchemy Core: the same statements through the async engine, one
  transaction (`engine.begin()`);
- the ORM: the five rows added to an `AsyncSession`, the inbox row's end an
  ORM UPDATE, one commit (the unit of work the service's hot path left).

Then the service: `--messages` messages one after another through the real
pipeline (`tests.benchmarks.pipeline`, an instant model, the durable inbox and
outbox on), its p50 and CPU per message as multiples of the raw turn's: what a
message costs over the least its database writes could.

    python -m tests.benchmarks.turn_floors [--turns 2000] [--messages 1000]

On SQLite (fresh files), then on PostgreSQL when SWITCHBOARD_TEST_POSTGRES_URL
is set (a fresh schema).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import Column, Integer, MetaData, String, Table, Text, insert, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import registry

from tests.benchmarks.floors import _dsn
from tests.benchmarks.pipeline import msg, on_postgres, open_app
from tests.conftest import POSTGRES_URL

metadata = MetaData()
INBOX = Table(
    "tf_inbox",
    metadata,
    Column("event_id", String(64), primary_key=True),
    Column("status", String(16)),
)
MESSAGES = Table(
    "tf_messages",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("conversation", String(64)),
    Column("role", String(16)),
    Column("content", Text),
)
OUTBOX = Table(
    "tf_outbox",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("conversation", String(64)),
    Column("content", Text),
)
RUNS = Table(
    "tf_runs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("conversation", String(64)),
    Column("status", String(16)),
)
TOKENS = Table(
    "tf_tokens",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", String(64)),
    Column("input_tokens", Integer),
    Column("output_tokens", Integer),
)

mapper = registry()


class _Row:
    """An ORM row (mapped below, imperatively, each class to its table)."""

    def __init__(self, **values: Any) -> None:
        for name, value in values.items():
            setattr(self, name, value)


class Inbox(_Row):
    pass


class Message(_Row):
    pass


class Outgoing(_Row):
    pass


class Run(_Row):
    pass


class TokenLog(_Row):
    pass


for cls, table in (
    (Inbox, INBOX),
    (Message, MESSAGES),
    (Outgoing, OUTBOX),
    (Run, RUNS),
    (TokenLog, TOKENS),
):
    mapper.map_imperatively(cls, table)


def turn_values(i: int) -> dict[str, Any]:
    """Turn `i`'s rows, as the parameters of each statement."""
    conversation = f"c{i % 50}"
    return {
        "messages": [
            {"conversation": conversation, "role": "user", "content": f"message number {i}"},
            {"conversation": conversation, "role": "assistant", "content": "ok"},
        ],
        "outbox": {"conversation": conversation, "content": "ok"},
        "run": {"id": f"r{i}", "conversation": conversation, "status": "completed"},
        "tokens": {"run_id": f"r{i}", "input_tokens": 1000, "output_tokens": 10},
        "event_id": f"e{i}",
    }


async def core_turn(engine: AsyncEngine, i: int) -> None:
    v = turn_values(i)
    async with engine.begin() as conn:
        await conn.execute(insert(MESSAGES), v["messages"])
        await conn.execute(insert(OUTBOX), v["outbox"])
        await conn.execute(insert(RUNS), v["run"])
        await conn.execute(insert(TOKENS), v["tokens"])
        await conn.execute(
            update(INBOX).where(INBOX.c.event_id == v["event_id"]).values(status="answered")
        )


async def orm_turn(engine: AsyncEngine, i: int) -> None:
    v = turn_values(i)
    async with AsyncSession(engine, expire_on_commit=False) as session:
        session.add_all([Message(**row) for row in v["messages"]])
        session.add_all([Outgoing(**v["outbox"]), Run(**v["run"]), TokenLog(**v["tokens"])])
        await session.execute(
            update(Inbox).where(INBOX.c.event_id == v["event_id"]).values(status="answered")
        )
        await session.commit()


RAW_SQL = (
    "INSERT INTO tf_messages (conversation, role, content) VALUES (?, ?, ?)",
    "INSERT INTO tf_outbox (conversation, content) VALUES (?, ?)",
    "INSERT INTO tf_runs (id, conversation, status) VALUES (?, ?, ?)",
    "INSERT INTO tf_tokens (run_id, input_tokens, output_tokens) VALUES (?, ?, ?)",
    "UPDATE tf_inbox SET status = 'answered' WHERE event_id = ?",
)


def _pg(sql: str) -> str:
    """The SQL with its `?` marks numbered as asyncpg wants them (`$1`, `$2`, …)."""
    parts = sql.split("?")
    return "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], 1)) + parts[-1]


def _raw_args(i: int) -> list[Any]:
    v = turn_values(i)
    return [
        [tuple(row.values()) for row in v["messages"]],
        tuple(v["outbox"].values()),
        tuple(v["run"].values()),
        tuple(v["tokens"].values()),
        (v["event_id"],),
    ]


def sqlite_raw_turn(conn: sqlite3.Connection, i: int) -> None:
    messages, outbox, run, tokens, inbox = _raw_args(i)
    conn.execute("BEGIN")
    conn.executemany(RAW_SQL[0], messages)
    conn.execute(RAW_SQL[1], outbox)
    conn.execute(RAW_SQL[2], run)
    conn.execute(RAW_SQL[3], tokens)
    conn.execute(RAW_SQL[4], inbox)
    conn.execute("COMMIT")


async def pg_raw_turn(conn: asyncpg.Connection, i: int) -> None:
    messages, outbox, run, tokens, inbox = _raw_args(i)
    async with conn.transaction():
        await conn.executemany(_pg(RAW_SQL[0]), messages)
        await conn.execute(_pg(RAW_SQL[1]), *outbox)
        await conn.execute(_pg(RAW_SQL[2]), *run)
        await conn.execute(_pg(RAW_SQL[3]), *tokens)
        await conn.execute(_pg(RAW_SQL[4]), *inbox)


@dataclass
class Figure:
    """Per operation: wall p50 and CPU (µs)."""

    p50_us: float
    cpu_us: float


WARM_UP = 50
"""Turns (messages) run before the timed ones: statement caches, pages."""


async def measure(one: Callable[[int], Awaitable[object]], n: int, start: int = 0) -> Figure:
    for i in range(start - WARM_UP, start):
        await one(i)
    latencies = []
    cpu = time.process_time()
    for i in range(start, start + n):
        t0 = time.perf_counter()
        await one(i)
        latencies.append(time.perf_counter() - t0)
    return Figure(statistics.median(latencies) * 1e6, (time.process_time() - cpu) / n * 1e6)


class Turns:
    """Turn numbers for the three ways that write, a range each, apart from
    one another and from their warm-ups; each turn's inbox row is there
    beforehand (an UPDATE of a row that is not there would write nothing)."""

    WAYS = 3

    def __init__(self, n: int) -> None:
        self.n = n
        self.next = WARM_UP

    def take(self) -> int:
        start, self.next = self.next, self.next + self.n + WARM_UP
        return start

    def inbox_rows(self) -> list[tuple[str, str]]:
        return [(f"e{i}", "pending") for i in range(self.WAYS * (self.n + WARM_UP))]


async def service(url: str, n: int, schema: str | None) -> Figure:
    app, _, _ = await open_app(url, 0.0, schema)
    try:
        return await measure(lambda i: app.pipeline.handle(msg(i, i % 50, "floors")), n, WARM_UP)
    finally:
        await app.close()


async def on_sqlite(directory: Path, turns: int, messages: int) -> dict[str, Figure]:
    path = directory / "floors.db"
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute("PRAGMA synchronous=NORMAL")
    engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
    plan = Turns(turns)
    figures: dict[str, Figure] = {}
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
        raw.executemany("INSERT INTO tf_inbox VALUES (?, ?)", plan.inbox_rows())

        async def raw_turn(i: int) -> None:
            sqlite_raw_turn(raw, i)

        figures["raw"] = await measure(raw_turn, turns, plan.take())
        async with engine.connect() as held:
            driver = (await held.get_raw_connection()).driver_connection
            assert driver is not None
            figures["trip"] = await measure(lambda _: driver.execute("SELECT 1"), turns)
        figures["core"] = await measure(lambda i: core_turn(engine, i), turns, plan.take())
        figures["orm"] = await measure(lambda i: orm_turn(engine, i), turns, plan.take())
    finally:
        raw.close()
        await engine.dispose()
    figures["service"] = await service(
        f"sqlite+aiosqlite:///{directory / 'service.db'}", messages, None
    )
    return figures


async def on_pg(url: str, schema: str, turns: int, messages: int) -> dict[str, Figure]:
    settings = {"search_path": schema}
    conn = await asyncpg.connect(_dsn(url), server_settings=settings)
    engine = create_async_engine(url, connect_args={"server_settings": settings})
    plan = Turns(turns)
    figures: dict[str, Figure] = {}
    try:
        async with engine.begin() as sa:
            await sa.run_sync(metadata.create_all)
        await conn.executemany("INSERT INTO tf_inbox VALUES ($1, $2)", plan.inbox_rows())
        figures["raw"] = await measure(lambda i: pg_raw_turn(conn, i), turns, plan.take())
        figures["trip"] = await measure(lambda _: conn.execute("SELECT 1"), turns)
        figures["core"] = await measure(lambda i: core_turn(engine, i), turns, plan.take())
        figures["orm"] = await measure(lambda i: orm_turn(engine, i), turns, plan.take())
    finally:
        await conn.close()
        await engine.dispose()
    figures["service"] = await service(url, messages, schema)
    return figures


WAYS = (
    ("raw", "raw SQL, one transaction"),
    ("trip", "one round trip (SELECT 1)"),
    ("core", "SQLAlchemy Core, one transaction"),
    ("orm", "SQLAlchemy ORM, one commit"),
)


def report(where: str, turns: int, messages: int, figures: dict[str, Figure]) -> None:
    raw = figures["raw"]
    print(f"floors ({where}): one turn's six rows, {turns} turns each way; p50, CPU per turn")
    for key, label in WAYS:
        f = figures[key]
        print(
            f"  {label:34s} {f.p50_us:8.1f} µs  CPU {f.cpu_us:8.1f} µs"
            f"  ({f.cpu_us / raw.cpu_us:5.1f}× raw)"
        )
    s = figures["service"]
    print(
        f"  the service, {messages} messages       p50 {s.p50_us / 1000:6.2f} ms"
        f" ({s.p50_us / raw.p50_us:.0f}× raw)  CPU {s.cpu_us / 1000:.2f} ms"
        f" ({s.cpu_us / raw.cpu_us:.0f}× raw, {s.cpu_us / figures['orm'].cpu_us:.1f}× the ORM turn)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        figures = asyncio.run(on_sqlite(Path(tmp), args.turns, args.messages))
    report("SQLite", args.turns, args.messages, figures)
    if not POSTGRES_URL:
        print("PostgreSQL: skipped (set SWITCHBOARD_TEST_POSTGRES_URL)")
        return
    found: dict[str, Figure] = {}

    async def run(url: str, schema: str) -> None:
        found.update(await on_pg(url, schema, args.turns, args.messages))

    asyncio.run(on_postgres(run))
    report("PostgreSQL", args.turns, args.messages, found)


if __name__ == "__main__":
    main()
