"""Front-door benchmark (`make bench`): what one message costs through the real
service. Prints figures; asserts nothing.

`switchboard run` as a subprocess with the Slack adapter over HTTP, the real
`anthropic` SDK streaming from the fake Messages API (instant answers) and
replies posted with slack_sdk to the fake Slack. `--in-flight` workers (4),
each in a DM of its own, send a signed Events API delivery and wait until its
reply reaches the fake Slack, then send the next (a closed loop: the service
is never offered more than it answers). After a warm-up, prints messages/s,
latency p50/p99 (event sent → reply posted) and the service process's CPU per
message (user + system, from /proc), on SQLite by default or PostgreSQL.

    python -m tests.benchmarks.frontdoor [--messages 400] [--in-flight 4]
        [--database sqlite|postgres]

The floor beside the figures is what the issue measured for a minimal bot doing
the same I/O on this kind of machine (~6 ms of CPU and ~150 messages/s); the
figure to watch is CPU per message, the least sensitive to a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from tests.benchmarks.load import dm
from tests.conftest import POSTGRES_URL, TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic, last_user_text, text_reply
from tests.fakes.slack import FakeSlack, signed_headers
from tests.service_rig import Service, free_port, service_env

FLOOR_CPU_MS = 6.0
FLOOR_RATE = 150.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


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
        text = f"m{n}"
        raw = json.dumps(dm(channel, text, f"{1_700_000_000 + n}.{n % 1_000_000:06d}"))
        headers = {"Content-Type": "application/json", **signed_headers(raw)}
        sent = time.perf_counter()
        async with http.post(url, data=raw.encode(), headers=headers) as response:
            assert response.status == 200, response.status
        want = f"re: {text}"
        while not any(m.get("text") == want for m in slack.messages[-64:]):  # noqa: ASYNC110
            await asyncio.sleep(0.001)
        latencies.append(time.perf_counter() - sent)


async def run(messages: int, in_flight: int, database: str) -> None:
    if database == "postgres":
        assert POSTGRES_URL, "set SWITCHBOARD_TEST_POSTGRES_URL"
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(database, Path(tmp))
        await db.create()
        try:
            async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
                model.responder = lambda body: text_reply(f"re: {last_user_text(body)}")
                port = free_port()
                env = service_env(
                    db,
                    model,
                    slack,
                    port,
                    SWITCHBOARD__LOGGING__LEVEL="WARNING",
                    SWITCHBOARD__INBOX__LEASE_SECONDS="20",  # the defaults, not the tests'
                    SWITCHBOARD__INBOX__SWEEP_SECONDS="5",
                )
                service = Service(env, Path(tmp), port)
                await service.start()
                try:
                    await measure(service, slack, messages, in_flight, database)
                finally:
                    await service.stop()
        finally:
            await db.drop()


async def measure(
    service: Service, slack: FakeSlack, messages: int, in_flight: int, database: str
) -> None:
    assert service.proc is not None
    url = service.url + "/slack/events"
    per_worker = max(1, messages // in_flight)
    warm = max(5, per_worker // 10)
    async with aiohttp.ClientSession() as http:
        ignored: list[float] = []
        await asyncio.gather(
            *(
                worker(http, url, slack, f"D{w}", warm, w * 1_000_000, ignored)
                for w in range(in_flight)
            )
        )
        latencies: list[float] = []
        cpu_before = cpu_seconds(service.proc.pid)
        started = time.perf_counter()
        await asyncio.gather(
            *(
                worker(http, url, slack, f"D{w}", per_worker, w * 1_000_000 + warm, latencies)
                for w in range(in_flight)
            )
        )
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(service.proc.pid) - cpu_before
    done = len(latencies)
    latencies.sort()
    print(
        f"front door: {done} Slack DMs, {in_flight} in flight, {database}, instant model "
        f"(after {warm * in_flight} warm-up messages)"
    )
    print(f"  messages/s      {done / elapsed:8.1f}   (floor: a minimal bot, ~{FLOOR_RATE:.0f})")
    print(
        f"  p50 / p99       {statistics.median(latencies) * 1000:8.1f} / "
        f"{latencies[max(0, int(done * 0.99) - 1)] * 1000:.1f} ms"
    )
    print(
        f"  service CPU     {cpu / done * 1000:8.1f} ms/message   "
        f"(floor: a minimal bot, ~{FLOOR_CPU_MS:.0f} ms; target: ≤ 2×)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    asyncio.run(run(args.messages, args.in_flight, args.database))


if __name__ == "__main__":
    main()
