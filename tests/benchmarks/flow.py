"""Flow benchmark (`make bench`): bursts, fairness, event-loop lag, the cached
prefix. Prints figures; asserts nothing.

- burst: C messages at once through the real pipeline (SQLite file), each in a
  DM of its own, then C threads of one channel; the model sleeps 1 s per call.
  Prints the wall time, when the first reply went out, how many calls were with
  the model at once, how far the order in which messages reached the model is
  from their arrival order (share of pairs out of order), and the event loop's
  lag meanwhile (max and p99 of how late a 5 ms timer fires).
- scheduler: J jobs in the table; the loop lag while the scheduler registers
  them at start and while a periodic sync runs.
- first: the first two messages after a start, through the real SDK against
  the fake Messages API (each side in a fresh interpreter: nothing of the SDK
  built before), with the startup's warm-up (`bot.llm.warm_up`) and without
  it: how long each took and the event loop's lag meanwhile.
- prompt: a one-line "hi" on a fresh conversation through the real SDK against
  the fake Messages API with prompt caching simulated: prompt tokens, and the
  share read from the cache for a second user's first "hi" (another
  conversation of the same persona).

    python -m tests.benchmarks.flow [--conversations 1000] [--jobs 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.app import App
from bot.config import Secrets, Settings
from bot.llm.types import LLMRequest, LLMResponse, TextBlock
from bot.ports import TextCallback, ToolContext
from bot.scheduling.parse import parse_when
from bot.types import IncomingMessage, Reply, Target, Usage
from tests.benchmarks.pipeline import canned_answer
from tests.fakes.anthropic import FakeAnthropic, text_reply

try:
    from bot.cli.run import settle_heap
except ImportError:  # an older tree, for before/after figures
    settle_heap = None  # type: ignore[assignment]

KEY = "sk-ant-bench"
NUMBER = re.compile(r"message number (\d+)")


class LagMeter:
    """How late a short timer fires, sampled continuously while running."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.samples: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(self.interval)
            self.samples.append(max(0.0, loop.time() - started - self.interval))

    def __enter__(self) -> LagMeter:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()

    def figures(self) -> str:
        if not self.samples:
            return "no samples"
        ordered = sorted(self.samples)
        p99 = ordered[max(0, int(len(ordered) * 0.99) - 1)]
        return f"max {ordered[-1] * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"


@dataclass
class SlowProvider:
    delay: float = 1.0
    started: float = 0.0
    order: list[int] = field(default_factory=list)
    first_call: float | None = None
    in_flight: int = 0
    peak: int = 0

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse:
        if self.first_call is None:
            self.first_call = time.perf_counter() - self.started
        last = request.messages[-1].content if request.messages else ()
        text = " ".join(b.text for b in last if isinstance(b, TextBlock))
        if found := NUMBER.search(text):
            self.order.append(int(found.group(1)))
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        return canned_answer(request.model)

    async def aclose(self) -> None:
        return None


class TimedAdapter:
    platform = "bench"

    def __init__(self) -> None:
        self.started = 0.0
        self.first: float | None = None
        self.sent = 0

    async def start(self, core: object) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, reply: Reply, progress: object = None) -> list[str]:
        if self.first is None:
            self.first = time.perf_counter() - self.started
        self.sent += 1
        return []

    async def show_typing(self, target: Target) -> None: ...


def settings(url: str, **sections: Any) -> Settings:
    return Settings.model_validate(
        {
            "database": {"url": url},
            "budgets": {"guest": "unlimited"},
            "logging": {"level": "WARNING"},
            **sections,
        }
    )


def inversions(order: list[int]) -> float:
    """Share of pairs reaching the model in the opposite order of their arrival."""
    n = len(order)
    if n < 2:
        return 0.0
    out = sum(1 for i in range(n) for j in range(i + 1, n) if order[i] > order[j])
    return out / (n * (n - 1) / 2)


