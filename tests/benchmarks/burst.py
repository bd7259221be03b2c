"""Burst mode of the front-door benchmark (`frontdoor --burst N`): N
conversations arrive at once and the model takes 1 s per call (the fake
answers each request, streamed or not, after `MODEL_S`).

For the minimal bot, then the service (each started once and warmed up by the
closed loop's workers: 4 DMs of 5 messages, instant model): per shape, N
signed Events API deliveries sent all together (`load.deliver`: retried like
Slack when not answered 200 within 3 s), then a wait until every reply is
finished on the fake Slack (its whole text there, a native stream stopped).
Shapes: `dms`, each message in a DM of its own; `threads`, N top-level
messages @mentioning the bot in one public channel, each answered in a thread
of its own. The fakes and the senders share this process's event loop, so
acknowledgement latencies include its own delays under the burst.

Figures per shape, the service beside the minimal bot: wall (first send → last
reply), first reply, acknowledgement latency max / p99 (of the answered
attempts), deliveries retried, model calls per message, process CPU, and the
ratio of the walls (the issue's target: at most 1.5×).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import aiohttp

from tests.benchmarks.frontdoor import (
    MINIMAL_BOT,
    Rig,
    answer,
    cpu_seconds,
    measured,
    rig,
    settle,
    worker,
)
from tests.benchmarks.load import deliver, dm
from tests.fakes.slack import BOT_USER_ID, FakeSlack, event_body
from tests.service_rig import Service

MODEL_S = 1.0
"""Seconds the fake model takes per call during a burst."""
SHAPES = ("dms", "threads")
WARM_UP = 4
"""Closed-loop DMs (5 messages each, instant model) before the bursts."""


def reply_timeout(n: int) -> float:
    return 60 + n * 0.3


@dataclass
class Burst:
    wall: float
    """seconds from the first send to the last reply"""
    first: float
    """seconds from the first send to the first reply"""
    ack_max_ms: float
    ack_p99_ms: float
    retried: int
    """deliveries not acknowledged 200 at the first attempt"""
    unacked: int
    """deliveries never acknowledged (after Slack's 3 retries)"""
    llm_calls: float
    """model requests per message"""
    cpu_s: float
    """the process's CPU over the burst"""
    slack_calls: dict[str, float]
    """Web API calls per message, by method"""


Key = tuple[str, str | None]
"""Where a reply goes: (channel, thread ts or None)."""


def mention(channel: str, user: str, text: str, ts: str) -> dict[str, object]:
    """A top-level message in a public channel, @mentioning the bot."""
    return event_body(
        {
            "type": "message",
            "channel": channel,
            "channel_type": "channel",
            "user": user,
            "text": f"<@{BOT_USER_ID}> {text}",
            "ts": ts,
            "event_ts": ts,
        }
    )


def events(shape: str, n: int, tag: str) -> Iterator[tuple[dict[str, object], Key, str]]:
    """The burst's deliveries, each with where its reply goes and its text."""
    for i in range(n):
        ts = f"{1_700_100_000 + i}.{i:06d}"
        text = f"{tag}{shape[0]}{i}"
        if shape == "dms":
            channel = f"D{tag}B{i}"
            yield dm(channel, text, ts), (channel, None), answer(text)
        else:
            channel = f"C{tag}BURST"
            yield mention(channel, f"U{tag}T{i}", text, ts), (channel, ts), answer(text)


async def replies(slack: FakeSlack, want: dict[Key, str], since: int, within: float) -> list[float]:
    """perf_counter times at which each wanted reply was finished on the fake
    Slack (messages from index `since` on)."""
    pending = dict(want)
    arrived: list[float] = []
    deadline = time.perf_counter() + within
    while pending:
        for message in slack.messages[since:]:
            key = (message["channel"], message.get("thread_ts"))
            if pending.get(key) == message.get("text") and not message.get("streaming"):
                del pending[key]
                arrived.append(time.perf_counter())
        if time.perf_counter() > deadline:
            missing = f"{len(pending)} of {len(want)} replies (e.g. {next(iter(pending))})"
            raise TimeoutError(f"{missing} not finished after {within:.0f} s")
        await asyncio.sleep(0.005)
    return arrived


async def burst(process: Service, fakes: Rig, shape: str, n: int, tag: str) -> Burst:
    assert process.proc is not None
    batch = list(events(shape, n, tag))
    want = {key: text for _, key, text in batch}
    assert len(want) == n
    url = process.url + "/slack/events"
    acks: list[float] = []
    calls_before = fakes.model.request_count
    slack_before = len(fakes.slack.calls)
    cpu_before = cpu_seconds(process.proc.pid)
    since = len(fakes.slack.messages)
    fakes.model_delay = MODEL_S
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            started = time.perf_counter()
            sends = asyncio.gather(*(deliver(http, url, body, acks) for body, _, _ in batch))
            try:
                arrived = await replies(fakes.slack, want, since, reply_timeout(n))
            except BaseException:
                sends.cancel()
                raise
            attempts = await sends
    finally:
        fakes.model_delay = 0.0
    cpu = cpu_seconds(process.proc.pid) - cpu_before
    acks.sort()
    return Burst(
        wall=max(arrived) - started,
        first=min(arrived) - started,
        ack_max_ms=acks[-1] * 1000 if acks else float("nan"),
        ack_p99_ms=acks[max(0, int(len(acks) * 0.99) - 1)] * 1000 if acks else float("nan"),
        retried=sum(1 for a in attempts if a != 1),
        unacked=sum(1 for a in attempts if a == 0),
        llm_calls=(fakes.model.request_count - calls_before) / n,
        cpu_s=cpu,
        slack_calls={
            method: count / n
            for method, count in Counter(
                call.method for call in fakes.slack.calls[slack_before:]
            ).most_common()
        },
    )


async def bursts(process: Service, fakes: Rig, shapes: list[str], n: int, tag: str) -> list[Burst]:
    """Warm `process` up, then one burst per shape."""
    url = process.url + "/slack/events"
    async with aiohttp.ClientSession() as http:
        ignored: list[float] = []
        await asyncio.gather(
            *(
                worker(http, url, fakes.slack, f"D{tag}W{w}", 5, w * 1_000_000, ignored)
                for w in range(WARM_UP)
            )
        )
    results = []
    for shape in shapes:
        await settle(fakes.model)
        results.append(await burst(process, fakes, shape, n, tag))
    return results


async def run(n: int, shapes: list[str], database: str) -> None:
    async with rig(database) as fakes:
        floor = await measured(
            fakes.process(MINIMAL_BOT), lambda p: bursts(p, fakes, shapes, n, "F")
        )
        ours = await measured(fakes.process(), lambda p: bursts(p, fakes, shapes, n, "S"))
    print(
        f"burst: {n} conversations at once, {MODEL_S:g} s model, {database}; "
        "beside each figure the minimal bot's (same I/O, same fakes)"
    )
    for shape, mine, base in zip(shapes, ours, floor, strict=True):
        report(shape, n, mine, base)


def report(shape: str, n: int, ours: Burst, floor: Burst) -> None:
    where = f"{n} DMs" if shape == "dms" else f"{n} threads of one channel"
    print(f"  {where}")
    print(
        f"    wall            {ours.wall:8.2f} s   (minimal bot {floor.wall:.2f} s: "
        f"{ours.wall / floor.wall:.2f}×; target ≤ 1.5×)"
    )
    print(f"    first reply     {ours.first:8.2f} s   (minimal bot {floor.first:.2f} s)")
    print(
        f"    ack max / p99   {ours.ack_max_ms:8.1f} / {ours.ack_p99_ms:.1f} ms   "
        f"(minimal bot {floor.ack_max_ms:.1f} / {floor.ack_p99_ms:.1f} ms; target < 3000 ms)"
    )
    print(
        f"    retried         {ours.retried:8d}   (minimal bot {floor.retried}; "
        "not acknowledged within 3 s; target 0)"
    )
    if ours.unacked or floor.unacked:
        print(f"    never acked     {ours.unacked:8d}   (minimal bot {floor.unacked})")
    print(f"    LLM calls/msg   {ours.llm_calls:8.2f}   (minimal bot {floor.llm_calls:.2f})")
    print(f"    process CPU     {ours.cpu_s:8.2f} s   (minimal bot {floor.cpu_s:.2f} s)")
    print(
        f"    Slack calls/msg {sum(ours.slack_calls.values()):8.2f}   "
        f"({calls(ours)}; minimal bot {calls(floor)})"
    )


def calls(burst: Burst) -> str:
    return ", ".join(f"{method} {per:.2f}" for method, per in burst.slack_calls.items())
