"""Pipeline overhead benchmark (`make bench`). Prints figures; asserts nothing.

Mode "sequential": N messages, one after another, through the real pipeline
(SQLite file database, dedupe, identity, budget, persona, conversation,
history, persistence, token logs) with an in-process provider that answers
immediately, no tools. Prints messages/s, p50/p99 latency, CPU per message,
SQL statements and committed transactions (all, and those that wrote) per
message, counted on a second, untimed pass of the same messages, and peak RSS;
beside them the floor: a minimal durable bot on aiosqlite doing the same essential I/O
per message (store the event in an inbox, then one transaction with both
messages, the reply in an outbox and the inbox row marked done).

Mode "newusers": the same, but every message is the first message of a new
user in a new conversation (user, platform link, budget and conversation are
created on the way); prints the same figures.

Mode "concurrent": C conversations at once, the provider sleeping 1 s per call;
prints the total wall time (ideal: just over 1 s) and beside it the minimal
bot's: its two transactions per message with the same 1 s between them, C at
once.

    python -m tests.benchmarks.pipeline [--messages 2000] [--conversations 1000]
        [--database-url URL] [--mode sequential|newusers|concurrent|both]

Without --database-url, the sequential and new-user modes run on SQLite and
then, when SWITCHBOARD_TEST_POSTGRES_URL is set, on PostgreSQL (a fresh schema;
the floor there is the same minimal bot on asyncpg).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import secrets
import statistics
import tempfile
import time
from asyncio import selector_events
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite
import asyncpg
from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.app import App
from bot.config import Secrets, Settings
from bot.llm.types import LLMRequest, LLMResponse, TextBlock
from bot.ports import TextCallback
from bot.types import IncomingMessage, Reply, Target, Usage
from tests.conftest import POSTGRES_URL, Database

RUN = secrets.token_hex(4)


def canned_answer(model: str) -> LLMResponse:
    """The benchmarks' model answer: a short text, a fixed usage."""
    return LLMResponse(
        (TextBlock("ok, noted."),), "end_turn", Usage(input_tokens=50, output_tokens=5), model
    )


@dataclass
class InstantProvider:
    delay: float = 0.0

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse:
        if self.delay:
            await asyncio.sleep(self.delay)
        return canned_answer(request.model)

    async def aclose(self) -> None:
        return None


class NullAdapter:
    platform = "bench"

    def __init__(self) -> None:
        self.sent = 0

    async def start(self, core: object) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, reply: Reply, progress: object = None) -> list[str]:
        self.sent += 1
        return []

    async def show_typing(self, target: Target) -> None: ...


def msg(i: int, conversation: int, mode: str = "seq") -> IncomingMessage:
    return IncomingMessage(
        platform="bench",
        platform_user_id=f"{RUN}-{mode}-user{conversation}",
        platform_channel_id=f"{RUN}-{mode}-chan{conversation}",
        text=f"message number {i}",
        platform_message_id=str(i),
        event_id=f"{RUN}:{mode}:{i}",  # unique even when a database is reused
    )


async def open_app(url: str, delay: float, schema: str | None = None) -> tuple[App, NullAdapter]:
    database: dict[str, str] = {"url": url}
    if schema:
        database["schema_name"] = schema
    settings = Settings.model_validate(
        {
            "database": database,
            "budgets": {"guest": "unlimited"},
            "logging": {"level": "WARNING"},
        }
    )
    app = App(settings, Secrets(), provider=InstantProvider(delay))
    await app.open()
    adapter = NullAdapter()
    app.attach(adapter)
    return app, adapter


class SqlCounter:
    """Statements and committed transactions on the app's engines; of the
    commits, those of a transaction that wrote (ran anything but a SELECT)."""

    def __init__(self, engines: set[AsyncEngine]) -> None:
        self.statements = 0
        self.commits = 0
        self.writes = 0
        self.round_trips = 0
        """socket writes (a client-server database's round trips)"""
        for engine in engines:
            event.listen(engine.sync_engine, "before_cursor_execute", self._statement)
            event.listen(engine.sync_engine, "commit", self._commit)
            event.listen(engine.sync_engine, "rollback", self._rollback)

    def _statement(self, connection: Connection, _cursor: object, sql: str, *_: object) -> None:
        self.statements += 1
        if sql.lstrip()[:6].upper() not in ("SELECT", "BEGIN"):
            connection.info[_WROTE] = True

    def _commit(self, connection: Connection) -> None:
        self.commits += 1
        if connection.info.pop(_WROTE, False):
            self.writes += 1

    def _rollback(self, connection: Connection) -> None:
        connection.info.pop(_WROTE, None)


_WROTE = "benchmark.wrote"