async def burst(url: str, conversations: int, one_channel: bool) -> None:
    provider = SlowProvider()
    app = App(settings(url), Secrets(), provider=provider)
    await app.open()
    adapter = TimedAdapter()
    app.attach(adapter)
    if settle_heap is not None:  # as `switchboard run` does after startup
        settle_heap(collect=True)

    def message(i: int) -> IncomingMessage:
        if one_channel:
            return IncomingMessage(
                platform="bench", platform_user_id=f"u{i}", platform_channel_id="C1",
                platform_thread_id=f"t{i}", chat_type="group", mentions_bot=True,
                text=f"message number {i}", event_id=f"burst-c-{i}",
            )  # fmt: skip
        return IncomingMessage(
            platform="bench", platform_user_id=f"u{i}", platform_channel_id=f"D{i}",
            text=f"message number {i}", event_id=f"burst-d-{i}",
        )  # fmt: skip

    with LagMeter() as lag:
        started = provider.started = adapter.started = time.perf_counter()
        tasks = []
        for i in range(conversations):  # in arrival order
            tasks.append(asyncio.create_task(app.pipeline.handle(message(i))))
        outcomes = await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - started
    await app.close()
    answered = sum(o.status == "answered" for o in outcomes)
    where = "threads of one channel" if one_channel else "DMs"
    print(f"burst: {conversations} messages at once in {conversations} {where}, model 1 s")
    print(f"  wall time          {elapsed:8.2f} s  ({answered} answered, {adapter.sent} sent)")
    first_call = provider.first_call or 0.0
    print(f"  first model call   {first_call:8.2f} s;  first reply {adapter.first or 0.0:.2f} s")
    print(f"  model calls at once {provider.peak:7d}")
    print(f"  out of order       {inversions(provider.order):8.1%} of pairs (FIFO: 0%)")
    print(f"  loop lag           {lag.figures()}")


async def scheduler(url: str, jobs: int) -> None:
    app = App(settings(url, scheduler={"sync_seconds": 3600}), Secrets(), provider=SlowProvider())
    await app.open()
    adapter = TimedAdapter()
    app.attach(adapter)
    msg = IncomingMessage(platform="bench", platform_user_id="owner", platform_channel_id="D0",
                          text="-")  # fmt: skip
    s = app.pipeline.s
    user = await s.identity.resolve(msg)
    conversation = await s.conversations.resolve(msg)
    ctx = ToolContext(
        user_id=user.id, role=user.role, conversation_id=conversation.id,
        conversation_key=conversation.key, platform="bench", run_id="bench", chat_type="direct",
    )  # fmt: skip
    now = app.scheduler.clock()
    for i in range(jobs):
        spec = parse_when(f"every {60 + i % 600} minutes", timezone="UTC", now=now)
        await app.scheduler.jobs.create(
            owner_user_id=ctx.user_id, conversation_id=ctx.conversation_id,
            chat_type="direct", prompt=f"job {i}", spec=spec, now=now,
        )  # fmt: skip
    with LagMeter() as at_start:
        t0 = time.perf_counter()
        await app.start_scheduler(["bench"])
        start_s = time.perf_counter() - t0
        await asyncio.sleep(0.05)
    with LagMeter() as at_sync:
        t0 = time.perf_counter()
        await app.scheduler.sync()
        sync_s = time.perf_counter() - t0
        await asyncio.sleep(0.05)
    await app.close()
    print(f"scheduler: {jobs} jobs")
    print(f"  start (register all) {start_s * 1000:6.0f} ms; loop lag {at_start.figures()}")
    print(f"  periodic sync        {sync_s * 1000:6.0f} ms; loop lag {at_sync.figures()}")


