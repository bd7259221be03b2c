"""Load benchmark (`make bench`): signed Slack events at a fixed rate against one
real `switchboard run` on PostgreSQL, the fake Slack and an instant fake model.
Prints figures; asserts nothing.

Slack's side sends each event on schedule (N per second for S seconds, each in a
DM of its own by default, so no two are answered together) and, like Slack,
retries an event that is not answered 200 within 3 s (up to 3 retries). A
poller asks `/healthz` every 100 ms. After the load, it waits for every
accepted message to be answered.

    SWITCHBOARD_TEST_POSTGRES_URL=postgresql+asyncpg://... \
        python -m tests.benchmarks.load [--rate 200] [--seconds 30] [--channels 200]

Floor beside the figures: nothing lost, `/healthz` under 1 s, acknowledgements
under Slack's 3 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from tests.conftest import POSTGRES_URL, TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic, last_user_text, text_reply
from tests.fakes.slack import FakeSlack, event_body, signed_headers
from tests.service_rig import Service, free_port, service_env


def dm(channel: str, text: str, ts: str) -> dict[str, object]:
    return event_body(
        {
            "type": "message",
            "channel": channel,
            "channel_type": "im",
            "user": f"U{channel}",
            "text": text,
            "ts": ts,
            "event_ts": ts,
        }
    )


async def deliver(
    http: aiohttp.ClientSession, url: str, body: dict[str, object], acks: list[float]
) -> int:
    """Deliver `body` as Slack does: signed, retried (`X-Slack-Retry-Num`) when not
    answered 200 within 3 s, up to 3 times. Appends the answered attempt's latency
    to `acks`; returns the attempts it took (0: never acknowledged)."""
    raw = json.dumps(body)
    for attempt in range(4):
        headers = {"Content-Type": "application/json", **signed_headers(raw)}
        if attempt:
            headers["X-Slack-Retry-Num"] = str(attempt)
        started = time.perf_counter()
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            async with http.post(
                url, data=raw.encode(), headers=headers, timeout=aiohttp.ClientTimeout(total=3)
            ) as response:
                if response.status == 200:
                    acks.append(time.perf_counter() - started)
                    return attempt + 1
        await asyncio.sleep(1.0)
    return 0


async def health(url: str, stop: asyncio.Event, times: list[float], failures: list[int]) -> None:
    async with aiohttp.ClientSession() as http:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                async with http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as response:
                    if response.status != 200:
                        failures.append(response.status)
            except (aiohttp.ClientError, TimeoutError):
                failures.append(0)
            times.append(time.perf_counter() - started)
            await asyncio.sleep(0.1)


async def run(
    rate: int, seconds: int, channels: int, drain: float, log: Path | None = None
) -> None:
    assert POSTGRES_URL, "set SWITCHBOARD_TEST_POSTGRES_URL"
    with tempfile.TemporaryDirectory() as tmp:
        db = Database("postgres", Path(tmp))
        await db.create()
        try:
            async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
                model.responder = lambda body: text_reply(f"re: {last_user_text(body)}")
                port = free_port()
                level = "INFO" if log else "WARNING"
                env = service_env(
                    db,
                    model,
                    slack,
                    port,
                    SWITCHBOARD__LOGGING__LEVEL=level,
                    SWITCHBOARD__INBOX__LEASE_SECONDS="20",  # the defaults, not the tests'
                    SWITCHBOARD__INBOX__SWEEP_SECONDS="5",
                )
                service = Service(env, Path(tmp), port)
                await service.start()
                try:
                    await measure(service, slack, rate, seconds, channels, drain)
                finally:
                    await service.stop()
                    if log:
                        await asyncio.to_thread(log.write_text, "\n".join(service.logs))
        finally:
            await db.drop()


async def measure(
    service: Service, slack: FakeSlack, rate: int, seconds: int, channels: int, drain: float
):
    total = rate * seconds
    acks: list[float] = []
    health_times: list[float] = []
    health_failures: list[int] = []
    stop = asyncio.Event()
    poller = asyncio.create_task(
        health(service.url + "/healthz", stop, health_times, health_failures)
    )
    connector = aiohttp.TCPConnector(limit=1000)
    async with aiohttp.ClientSession(connector=connector) as http:
        url = service.url + "/slack/events"
        started = time.perf_counter()
        sends = []
        for i in range(total):
            due = started + i / rate
            if (delay := due - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            channel = f"D{i % channels}"
            body = dm(channel, f"m{i}", f"{1_700_000_000 + i}.{i % 1_000_000:06d}")
            sends.append(asyncio.create_task(deliver(http, url, body, acks)))
        accepted = sum(1 for attempts in await asyncio.gather(*sends) if attempts)
        load_done = time.perf_counter()
        deadline = load_done + drain
        while len(slack.messages) < accepted and time.perf_counter() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.5)
        drained = time.perf_counter()
    stop.set()
    await poller
    answered = len({m["text"] for m in slack.messages})
    acks.sort()
    print(f"load: {rate}/s for {seconds} s over {channels} DMs = {total} Slack events, PostgreSQL")
    print(f"  accepted (200)   {accepted:8d}   of {total}  (floor: all)")
    waited = "" if answered >= accepted else f" (gave up waiting after {drain:.0f} s)"
    print(
        f"  answered         {answered:8d}   unanswered {accepted - answered}{waited}"
        "  (floor: 0 unanswered)"
    )
    print(
        f"  ack p50 / p99    {statistics.median(acks) * 1000:8.1f} / "
        f"{acks[int(len(acks) * 0.99) - 1] * 1000:.1f} ms  (floor: < 3000 ms)"
    )
    print(
        f"  healthz max      {max(health_times) * 1000:8.1f} ms, "
        f"{len(health_failures)} failed of {len(health_times)}  (floor: < 1000 ms, 0 failed)"
    )
    if health_failures:
        print(f"  healthz failures  {sorted(set(health_failures))} (0 = no answer within 5 s)")
    print(
        f"  all answered     {drained - load_done:8.1f} s after the load ended "
        f"({answered / (drained - started):.1f} answers/s overall)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument(
        "--channels", type=int, default=0, help="DMs to spread over (default: one per message)"
    )
    parser.add_argument(
        "--drain", type=float, default=600, help="seconds to wait for the last answers"
    )
    parser.add_argument("--log", type=Path, help="write the service's log (INFO) here")
    args = parser.parse_args()
    if not os.environ.get("SWITCHBOARD_TEST_POSTGRES_URL"):
        print("load: skipped (set SWITCHBOARD_TEST_POSTGRES_URL to a PostgreSQL database)")
        return
    channels = args.channels or args.rate * args.seconds
    asyncio.run(run(args.rate, args.seconds, channels, args.drain, args.log))


if __name__ == "__main__":
    main()
