"""Pipeline overhead benchmark (`make bench`). Prints figures; asserts nothing.

Mode "sequential": N messages, one after another, through the real pipeline
(SQLite file database, dedupe, identity, budget, persona, conversation,
history, persistence, token logs) with an in-process provider that answers
immediately, no tools. Prints messages/s, p50/p99 latency, CPU per message,
how a message's time falls before its model call and after it (what bounds
a burst: `ModelSplit`), SQL statements and committed transactions (all, and
those that wrote) per message, counted on a second, untimed pass of the same
messages, and peak RSS;
beside them the floor: a minimal durable bot on aiosqlite doing the same essential I/O
per message (store the event in an inbox, then one transaction with both
messages, the reply in an outbox and the inbox row marked done). The service
and the floor are open side by side and measured in turns, four windows of
each (a shared machine's speed drifts more between two windows than by the
difference measured), with the CPU ratio of each pair of windows printed.

Mode "paused": the same, but every message comes from a user back after a
pause: the user record, budget limit and "has no memories" cached for that
user aged past their TTLs before the message (people mostly answer after
longer than those caches are trusted, 10-30 s), so each message reads what it
needs of them again.

Mode "newusers": the same, but every message is the first message of a new
user in a new conversation (user, platform link, budget and conversation are
created on the way); prints the same figures.

Mode "concurrent": C conversations at once, the provider sleeping 1 s per call,
twice: first messages of C new users in C new conversations, then the same
conversations again (returning users). Prints each burst's wall time (ideal:
just over 1 s) and beside it the minimal bot's: its two transactions per
message with the same 1 s between them, C at once (on PostgreSQL on a pool as
large as the service's); the CPU per message; and when the first and the last
message reached the model and the first and the last reply went out (the wall
time is about the last model call plus 1 s, or the first reply plus the time
the replies take to go out, whichever is later).

Every mode opens the app and then settles the heap as `switchboard run` does
(`bot.cli.run.settle_heap`: startup's objects out of the garbage collector's
full passes), so that the figures are the service's.

    python -m tests.benchmarks.pipeline [--messages 2000] [--conversations 1000]
        [--database-url URL] [--mode sequential|paused|newusers|concurrent|both]

Without --database-url, every mode runs on SQLite and then, when
SWITCHBOARD_TEST_POSTGRES_URL is set, on PostgreSQL (a fresh schema; the floor
there is the same minimal bot on asyncpg). The floors are in
`tests.benchmarks.floors`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import secrets
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import event

from bot.accounts.budgets import LIMIT_CACHE_TTL_S
from bot.accounts.identity import CACHE_TTL_S
from bot.app import App
from bot.cli.run import settle_heap
from bot.config import Secrets, Settings
from bot.llm.types import LLMRequest, LLMResponse, TextBlock
from bot.ports import TextCallback
from bot.store.memories import NO_MEMORIES_TTL_S
from bot.types import IncomingMessage, Reply, Target, Usage
from tests.benchmarks.counting import SqlCounter, socket_writes
from tests.benchmarks.floors import (
    floor_round_trips,
    minimal_bot,
    minimal_bot_concurrent,
    minimal_bot_concurrent_postgres,
)
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
    calls: list[float] = field(default_factory=list)
    """when each call came (perf_counter)"""

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse:
        self.calls.append(time.perf_counter())
        if self.delay:
            await asyncio.sleep(self.delay)
        return canned_answer(request.model)

    async def aclose(self) -> None:
        return None


class NullAdapter:
    platform = "bench"

    def __init__(self) -> None:
        self.sent = 0
        self.times: list[float] = []
        """when each reply went out (perf_counter)"""

    async def start(self, core: object) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, reply: Reply, progress: object = None) -> list[str]:
        self.sent += 1
        self.times.append(time.perf_counter())
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


GUEST_BUDGET: list[int | str] = ["unlimited"]
"""The guests' allowance (`--guest-budget`): unlimited reserves nothing; a
number measures a limited user's path (each call reserved and settled)."""


async def open_app(
    url: str, delay: float, schema: str | None = None
) -> tuple[App, NullAdapter, InstantProvider]:
    database: dict[str, str] = {"url": url}
    if schema:
        database["schema_name"] = schema
    settings = Settings.model_validate(
        {
            "database": database,
            "budgets": {"guest": GUEST_BUDGET[0]},
            "logging": {"level": "WARNING"},
        }
    )
    provider = InstantProvider(delay)
    app = App(settings, Secrets(), provider=provider)
    await app.open()
    adapter = NullAdapter()
    app.attach(adapter)
    gc.unfreeze()  # an earlier mode's app, frozen with the heap, is garbage now
    settle_heap(collect=True)  # as `switchboard run` does once the app is open
    return app, adapter, provider