class Recording:
    """The real provider, keeping each call's usage."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.usages: list[Usage] = []

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse:
        response: LLMResponse = await self.inner.complete(request, on_text)
        self.usages.append(response.usage)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def prompt(url: str) -> None:
    from bot.llm.anthropic import AnthropicProvider

    async with FakeAnthropic(api_key=KEY, simulate_cache=True) as fake:
        fake.responder = lambda body: text_reply("Hello!")
        provider = Recording(AnthropicProvider(api_key=KEY, base_url=fake.base_url))
        app = App(settings(url), Secrets(anthropic_api_key=KEY), provider=provider)  # type: ignore[arg-type]
        await app.open()
        app.attach(TimedAdapter())
        firsts = []
        try:
            for user in ("alice", "bob"):
                before = len(provider.usages)
                msg = IncomingMessage(platform="bench", platform_user_id=user,
                                      platform_channel_id=f"D-{user}", text="hi")  # fmt: skip
                await app.pipeline.handle(msg)
                await app.pipeline.idle()
                firsts.append(provider.usages[before])
        finally:
            await app.close()
    one, two = firsts

    def total(u: Usage) -> int:
        return u.input_tokens + u.cache_read_tokens + u.cache_write_tokens

    print("prompt: a one-line 'hi' on a fresh conversation (tokens, estimated)")
    print(f"  first user         {total(one):6d} prompt tokens ({one.input_tokens} fresh, "
          f"{one.cache_write_tokens} written to the cache)")  # fmt: skip
    print(
        f"  second user        {total(two):6d} prompt tokens, "
        f"{two.cache_read_tokens / max(1, total(two)):.0%} read from the cache (shared prefix)"
    )


async def first(url: str, warm: bool) -> None:
    """(In a fresh interpreter) The first two messages after `App.open`."""
    from bot.app import service

    if not warm:  # the import alone, in a worker thread, as before the warm-up

        async def import_only() -> None:
            await asyncio.to_thread(__import__, "bot.llm.anthropic")

        service.import_provider = import_only  # type: ignore[assignment]
    async with FakeAnthropic(api_key=KEY) as fake:
        fake.responder = lambda body: text_reply("Hello!")
        app = App(settings(url, llm={"base_url": fake.base_url}), Secrets(anthropic_api_key=KEY))
        await app.open()
        app.attach(TimedAdapter())
        if settle_heap is not None:
            settle_heap(collect=True)
        figures = []
        try:
            for n in range(2):
                msg = IncomingMessage(platform="bench", platform_user_id=f"first{n}",
                                      platform_channel_id=f"D-first{n}", text="hi")  # fmt: skip
                with LagMeter(0.001) as lag:
                    started = time.perf_counter()
                    await app.pipeline.handle(msg)
                    await app.pipeline.idle()
                    took = (time.perf_counter() - started) * 1000
                figures.append(f"{took:5.0f} ms, loop lag {lag.figures()}")
        finally:
            await app.close()
    label = "with the warm-up   " if warm else "without the warm-up"
    print(f"  {label}  first {figures[0]};  second {figures[1]}")


def first_in_children() -> None:
    print("first messages after a start (real SDK, fake API; fresh interpreters)")
    for side in ("warm", "cold"):
        subprocess.run(
            [sys.executable, "-m", "tests.benchmarks.flow", "--first-child", side], check=True
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument(
        "--only",
        choices=["burst", "dms", "channel", "scheduler", "first", "prompt"],
        action="append",
        default=None,
    )
    parser.add_argument("--first-child", choices=["warm", "cold"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    parts = args.only or ["burst", "scheduler", "first", "prompt"]
    with tempfile.TemporaryDirectory() as tmp:
        base = f"sqlite+aiosqlite:///{Path(tmp)}"
        if args.first_child:
            asyncio.run(first(f"{base}/first.db", args.first_child == "warm"))
            return
        if "burst" in parts or "dms" in parts:
            asyncio.run(burst(f"{base}/dm.db", args.conversations, one_channel=False))
        if "burst" in parts or "channel" in parts:
            asyncio.run(burst(f"{base}/ch.db", args.conversations, one_channel=True))
        if "scheduler" in parts:
            asyncio.run(scheduler(f"{base}/jobs.db", args.jobs))
        if "first" in parts:
            first_in_children()
        if "prompt" in parts:
            asyncio.run(prompt(f"{base}/prompt.db"))


if __name__ == "__main__":
    main()