@contextlib.contextmanager
def socket_writes() -> Iterator[list[int]]:
    """Writes to the event loop's socket transports inside the block: for a
    database client, one per round trip (a statement, a BEGIN, a COMMIT, a
    ping). Counted by wrapping the transport's `write` (untimed passes only)."""
    count = [0]
    real = selector_events._SelectorSocketTransport.write

    def write(transport: Any, data: Any) -> None:
        count[0] += 1
        real(transport, data)

    selector_events._SelectorSocketTransport.write = write  # type: ignore[method-assign]
    try:
        yield count
    finally:
        selector_events._SelectorSocketTransport.write = real  # type: ignore[method-assign]


async def sequential(
    url: str, n: int, conversations: int, new_users: bool = False, schema: str | None = None
) -> None:
    app, adapter = await open_app(url, 0.0, schema)
    for i in range(50):  # warm up: create users and conversations, fill caches
        await app.pipeline.handle(msg(-i - 1, i % conversations))
    mode = "new" if new_users else "seq"  # "new": conversation i, a new user each time
    latencies = []
    cpu = time.process_time()
    started = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        await app.pipeline.handle(msg(i, i if new_users else i % conversations, mode))
        latencies.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    await app.close()
    counter = await count_statements(url, n, conversations, new_users, schema)
    latencies.sort()
    p50 = statistics.median(latencies)
    if url.startswith("sqlite"):
        floor: tuple[float, ...] | None = await minimal_bot(url, n)
    else:
        floor = await minimal_bot_postgres(url, schema, n) if schema else None
    where = "SQLite" if url.startswith("sqlite") else "PostgreSQL"
    if new_users:
        print(f"new users ({where}): {n} first messages, each from a new user, in {elapsed:.2f} s")
    else:
        print(
            f"sequential ({where}): {n} messages over {conversations} conversations"
            f" in {elapsed:.2f} s"
        )
    print(f"  throughput   {n / elapsed:8.1f} messages/s")
    print(f"  latency p50  {p50:8.2f} ms" + (f"  (floor {floor[0]:.2f} ms)" if floor else ""))
    print(f"  latency p99  {latencies[int(len(latencies) * 0.99) - 1]:8.2f} ms")
    print(
        f"  CPU          {cpu / n * 1000:8.2f} ms/message"
        + (f"  (floor {floor[1]:.2f} ms)" if floor else "")
    )
    print(f"  statements   {counter.statements / n:8.1f} per message  (floor 5)")
    if counter.round_trips:  # PostgreSQL
        print(
            f"  round trips  {counter.round_trips / n:8.1f} per message"
            + (f"  (floor {floor[2]:.1f})" if floor and len(floor) > 2 else "")
        )
    print(
        f"  commits      {counter.commits / n:8.1f} per message,"
        f" {counter.writes / n:.1f} of them writing (floor 2)"
    )
    print(f"  peak RSS     {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:8.1f} MiB")
    assert adapter.sent >= n


FLOOR_TABLES = (
    "CREATE TABLE inbox (event_id TEXT PRIMARY KEY, payload TEXT, status TEXT);"
    "CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation TEXT, role TEXT,"
    " content TEXT);"
    "CREATE TABLE outbox (id INTEGER PRIMARY KEY, conversation TEXT, content TEXT);"
)


async def open_floor(url: str, name: str) -> aiosqlite.Connection:
    db = await aiosqlite.connect(url.split("///", 1)[1] + name, isolation_level=None)
    await db.execute("PRAGMA journal_mode=WAL")
    await db.execute("PRAGMA synchronous=NORMAL")
    await db.executescript(FLOOR_TABLES)
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


async def count_statements(
    url: str, n: int, conversations: int, new_users: bool, schema: str | None
) -> SqlCounter:
    """`sequential`'s messages again, in conversations of their own, untimed,
    with their statements counted (a listener called per statement costs time
    the service never spends)."""
    app, _ = await open_app(url, 0.0, schema)
    mode = "cnew" if new_users else "cseq"
    for i in range(50):
        await app.pipeline.handle(msg(-i - 1, i % conversations, mode))
    counter = SqlCounter({app.store.engine, app.store.urgent_engine})
    with socket_writes() as writes:
        for i in range(n):
            await app.pipeline.handle(msg(i, i if new_users else i % conversations, mode))
    counter.round_trips = writes[0]
    await app.close()
    return counter


async def minimal_bot(url: str, n: int) -> tuple[float, float]:
    """The floor: per message, the inbox insert in one transaction; then the
    user's message and the reply, the outbox row and the inbox row's status in
    a second one; on aiosqlite (a worker thread) in WAL mode. Returns (p50 ms,
    CPU ms) per message."""
    db = await open_floor(url, ".floor")
    try:
        latencies = []
        cpu = time.process_time()
        for i in range(n):
            t0 = time.perf_counter()
            await floor_accept(db, i)
            await floor_finish(db, i, f"c{i % 50}")
            latencies.append((time.perf_counter() - t0) * 1000)
        cpu = time.process_time() - cpu
    finally:
        await db.close()
    return statistics.median(latencies), cpu / n * 1000


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


