"""Front-door benchmark (`make bench`): what one message costs through the real
service. Prints figures; asserts nothing.

`switchboard run` as a subprocess with the Slack adapter over HTTP, the real
`anthropic` SDK streaming from the fake Messages API and replies posted with
slack_sdk to the fake Slack. Two modes:

Closed loop (the default): `--in-flight` workers (4), each in a DM of its own,
send a signed Events API delivery and wait until its reply reaches the fake
Slack, then send the next (the service is never offered more than it answers;
the model answers at once). Both processes run side by side; after a warm-up
each, `--rounds` windows of each in turn (the minimal bot's, then the
service's), so that a slow spell of a shared machine falls on both alike.
Prints, over all windows, messages/s, latency p50/p99 (event sent → reply
posted) and each process's CPU per message (user + system, from /proc, read
once the process is quiet: its compaction after the last reply counts), with
each round's CPU ratio. The figure to watch is CPU per message, the least
sensitive to a shared machine; the issue's targets are at most twice the
minimal bot's CPU and at least half its throughput.

Burst (`--burst N`, `tests.benchmarks.burst`): N deliveries sent at once, the
model taking 1 s per call, in N DMs and/or N threads of one channel
(`--shape`). Prints the wall time to the last reply, the first reply,
acknowledgement latency and Slack's retries; the issue's target is a wall at
most 1.5× the minimal bot's, every delivery acknowledged within 3 s.

    python -m tests.benchmarks.frontdoor [--messages 400] [--in-flight 4]
        [--rounds 4] [--database sqlite|postgres]
    python -m tests.benchmarks.frontdoor --burst 1000 [--shape dms|threads|both]
        [--database sqlite|postgres]

SQLite by default; PostgreSQL needs SWITCHBOARD_TEST_POSTGRES_URL. The floor
beside the figures is measured in the same run, the same way: a minimal bot
doing the same I/O on the same database (`tests.benchmarks.minimal_bot`: verify the signature,
dedupe insert, read the last 40 messages, stream the SDK call, store both
messages in one transaction, post) against the same fakes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import aiohttp

from tests.benchmarks.load import dm
from tests.conftest import POSTGRES_URL, TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic, last_user_text, text_reply
from tests.fakes.slack import FakeSlack, signed_headers
from tests.service_rig import Service, free_port, service_env


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


REPLY_TIMEOUT_S = 30


SPEAKER = re.compile(r"^\[[^\]]*\] ")
"""The service puts `[name] ` before a message in a channel (who is speaking)."""


def answer(text: str) -> str:
    """The fake model's answer: "re: <the message>" (without the speaker's name,
    so it reads the same from the minimal bot); a short summary when asked to
    summarise (compaction sends the transcript as one message; echoing it would
    make each summary longer than the last)."""
    if len(text) > 100:
        return "They exchanged short numbered messages."
    return f"re: {SPEAKER.sub('', text)}"


@dataclass
class Window:
    """One closed-loop window of one process: what it answered, in how long,
    for how much of its CPU (its work after the last reply included)."""

    latencies: list[float]
    elapsed: float
    cpu: float
    llm_calls: int

    @property
    def cpu_ms(self) -> float:
        """CPU per message answered"""
        return self.cpu / len(self.latencies) * 1000


@dataclass
class Figures:
    messages: int
    rate: float
    """messages/s"""
    p50_ms: float
    p99_ms: float
    cpu_ms: float
    """the process's CPU per message"""
    llm_calls: float
    """model requests per message (the service's include compaction's)"""

    @classmethod
    def of(cls, windows: list[Window]) -> Figures:
        latencies = sorted(t for w in windows for t in w.latencies)
        done = len(latencies)
        return cls(
            done,
            done / sum(w.elapsed for w in windows),
            statistics.median(latencies) * 1000,
            latencies[max(0, int(done * 0.99) - 1)] * 1000,
            sum(w.cpu for w in windows) / done * 1000,
            sum(w.llm_calls for w in windows) / done,
        )


