"""Pipeline overhead benchmark (`make bench`). Prints figures; asserts nothing.

Mode "sequential": N messages, one after another, through the real pipeline
(SQLite file database, dedupe, identity, budget, persona, conversation,
history, persistence, token logs) with an in-process provider that answers
immediately, no tools. Prints messages/s, p50/p99 latency and peak RSS.

Mode "concurrent": C conversations at once, the provider sleeping 1 s per call;
prints the total wall time (ideal: just over 1 s).

    python -m tests.benchmarks.pipeline [--messages 2000] [--conversations 1000]
        [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import secrets
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bot.app import App
from bot.config import Secrets, Settings
from bot.llm.types import LLMRequest, LLMResponse, TextBlock
from bot.ports import TextCallback
from bot.types import IncomingMessage, Reply, Target, Usage

RUN = secrets.token_hex(4)


@dataclass
class InstantProvider:
    delay: float = 0.0

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse:
        if self.delay:
            await asyncio.sleep(self.delay)
        return LLMResponse(
            (TextBlock("ok, noted."),),
            "end_turn",
            Usage(input_tokens=50, output_tokens=5),
            request.model,
        )

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
        platform_user_id=f"{mode}-user{conversation}",
        platform_channel_id=f"{RUN}-{mode}-chan{conversation}",
        text=f"message number {i}",
        platform_message_id=str(i),
        event_id=f"{RUN}:{mode}:{i}",  # unique even when a database is reused
    )


async def open_app(url: str, delay: float) -> tuple[App, NullAdapter]:
    settings = Settings.model_validate(
        {
            "database": {"url": url},
            "budgets": {"guest": "unlimited"},
            "logging": {"level": "WARNING"},
        }
    )
    app = App(settings, Secrets(), provider=InstantProvider(delay))
    await app.open()
    adapter = NullAdapter()
    app.attach(adapter)
    return app, adapter


async def sequential(url: str, n: int, conversations: int) -> None:
    app, adapter = await open_app(url, 0.0)
    for i in range(50):  # warm up: create users and conversations, fill caches
        await app.pipeline.handle(msg(-i - 1, i % conversations))
    latencies = []
    started = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        await app.pipeline.handle(msg(i, i % conversations))
        latencies.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - started
    await app.close()
    latencies.sort()
    print(f"sequential: {n} messages over {conversations} conversations in {elapsed:.2f} s")
    print(f"  throughput   {n / elapsed:8.1f} messages/s")
    print(f"  latency p50  {statistics.median(latencies):8.2f} ms")
    print(f"  latency p99  {latencies[int(len(latencies) * 0.99) - 1]:8.2f} ms")
    print(f"  peak RSS     {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:8.1f} MiB")
    assert adapter.sent >= n


async def concurrent(url: str, conversations: int) -> None:
    app, adapter = await open_app(url, 1.0)
    started = time.perf_counter()
    outcomes = await asyncio.gather(
        *(app.pipeline.handle(msg(i, i, "conc")) for i in range(conversations))
    )
    elapsed = time.perf_counter() - started
    await app.close()
    answered = sum(o.status == "answered" for o in outcomes)
    others = sorted({o.status for o in outcomes} - {"answered"})
    print(f"concurrent: {conversations} conversations, provider sleeping 1 s each")
    print(
        f"  wall time    {elapsed:8.2f} s  ({answered} answered, {adapter.sent} sent)"
        + (f"; other outcomes: {', '.join(others)}" if others else "")
    )
    print(f"  peak RSS     {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:8.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--database-url", help="default: a fresh SQLite file")
    parser.add_argument("--mode", choices=["sequential", "concurrent", "both"], default="both")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.mode in ("sequential", "both"):
            url = args.database_url or f"sqlite+aiosqlite:///{Path(tmp) / 'seq.db'}"
            asyncio.run(sequential(url, args.messages, 50))
        if args.mode in ("concurrent", "both"):
            url = args.database_url or f"sqlite+aiosqlite:///{Path(tmp) / 'conc.db'}"
            asyncio.run(concurrent(url, args.conversations))


if __name__ == "__main__":
    main()