ROUNDS = 4
"""Windows of the service and of its floor, taken in turns (`sequential`)."""


@dataclass
class Windows:
    """One side's timed windows, together."""

    latencies: list[float] = field(default_factory=list)
    cpu: float = 0.0
    wall: float = 0.0

    async def time(self, handle: Callable[[int], Awaitable[object]], numbers: range) -> float:
        """Handle messages `numbers`, one after another, timed; their CPU s."""
        cpu, started = time.process_time(), time.perf_counter()
        for i in numbers:
            t0 = time.perf_counter()
            await handle(i)
            self.latencies.append((time.perf_counter() - t0) * 1000)
        self.wall += time.perf_counter() - started
        used = time.process_time() - cpu
        self.cpu += used
        return used

    def p50(self) -> float:
        return statistics.median(self.latencies)

    def p99(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[int(len(ordered) * 0.99) - 1]


@dataclass
class ModelSplit:
    """How a message's time (the model answering at once) falls before its
    first model call and after its last. What bounds a burst of C
    conversations with a model taking D s, on one core: the last reaches the
    model no sooner than C × before, and the replies, none before D, take
    about C × after (under a burst writes share commits: less than here)."""

    before: list[float] = field(default_factory=list)
    after: list[float] = field(default_factory=list)

    def add(self, started: float, calls: list[float], ended: float) -> None:
        if calls:
            self.before.append(calls[0] - started)
            self.after.append(ended - calls[-1])

    def line(self) -> str:
        if not self.before:
            return "no model call"
        before, after = statistics.median(self.before), statistics.median(self.after)
        return f"{before * 1000:8.2f} ms before the model call, {after * 1000:.2f} ms after (p50)"


def _versus(value: float, floor: float | None, unit: str) -> str:
    return f"  (floor {floor:.2f} {unit}: {value / floor:.1f}×)" if floor else ""


async def sequential(
    url: str,
    n: int,
    conversations: int,
    new_users: bool = False,
    schema: str | None = None,
    paused: bool = False,
) -> None:
    """The service and its floor open side by side, measured in `ROUNDS`
    alternating windows of n / ROUNDS messages each, so that the machine's
    slow spells fall on both."""
    app, adapter, provider = await open_app(url, 0.0, schema)
    # "new": conversation i, a new user each time; each mode its own event ids
    mode = "new" if new_users else "pause" if paused else "seq"
    warm = "neww" if new_users else mode  # new users: none of those timed
    for i in range(50):  # warm up: create users and conversations, fill caches
        await app.pipeline.handle(msg(-i - 1, i % conversations, warm))
    split = ModelSplit()

    async def handle(i: int) -> object:
        message = msg(i, i if new_users else i % conversations, mode)
        if paused:
            back_after_a_pause(app, message)
        calls, started = len(provider.calls), time.perf_counter()
        outcome = await app.pipeline.handle(message)
        split.add(started, provider.calls[calls:], time.perf_counter())
        return outcome

    service, floor, ratios, trips = Windows(), Windows(), [], None
    sqlite = url.startswith("sqlite")
    async with minimal_bot(url, schema) if sqlite or schema else nullcontext() as floor_one:
        if floor_one is not None:
            for i in range(50):
                await floor_one(-i - 1)
        for r in range(ROUNDS):
            window = range(r * n // ROUNDS, (r + 1) * n // ROUNDS)
            used = await service.time(handle, window)
            if floor_one is not None:
                ratios.append(used / max(await floor.time(floor_one, window), 1e-9))
        if floor_one is not None and not sqlite:
            trips = await floor_round_trips(floor_one, n)
    await app.close()
    counter = await count_statements(url, n, conversations, new_users, schema, "c" + mode, paused)
    where = "SQLite" if sqlite else "PostgreSQL"
    if new_users:
        print(f"new users ({where}): {n} first messages, each from a new user", end="")
    elif paused:
        print(f"returning after a pause ({where}): {n} messages over {conversations}", end="")
        print(" conversations, every cached record expired", end="")
    else:
        print(f"sequential ({where}): {n} messages over {conversations} conversations", end="")
    print(f", {ROUNDS} windows in turns with the floor's" if ratios else "")
    floor_p50 = floor.p50() if ratios else None
    floor_cpu = floor.cpu / n * 1000 if ratios else None
    print(f"  throughput   {n / service.wall:8.1f} messages/s")
    print(f"  latency p50  {service.p50():8.2f} ms" + _versus(service.p50(), floor_p50, "ms"))
    print(f"  latency p99  {service.p99():8.2f} ms")
    cpu = service.cpu / n * 1000
    print(f"  CPU          {cpu:8.2f} ms/message" + _versus(cpu, floor_cpu, "ms"))
    if ratios:
        print(f"  per window   CPU {', '.join(f'{r:.1f}×' for r in ratios)} the floor's")
    print(f"  model split  {split.line()}")
    print(f"  statements   {counter.statements / n:8.1f} per message  (floor 5)")
    if counter.round_trips:  # PostgreSQL
        print(
            f"  round trips  {counter.round_trips / n:8.1f} per message"
            + (f"  (floor {trips:.1f})" if trips else "")
        )
    print(
        f"  commits      {counter.commits / n:8.1f} per message,"
        f" {counter.writes / n:.1f} of them writing (floor 2)"
    )
    print(f"  peak RSS     {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:8.1f} MiB")
    assert adapter.sent >= n


async def count_statements(
    url: str,
    n: int,
    conversations: int,
    new_users: bool,
    schema: str | None,
    mode: str,
    paused: bool = False,
) -> SqlCounter:
    """`sequential`'s messages again, in conversations of their own, untimed,
    with their statements counted (a listener called per statement costs time
    the service never spends)."""
    app, _, _ = await open_app(url, 0.0, schema)
    warm = mode + "w" if new_users else mode  # new users: none of those counted
    for i in range(50):
        await app.pipeline.handle(msg(-i - 1, i % conversations, warm))
    counter = SqlCounter({app.store.engine, app.store.urgent_engine})
    with socket_writes() as writes:
        for i in range(n):
            message = msg(i, i if new_users else i % conversations, mode)
            if paused:
                back_after_a_pause(app, message)
            await app.pipeline.handle(message)
    counter.round_trips = writes[0]
    await app.close()
    return counter


async def on_postgres(run: Callable[[str, str], Awaitable[None]]) -> None:
    """`run(url, schema)` in a fresh schema of the test PostgreSQL database,
    dropped after."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Database("postgres", Path(tmp))
        await db.create()
        try:
            assert db.schema is not None
            await run(db.url, db.schema)
        finally:
            await db.drop()


@dataclass
class Burst:
    """One burst of `concurrent`: its wall and CPU time, and when the model
    calls and the replies came, from its start."""

    wall: float
    cpu: float
    statuses: list[str]
    sent: int
    calls: list[float]
    replies: list[float]
    commits: int | None
    """SQLite: transactions committed (writes queued together share one)"""

    def line(self, floor: float | None, n: int) -> str:
        answered = sum(s == "answered" for s in self.statuses)
        others = sorted(set(self.statuses) - {"answered"})
        return (
            f"{self.wall:8.2f} s  ({answered} answered, {self.sent} sent)"
            + (f"; other outcomes: {', '.join(others)}" if others else "")
            + (f"  (floor {floor:.2f} s: {self.wall / floor:.2f}×)" if floor else "")
            + f"; CPU {self.cpu / n * 1000:.2f} ms/message"
            + (f"; {self.commits / n:.2f} commits/message" if self.commits is not None else "")
        )

    def timeline(self) -> str:
        calls, replies = sorted(self.calls), sorted(self.replies)
        if not calls or not replies:
            return "no model call or no reply"
        return (
            f"first {calls[0]:.2f} s, last {calls[-1]:.2f} s;"
            f" replies first {replies[0]:.2f} s, last {replies[-1]:.2f} s"
        )


async def burst(
    app: App, adapter: NullAdapter, provider: InstantProvider, n: int, at: int
) -> Burst:
    """Messages `at`…`at + n - 1`, one to each of conversations 0…n-1, at once."""
    provider.calls.clear()
    adapter.times.clear()
    sent = adapter.sent
    commits: list[int] = []

    def count(*_: object) -> None:
        commits.append(1)

    # SQLite's commits (PostgreSQL's autocommit statements send none to count)
    engines = [app.store.engine.sync_engine] if app.store.is_sqlite else []
    for engine in engines:
        event.listen(engine, "commit", count)
    cpu, started = time.process_time(), time.perf_counter()
    outcomes = await asyncio.gather(
        *(app.pipeline.handle(msg(at + i, i, "conc")) for i in range(n))
    )
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    for engine in engines:
        event.remove(engine, "commit", count)
    return Burst(
        wall,
        cpu,
        [o.status for o in outcomes],
        adapter.sent - sent,
        [t - started for t in provider.calls],
        [t - started for t in adapter.times],
        len(commits) if engines else None,
    )


async def concurrent(url: str, conversations: int, schema: str | None = None) -> None:
    """A burst of first messages, each from a new user in a new conversation,
    then a second burst of the same conversations (returning users)."""
    app, adapter, provider = await open_app(url, 1.0, schema)
    first = await burst(app, adapter, provider, conversations, 0)
    again = await burst(app, adapter, provider, conversations, conversations)
    await app.close()
    if url.startswith("sqlite"):
        floor: float | None = await minimal_bot_concurrent(url, conversations, 1.0)
    else:
        floor = (
            await minimal_bot_concurrent_postgres(url, schema, conversations, 1.0)
            if schema
            else None
        )
    where = "SQLite" if url.startswith("sqlite") else "PostgreSQL"
    print(f"concurrent ({where}): {conversations} conversations, provider sleeping 1 s each")
    print(f"  wall time    {first.line(floor, conversations)}")
    print(f"  model calls  {first.timeline()}")
    print("  again, returning users in the same conversations:")
    print(f"  wall time    {again.line(floor, conversations)}")
    print(f"  model calls  {again.timeline()}")
    print(f"  peak RSS     {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:8.1f} MiB")


PAUSE_S = 100 * max(CACHE_TTL_S, LIMIT_CACHE_TTL_S, NO_MEMORIES_TTL_S)
"""How long ago, for the caches, a paused user's records were read."""


def back_after_a_pause(app: App, message: IncomingMessage) -> None:
    """The sender's cached user record, budget limit and "has no memories"
    aged by `PAUSE_S`, as if they came back after longer than those caches are
    trusted (30 s, 10 s), as people mostly do in a chat. What the message reads
    again is cached as usual for the rest of its handling. O(1) per message: it
    runs inside the timed window."""
    s = app.pipeline.s
    key = (message.platform, message.platform_user_id)
    cached = s.identity._cache.get(key)
    if cached is None:
        return
    at, record, username = cached
    s.identity._cache[key] = (at - PAUSE_S, record, username)
    limit = s.budgets._limits.get(record.id)
    if limit is not None:
        s.budgets._limits[record.id] = (limit[0] - PAUSE_S, *limit[1:])
    none_since = s.memories._none_since.get(record.id)
    if none_since is not None:
        s.memories._none_since[record.id] = none_since - PAUSE_S


async def paused(url: str, n: int, conversations: int, schema: str | None = None) -> None:
    """`sequential`, each message from a user back after a pause (`back_after_a_pause`)."""
    await sequential(url, n, conversations, schema=schema, paused=True)


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
        "--mode",
        choices=["sequential", "paused", "newusers", "concurrent", "both"],
        default="both",
    )
    parser.add_argument(
        "--guest-budget",
        default="unlimited",
        help="the guests' allowance: unlimited (default) or a number of tokens",
    )
    args = parser.parse_args()
    GUEST_BUDGET[0] = (
        args.guest_budget if args.guest_budget == "unlimited" else int(args.guest_budget)
    )
    both = args.mode == "both"
    with tempfile.TemporaryDirectory() as tmp:
        if args.mode == "sequential" or both:
            url = args.database_url or f"sqlite+aiosqlite:///{Path(tmp) / 'seq.db'}"
            asyncio.run(sequential(url, args.messages, args.spread))
        if args.mode == "paused" or both:
            url = args.database_url or f"sqlite+aiosqlite:///{Path(tmp) / 'paused.db'}"
            asyncio.run(paused(url, args.messages, args.spread))
        if args.mode == "newusers" or both:
            url = args.database_url or f"sqlite+aiosqlite:///{Path(tmp) / 'new.db'}"
            asyncio.run(sequential(url, args.messages, 50, new_users=True))
        if args.mode == "concurrent" or both:
            url = args.database_url or f"sqlite+aiosqlite:///{Path(tmp) / 'conc.db'}"
            asyncio.run(concurrent(url, args.conversations))
    if args.database_url is not None:
        return
    # The same on PostgreSQL when the test database is configured (as CI does).
    if not POSTGRES_URL:
        print("PostgreSQL: skipped (set SWITCHBOARD_TEST_POSTGRES_URL)")
        return
    if args.mode == "sequential" or both:
        asyncio.run(
            on_postgres(
                lambda url, schema: sequential(url, args.messages, args.spread, False, schema)
            )
        )
    if args.mode == "paused" or both:
        asyncio.run(
            on_postgres(lambda url, schema: paused(url, args.messages, args.spread, schema))
        )
    if args.mode == "newusers" or both:
        asyncio.run(
            on_postgres(lambda url, schema: sequential(url, args.messages, 50, True, schema))
        )
    if args.mode == "concurrent" or both:
        asyncio.run(on_postgres(lambda url, schema: concurrent(url, args.conversations, schema)))


if __name__ == "__main__":
    main()
