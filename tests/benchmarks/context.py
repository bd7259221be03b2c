"""Context benchmark (`make bench`): prompt tokens per turn over a long scripted
conversation with tool results, managed vs. a naive "send everything" baseline,
and the share of input served from the prompt cache. Prints figures; asserts
nothing.

Both runs go through the real pipeline and the real anthropic SDK against the
fake Messages API, which simulates prompt caching (prefixes written at
breakpoints, read back within the 20-block lookback; tokens estimated as JSON
characters / 4). Each turn: a question, a `search` tool call (results of
1,200–1,800 characters, every seventh one 20,000) and an answer.

- managed: the default `[agent]` settings (history of the last turns, pruning,
  compaction after 50 messages with a memory flush, large results stored).
- naive: every message ever sent, whole tool results, no compaction; shown with
  the same cache breakpoints, and priced as if nothing were cached.

The auxiliary model: the managed run again with its compaction summaries and
memory flushes on the conversation's model (`auxiliary_model =
"claude-sonnet-5-5"`) against the cheap auxiliary model (`claude-haiku-5-5`,
the default `fast_model`): the cost of the same 200 turns either way.

Then the cost of MCP tools: the input tokens of a fresh "hi" with 0, 10 and
200 MCP tools configured (the toolbox test server over stdio; up to `[mcp]
inline_max_tools` = 20 sent inline, beyond that only `tool_search`), and 200
forced inline for comparison.

    python -m tests.benchmarks.context [--turns 200] [--mcp-only] [--auxiliary-only]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlmodel import col, select

from bot.app import App
from bot.config import Secrets, Settings
from bot.llm.pricing import estimate_cost
from bot.store.models import TokenLog
from bot.types import IncomingMessage, Reply, Target, Usage
from tests.fakes.anthropic import FakeAnthropic
from tests.scripted import ScriptedModel, SearchTool, question

KEY = "sk-ant-bench"
WINDOW = 200_000
"""The real context window: the naive run is not held to it, to show the growth."""
NAIVE: dict[str, Any] = {
    "history_step": 1,
    "prune_threshold": 1.0,
    "compact_threshold": 1.0,
    "compact_messages": 10**9,
    "tool_result_max_chars": 10**9,
    "memory_flush": False,
    "models": {"claude-sonnet-5-5": {"context_window": 10**9, "min_cache_tokens": 1024}},
}


class NullAdapter:
    platform = "bench"

    async def start(self, core: object) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, reply: Reply, progress: object = None) -> list[str]:
        return []

    async def show_typing(self, target: Target) -> None: ...


@dataclass
class Figures:
    per_turn: list[int]
    """Prompt tokens (fresh + cache read + cache write) of each turn's LLM calls."""
    chat: Usage
    internal: Usage
    """Summaries and memory flushes."""
    cost: float
    cost_uncached: float
    internal_cost: float = 0.0
    """What the summaries and memory flushes cost."""


