"""Front-door benchmark (`make bench`): what one message costs through the real
service. Prints figures; asserts nothing.

`switchboard run` as a subprocess with the Slack adapter over HTTP, the real
`anthropic` SDK streaming from the fake Messages API and replies posted with
slack_sdk to the fake Slack. Two modes:

Closed loop (the default): `--in-flight` workers (4), each in a DM of its own,
send a signed Events API delivery and wait until its reply reaches the fake
Slack, then send the next (the service is never offered more than it answers;
the model answers at once). After a warm-up, prints messages/s, latency
p50/p99 (event sent → reply posted) and the service process's CPU per message
(user + system, from /proc). The figure to watch is CPU per message, the least
sensitive to a shared machine; the issue's target is at most twice the minimal
bot's.

Burst (`--burst N`, `tests.benchmarks.burst`): N deliveries sent at once, the
model taking 1 s per call, in N DMs and/or N threads of one channel
(`--shape`). Prints the wall time to the last reply, the first reply,
acknowledgement latency and Slack's retries; the issue's target is a wall at
most 1.5× the minimal bot's, every delivery acknowledged within 3 s.

    python -m tests.benchmarks.frontdoor [--messages 400] [--in-flight 4]
        [--database sqlite|postgres]
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
        return Service(env, self.tmp, port, module=module)


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


async def run(messages: int, in_flight: int, database: str) -> None:
    async with rig(database) as fakes:
        fixtures = (fakes.model, fakes.slack)
        floor = await measured(
            fakes.process(MINIMAL_BOT),
            lambda p: measure(p, fixtures, messages, in_flight, "F"),
        )
        ours = await measured(
            fakes.process(), lambda p: measure(p, fixtures, messages, in_flight, "S")
        )
    report(ours, floor, in_flight, database)


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


async def measure(
    process: Service,
    fakes: tuple[FakeAnthropic, FakeSlack],
    messages: int,
    in_flight: int,
    tag: str,
) -> Figures:
    """Closed loop: `in_flight` DMs, each sending its next message once the
    reply to the last one was posted; a warm-up first."""
    assert process.proc is not None
    model, slack = fakes
    url = process.url + "/slack/events"
    per_worker = max(1, messages // in_flight)
    warm = max(5, per_worker // 10)
    async with aiohttp.ClientSession() as http:
        ignored: list[float] = []
        await asyncio.gather(
            *(
                worker(http, url, slack, f"D{tag}{w}", warm, w * 1_000_000, ignored)
                for w in range(in_flight)
            )
        )
        latencies: list[float] = []
        cpu_before = cpu_seconds(process.proc.pid)
        calls_before = model.request_count
        started = time.perf_counter()
        await asyncio.gather(
            *(
                worker(http, url, slack, f"D{tag}{w}", per_worker, w * 1_000_000 + warm, latencies)
                for w in range(in_flight)
            )
        )
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(process.proc.pid) - cpu_before
        calls = model.request_count - calls_before
    done = len(latencies)
    latencies.sort()
    return Figures(
        done,
        done / elapsed,
        statistics.median(latencies) * 1000,
        latencies[max(0, int(done * 0.99) - 1)] * 1000,
        cpu / done * 1000,
        calls / done,
    )


def report(ours: Figures, floor: Figures, in_flight: int, database: str) -> None:
    print(
        f"front door: {ours.messages} Slack DMs, {in_flight} in flight, {database}, "
        "instant model; beside each figure the minimal bot's (same I/O, same fakes)"
    )
    print(f"  LLM calls/msg   {ours.llm_calls:8.2f}   (minimal bot {floor.llm_calls:.2f})")
    print(f"  messages/s      {ours.rate:8.1f}   (minimal bot {floor.rate:.1f})")
    print(
        f"  p50 / p99       {ours.p50_ms:8.1f} / {ours.p99_ms:.1f} ms   "
        f"(minimal bot {floor.p50_ms:.1f} / {floor.p99_ms:.1f} ms)"
    )
    print(
        f"  process CPU     {ours.cpu_ms:8.1f} ms/message   (minimal bot {floor.cpu_ms:.1f} ms: "
        f"{ours.cpu_ms / floor.cpu_ms:.1f}×; target ≤ 2×)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--in-flight", type=int, default=4)
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
        asyncio.run(run(args.messages, args.in_flight, args.database))


if __name__ == "__main__":
    main()