async def minimal_bot_postgres(url: str, schema: str, n: int) -> tuple[float, float, float]:
    """`minimal_bot` on PostgreSQL: the same statements on one asyncpg connection
    (asyncpg prepares and caches them), in the benchmark's own schema. Also its
    round trips per message, on a short untimed pass after."""
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))

    async def one(i: int) -> None:
        event_id, conversation = f"e{i}", f"c{i % 50}"
        async with conn.transaction():
            await conn.execute(
                "INSERT INTO floor_inbox VALUES ($1, $2, 'pending')",
                event_id,
                f"message number {i}",
            )
        async with conn.transaction():
            await conn.executemany(
                "INSERT INTO floor_messages (conversation, role, content) VALUES ($1, $2, $3)",
                [
                    (conversation, "user", f"message number {i}"),
                    (conversation, "assistant", "ok"),
                ],
            )
            await conn.execute(
                "INSERT INTO floor_outbox (conversation, content) VALUES ($1, $2)",
                conversation,
                "ok",
            )
            await conn.execute(
                "UPDATE floor_inbox SET status = 'answered' WHERE event_id = $1", event_id
            )

    try:
        await conn.execute(f'SET search_path TO "{schema}"')
        await conn.execute(
            "CREATE TABLE floor_inbox (event_id TEXT PRIMARY KEY, payload TEXT, status TEXT);"
            "CREATE TABLE floor_messages (id BIGSERIAL PRIMARY KEY, conversation TEXT,"
            " role TEXT, content TEXT);"
            "CREATE TABLE floor_outbox (id BIGSERIAL PRIMARY KEY, conversation TEXT,"
            " content TEXT);"
        )
        latencies = []
        cpu = time.process_time()
        for i in range(n):
            t0 = time.perf_counter()
            await one(i)
            latencies.append((time.perf_counter() - t0) * 1000)
        cpu = time.process_time() - cpu
        with socket_writes() as writes:
            for i in range(n, n + 20):
                await one(i)
    finally:
        await conn.close()
    return statistics.median(latencies), cpu / n * 1000, writes[0] / 20


async def on_postgres(n: int, new_users: bool, spread: int = 50) -> None:
    """`sequential` in a fresh schema of the test PostgreSQL database, dropped after."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Database("postgres", Path(tmp))
        await db.create()
        try:
            await sequential(db.url, n, spread, new_users=new_users, schema=db.schema)
        finally:
            await db.drop()


async def concurrent(url: str, conversations: int) -> None:
    app, adapter = await open_app(url, 1.0)
    started = time.perf_counter()
    outcomes = await asyncio.gather(
        *(app.pipeline.handle(msg(i, i, "conc")) for i in range(conversations))
    )
    elapsed = time.perf_counter() - started
    await app.close()
    floor = (
        await minimal_bot_concurrent(url, conversations, 1.0) if url.startswith("sqlite") else None
    )
    answered = sum(o.status == "answered" for o in outcomes)
    others = sorted({o.status for o in outcomes} - {"answered"})
    print(f"concurrent: {conversations} conversations, provider sleeping 1 s each")
    print(
        f"  wall time    {elapsed:8.2f} s  ({answered} answered, {adapter.sent} sent)"
        + (f"; other outcomes: {', '.join(others)}" if others else "")
        + (f"  (floor {floor:.2f} s)" if floor is not None else "")
    )
    print(f"  peak RSS     {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:8.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--conversations", type=int, default=1000, help="concurrent mode")
    parser.add_argument(
        "--spread",
        type=int,
        default=50,
        help="conversations the sequential messages take turns in (fewer: longer histories)",
    )
    parser.add_argument("--database-url", help="default: a fresh SQLite file")
    parser.add_argument(
        "--mode", choices=["sequential", "newusers", "concurrent", "both"], default="both"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.mode in ("sequential", "both"):
            url = args.database_url or f"sqlite+aiosqlite:///{Path(tmp) / 'seq.db'}"
            asyncio.run(sequential(url, args.messages, args.spread))
        if args.mode in ("newusers", "both"):
            url = args.database_url or f"sqlite+aiosqlite:///{Path(tmp) / 'new.db'}"
            asyncio.run(sequential(url, args.messages, 50, new_users=True))
        if args.mode in ("concurrent", "both"):
            url = args.database_url or f"sqlite+aiosqlite:///{Path(tmp) / 'conc.db'}"
            asyncio.run(concurrent(url, args.conversations))
    # The same on PostgreSQL when the test database is configured (as CI does).
    if args.database_url is None and args.mode in ("sequential", "newusers", "both"):
        if not POSTGRES_URL:
            print("PostgreSQL: skipped (set SWITCHBOARD_TEST_POSTGRES_URL)")
            return
        if args.mode in ("sequential", "both"):
            asyncio.run(on_postgres(args.messages, new_users=False, spread=args.spread))
        if args.mode in ("newusers", "both"):
            asyncio.run(on_postgres(args.messages, new_users=True))


if __name__ == "__main__":
    main()