async def worker(
    http: aiohttp.ClientSession,
    url: str,
    slack: FakeSlack,
    channel: str,
    count: int,
    start: int,
    latencies: list[float],
) -> None:
    for n in range(start, start + count):
        text = f"{channel}-m{n}"
        raw = json.dumps(dm(channel, text, f"{1_700_000_000 + n}.{n % 1_000_000:06d}"))
        headers = {"Content-Type": "application/json", **signed_headers(raw)}
        sent = time.perf_counter()
        async with http.post(url, data=raw.encode(), headers=headers) as response:
            assert response.status == 200, response.status
        want = f"re: {text}"
        deadline = time.perf_counter() + REPLY_TIMEOUT_S
        while not any(m.get("text") == want for m in slack.messages[-64:]):
            if time.perf_counter() > deadline:
                raise TimeoutError(f"no reply to {text!r} within {REPLY_TIMEOUT_S} s")
            await asyncio.sleep(0.001)
        latencies.append(time.perf_counter() - sent)


MINIMAL_BOT = "tests.benchmarks.minimal_bot"
T = TypeVar("T")


@dataclass
class Rig:
    """The fakes and the database the minimal bot and the service run against."""

    model: FakeAnthropic
    slack: FakeSlack
    db: Database
    tmp: Path
    model_delay: float = 0.0
    """Seconds the fake model waits before each answer."""

    def process(self, module: str = "bot") -> Service:
        """The service (`bot`), or the minimal bot (`MINIMAL_BOT`), not started."""
        port = free_port()
        env = service_env(
            self.db,
            self.model,
            self.slack,
            port,
            SWITCHBOARD__LOGGING__LEVEL="WARNING",
            SWITCHBOARD__INBOX__LEASE_SECONDS="20",  # the defaults, not the tests'
            SWITCHBOARD__INBOX__SWEEP_SECONDS="5",
            MINIMAL_BOT_DB=str(self.tmp / "minimal.db"),
        )
        ready = "/readyz" if module == "bot" else "/healthz"  # the minimal bot: no /readyz
        return Service(env, self.tmp, port, module=module, ready_path=ready)


@contextlib.asynccontextmanager
async def rig(database: str) -> AsyncIterator[Rig]:
    if database == "postgres":
        assert POSTGRES_URL, "set SWITCHBOARD_TEST_POSTGRES_URL"
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(database, Path(tmp))
        await db.create()
        try:
            async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
                fakes = Rig(model, slack, db, Path(tmp))
                model.responder = lambda body: text_reply(
                    answer(last_user_text(body)), delay=fakes.model_delay
                )
                yield fakes
        finally:
            await db.drop()