async def run(
    turns: int, agent: dict[str, Any], history_turns: int, llm: dict[str, Any] | None = None
) -> Figures:
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeAnthropic(api_key=KEY, simulate_cache=True) as fake:
            fake.responder = ScriptedModel()
            settings = Settings.model_validate(
                {
                    "database": {"url": f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"},
                    "llm": {
                        "base_url": fake.base_url,
                        "history_turns": history_turns,
                        **(llm or {}),
                    },
                    "agent": agent,
                    "budgets": {"guest": "unlimited"},
                    "logging": {"level": "WARNING"},
                }
            )
            app = App(settings, Secrets(anthropic_api_key=KEY), extra_tools=(SearchTool(),))  # type: ignore[arg-type]
            await app.open()
            app.attach(NullAdapter())
            try:
                for turn in range(turns):
                    msg = IncomingMessage(
                        platform="bench",
                        platform_user_id="alice",
                        platform_channel_id="room",
                        text=question(turn),
                    )
                    outcome = await app.pipeline.handle(msg)
                    if outcome.status != "answered":
                        raise SystemExit(f"turn {turn}: {outcome.status}")
                    await app.pipeline.idle()
                async with app.store.read() as session:
                    logs = (await session.exec(select(TokenLog).order_by(col(TokenLog.id)))).all()
            finally:
                await app.close()
    prices = settings.llm.prices
    by_run: dict[str, int] = defaultdict(int)
    chat, internal = Usage(), Usage()
    cost = uncached = internal_cost = 0.0
    for log in logs:
        usage = Usage(
            log.input_tokens, log.output_tokens, log.cache_read_tokens, log.cache_write_tokens
        )
        cost += estimate_cost(log.model, usage, prices)
        flat = Usage(
            usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens,
            usage.output_tokens,
        )
        uncached += estimate_cost(log.model, flat, prices)
        if log.purpose == "chat":
            chat = chat + usage
            by_run[log.run_id or ""] += flat.input_tokens
        else:
            internal = internal + usage
            internal_cost += estimate_cost(log.model, usage, prices)
    return Figures(list(by_run.values()), chat, internal, cost, uncached, internal_cost)


def prompt(usage: Usage) -> int:
    return usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens


def report(turns: int, managed: Figures, naive: Figures) -> None:
    def row(label: str, a: str, b: str) -> None:
        print(f"  {label:<34}{a:>16}{b:>22}")

    def stats(values: list[int]) -> tuple[str, str, str, str]:
        ordered = sorted(values)
        return (
            f"{statistics.mean(values):,.0f}",
            f"{statistics.median(values):,.0f}",
            f"{ordered[-1]:,}",
            f"{values[-1]:,}",
        )

    print(f"context: {turns} turns, each a tool call and an answer (prompt tokens, estimated)")
    row("", "managed", "naive (send all)")
    for label, a, b in zip(
        ("per turn: mean", "per turn: median", "per turn: max", "last turn"),
        stats(managed.per_turn),
        stats(naive.per_turn),
        strict=True,
    ):
        row(label, a, b)
    row("total prompt tokens (chat)", f"{prompt(managed.chat):,}", f"{prompt(naive.chat):,}")
    share = managed.chat.cache_read_tokens / max(1, prompt(managed.chat))
    naive_share = naive.chat.cache_read_tokens / max(1, prompt(naive.chat))
    row("served from cache", f"{share:.1%}", f"{naive_share:.1%} (if cached)")
    row("summaries + flushes (prompt)", f"{prompt(managed.internal):,}", "-")
    row("estimated cost, USD", f"{managed.cost:.4f}", f"{naive.cost_uncached:.4f} (uncached)")
    row("", "", f"{naive.cost:.4f} (if cached)")
    over = [sum(1 for t in f.per_turn if t > WINDOW) for f in (managed, naive)]
    row(f"turns over a {WINDOW:,}-token window", f"{over[0]}", f"{over[1]}")
    ratio = prompt(naive.chat) / max(1, prompt(managed.chat))
    print(f"  naive sends {ratio:.1f}x the prompt tokens of managed over {turns} turns")


async def fresh_hi(tools: int, inline_max: int = 20) -> tuple[int, int, int]:
    """A first "hi" with `tools` MCP tools configured: the input tokens the
    service recorded for the call (the fake's usage: JSON characters / 4), our
    own estimate of the request (`bot.llm.tokens`), and how many tool
    definitions were sent."""
    from bot.llm.tokens import prompt_tokens
    from bot.llm.types import ChatMessage, SystemBlock, TextBlock, ToolSpec
    from tests.mcp_servers import stdio_config

    with tempfile.TemporaryDirectory() as tmp:
        async with FakeAnthropic(api_key=KEY) as fake:
            fake.script("Hello!")
            mcp: dict[str, Any] = {"inline_max_tools": inline_max, "servers": {}}
            if tools:
                allowed = [f"tool_{i:03d}" for i in range(tools)]
                mcp["servers"]["box"] = stdio_config(
                    None, "--tools", str(tools), tools=allowed, min_role="guest"
                )
            settings = Settings.model_validate(
                {
                    "database": {"url": f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"},
                    "llm": {"base_url": fake.base_url},
                    "budgets": {"guest": "unlimited"},
                    "logging": {"level": "WARNING"},
                    "mcp": mcp,
                }
            )
            app = App(settings, Secrets(anthropic_api_key=KEY))  # type: ignore[arg-type]
            await app.open()
            app.attach(NullAdapter())
            try:
                if app.mcp is not None and not await app.mcp.links["box"].wait_up(60):
                    raise SystemExit(
                        f"the toolbox did not start: {app.mcp.links['box'].last_error}"
                    )
                msg = IncomingMessage(
                    platform="bench", platform_user_id="alice", platform_channel_id="c", text="hi"
                )
                await app.pipeline.handle(msg)
                async with app.store.read() as session:
                    (log,) = (await session.exec(select(TokenLog))).all()
            finally:
                await app.close()
            body = fake.last_request.body
    estimate = prompt_tokens(
        [SystemBlock(b["text"]) for b in body.get("system", [])],
        [ChatMessage("user", (TextBlock(str(body["messages"])),))],
        [ToolSpec(t["name"], t.get("description", ""), t["input_schema"]) for t in body["tools"]],
    )
    recorded = log.input_tokens + log.cache_read_tokens + log.cache_write_tokens
    return recorded, estimate, len(body["tools"])


async def mcp_report() -> None:
    print('MCP tools: input tokens of a fresh "hi" (fake\'s count, JSON chars / 4; our estimate)')
    rows = [
        ("0 MCP tools", 0, 20),
        ("10 MCP tools (inline)", 10, 20),
        ("200 MCP tools (tool_search)", 200, 20),
        ("200 MCP tools forced inline", 200, 1000),
    ]
    for label, tools, inline_max in rows:
        counted, estimate, sent = await fresh_hi(tools, inline_max)
        print(f"  {label:<34}{counted:>10,}{estimate:>10,}   ({sent} tool definitions sent)")


def auxiliary_report(turns: int, on_chat: Figures, on_auxiliary: Figures) -> None:
    print(f"auxiliary model: {turns} turns, summaries and memory flushes on … (USD, estimated)")
    print(f"  {'':<34}{'conversation model':>20}{'auxiliary model':>18}")
    for label, a, b in (
        ("summaries + flushes", on_chat.internal_cost, on_auxiliary.internal_cost),
        ("whole conversation", on_chat.cost, on_auxiliary.cost),
    ):
        print(f"  {label:<34}{a:>20.4f}{b:>18.4f}")
    saved = 1 - on_auxiliary.cost / max(on_chat.cost, 1e-9)
    print(f"  the auxiliary model saves {saved:.1%} of the conversation's cost")


async def main_async(turns: int, mcp_only: bool = False, auxiliary_only: bool = False) -> None:
    if not mcp_only and not auxiliary_only:
        managed = await run(turns, {}, history_turns=20)
        naive = await run(turns, NAIVE, history_turns=10**6)
        report(turns, managed, naive)
    if not mcp_only:
        on_chat = await run(turns, {}, 20, {"auxiliary_model": "claude-sonnet-5-5"})
        on_auxiliary = await run(turns, {}, 20, {"auxiliary_model": "claude-haiku-5-5"})
        auxiliary_report(turns, on_chat, on_auxiliary)
    if not auxiliary_only:
        await mcp_report()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--mcp-only", action="store_true", help="only the MCP tools' figures")
    parser.add_argument(
        "--auxiliary-only", action="store_true", help="only the auxiliary model's figures"
    )
    args = parser.parse_args()
    asyncio.run(main_async(args.turns, args.mcp_only, args.auxiliary_only))


if __name__ == "__main__":
    main()