async def run(messages: int, in_flight: int, database: str, rounds: int) -> None:
    """Both processes started, then `rounds` pairs of windows in turn (the
    minimal bot's, then the service's), so that a machine's slow spell falls
    on both alike; the figures are over all windows, with each pair's CPU
    ratio beside them."""
    async with rig(database) as fakes:
        fixtures = (fakes.model, fakes.slack)
        floor, ours = fakes.process(MINIMAL_BOT), fakes.process()
        loops = [Loop(floor, fixtures, in_flight, "F"), Loop(ours, fixtures, in_flight, "S")]
        try:
            for loop in loops:
                await loop.process.start()
            for loop in loops:
                await loop.window(max(5, messages // in_flight // 10))  # warm-up
            per_dm = max(1, messages // rounds // in_flight)
            pairs = [[await loop.window(per_dm) for loop in loops] for _ in range(rounds)]
        except TimeoutError:
            for loop in loops:
                print(loop.process.log_text)
            raise
        finally:
            for loop in loops:
                await loop.process.stop()
    report(
        Figures.of([ours for _, ours in pairs]),
        Figures.of([floor for floor, _ in pairs]),
        [o.cpu_ms / f.cpu_ms for f, o in pairs],
        in_flight,
        database,
    )


async def measured(process: Service, work: Callable[[Service], Awaitable[T]]) -> T:
    """`work(process)` between its start and stop; its log is printed on a timeout."""
    await process.start()
    try:
        return await work(process)
    except TimeoutError:
        print(process.log_text)
        raise
    finally:
        await process.stop()


class Loop:
    """Closed-loop traffic for one process: `in_flight` DMs, each sending its
    next message once the reply to the last one was posted."""

    def __init__(
        self,
        process: Service,
        fakes: tuple[FakeAnthropic, FakeSlack],
        in_flight: int,
        tag: str,
    ) -> None:
        self.process = process
        self.model, self.slack = fakes
        self.in_flight = in_flight
        self.tag = tag
        self.sent = 0
        """messages sent so far in each DM"""

    async def window(self, per_dm: int) -> Window:
        """`per_dm` messages in each DM; CPU read once the process is quiet
        (its compaction after the last reply counted)."""
        proc = self.process.proc
        assert proc is not None
        url = self.process.url + "/slack/events"
        latencies: list[float] = []
        cpu_before = cpu_seconds(proc.pid)
        calls_before = self.model.request_count
        async with aiohttp.ClientSession() as http:
            started = time.perf_counter()
            await asyncio.gather(
                *(
                    worker(
                        http,
                        url,
                        self.slack,
                        f"D{self.tag}{w}",
                        per_dm,
                        w * 1_000_000 + self.sent,
                        latencies,
                    )
                    for w in range(self.in_flight)
                )
            )
            elapsed = time.perf_counter() - started
        self.sent += per_dm
        await settle(self.model, quiet=0.3)
        return Window(
            latencies,
            elapsed,
            cpu_seconds(proc.pid) - cpu_before,
            self.model.request_count - calls_before,
        )


async def settle(model: FakeAnthropic, quiet: float = 1.0) -> None:
    """Wait until the model has had no new request for `quiet` seconds (work
    a process does after its replies, e.g. compaction, ends before the next)."""
    count = -1
    while count != model.request_count:
        count = model.request_count
        await asyncio.sleep(quiet)


def report(
    ours: Figures, floor: Figures, ratios: list[float], in_flight: int, database: str
) -> None:
    print(
        f"front door: {ours.messages} Slack DMs, {in_flight} in flight, {database}, "
        f"instant model, {len(ratios)} rounds; beside each figure the minimal bot's "
        "(same I/O, same fakes)"
    )
    print(f"  LLM calls/msg   {ours.llm_calls:8.2f}   (minimal bot {floor.llm_calls:.2f})")
    print(f"  messages/s      {ours.rate:8.1f}   (minimal bot {floor.rate:.1f})")
    print(
        f"  p50 / p99       {ours.p50_ms:8.1f} / {ours.p99_ms:.1f} ms   "
        f"(minimal bot {floor.p50_ms:.1f} / {floor.p99_ms:.1f} ms)"
    )
    print(
        f"  process CPU     {ours.cpu_ms:8.1f} ms/message   (minimal bot {floor.cpu_ms:.1f} ms: "
        f"{ours.cpu_ms / floor.cpu_ms:.2f}×; target ≤ 2×)"
    )
    print(f"  CPU ratio per round   {', '.join(f'{r:.2f}×' for r in ratios)}")
    print(f"  throughput ratio {ours.rate / floor.rate:8.2f}×   (target ≥ 0.5×)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument(
        "--rounds", type=int, default=4, help="closed loop: windows of each process, in turn"
    )
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--burst", type=int, metavar="N", help="N conversations at once, 1 s model (burst.py)"
    )
    parser.add_argument("--shape", choices=["dms", "threads", "both"], default="both")
    args = parser.parse_args()
    if args.burst:
        from tests.benchmarks import burst  # it imports this module

        shapes = list(burst.SHAPES) if args.shape == "both" else [args.shape]
        asyncio.run(burst.run(args.burst, shapes, args.database))
    else:
        asyncio.run(run(args.messages, args.in_flight, args.database, args.rounds))


if __name__ == "__main__":
    main()
