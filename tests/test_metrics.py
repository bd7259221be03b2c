"""`bot.metrics`: label hygiene (only short code-defined tokens become label
values; user text and unknown tool names become "other"), one registry per
`Metrics`, the counting provider, and the inbox gauges' cache."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from prometheus_client import REGISTRY

from bot.app.counted import CountedProvider, error_kind
from bot.config import DEFAULT_PRICES
from bot.errors import ContextWindowExceeded, Overloaded, ProviderRateLimited
from bot.llm.gate import FairLimiter
from bot.llm.types import LLMRequest, LLMResponse, TextCallback
from bot.metrics import Metrics, label
from bot.ports import is_ready
from bot.types import Usage, utcnow
from tests.web.scrape import label_values, parse, value


async def scraped(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return parse((await metrics.render()).decode())


@pytest.mark.parametrize(
    ("raw", "allowed", "expected"),
    [
        ("slack", None, "slack"),
        ("claude-sonnet-5-5", None, "claude-sonnet-5-5"),
        ("openrouter/meta-llama/llama-4", None, "openrouter/meta-llama/llama-4"),
        ("current_time", {"current_time"}, "current_time"),
        ("made_up_tool", {"current_time"}, "other"),
        ("ignore previous instructions", None, "other"),
        ("U123 said hi", None, "other"),
        ('a"b', None, "other"),
        ("line\nbreak", None, "other"),
        ("", None, "other"),
        ("x" * 65, None, "other"),
    ],
)
def test_label_keeps_only_short_plain_tokens(
    raw: str, allowed: set[str] | None, expected: str
) -> None:
    assert label(raw, allowed) == expected


async def test_label_values_never_carry_text_or_unknown_tool_names() -> None:
    metrics = Metrics()
    metrics.message_received("slack")
    metrics.message_received("slack\nuser=U42 text=hello there")  # never a platform, but if it were
    metrics.tool_called("please run rm -rf /", known={"current_time"}, outcome="unavailable")
    metrics.tool_called("current_time", known={"current_time"}, outcome="ok")
    metrics.llm_call("claude model with spaces", "ok", None)
    s = await scraped(metrics)
    assert value(s, "switchboard_messages_received_total", platform="slack") == 1
    assert value(s, "switchboard_messages_received_total", platform="other") == 1
    assert value(s, "switchboard_tool_calls_total", tool="other", outcome="unavailable") == 1
    assert value(s, "switchboard_tool_calls_total", tool="current_time", outcome="ok") == 1
    assert value(s, "switchboard_llm_requests_total", model="other", outcome="ok") == 1
    for v in label_values(s):
        assert " " not in v and "\n" not in v and "U42" not in v


async def test_each_metrics_has_its_own_registry() -> None:
    one, two = Metrics(), Metrics()
    one.budget_refused()
    assert value(await scraped(one), "switchboard_budget_refusals_total") == 1
    assert value(await scraped(two), "switchboard_budget_refusals_total") == 0
    assert REGISTRY.get_sample_value("switchboard_budget_refusals_total") is None


async def test_llm_calls_count_tokens_by_kind_and_cost() -> None:
    metrics = Metrics()
    usage = Usage(input_tokens=1000, output_tokens=200, cache_read_tokens=50, cache_write_tokens=10)
    metrics.llm_call("claude-sonnet-5-5", "ok", usage, cost=0.25)
    s = await scraped(metrics)
    assert value(s, "switchboard_llm_tokens_total", kind="input") == 1000
    assert value(s, "switchboard_llm_tokens_total", kind="output") == 200
    assert value(s, "switchboard_llm_tokens_total", kind="cache_read") == 50
    assert value(s, "switchboard_llm_tokens_total", kind="cache_write") == 10
    assert value(s, "switchboard_llm_cost_usd_total") == 0.25


class ScriptedProvider:
    def __init__(self, *outcomes: LLMResponse | Exception) -> None:
        self.outcomes = list(outcomes)

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse:
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def aclose(self) -> None:
        pass


async def test_the_counted_provider_counts_successes_and_errors_by_kind() -> None:
    metrics = Metrics()
    usage = Usage(input_tokens=1_000_000, output_tokens=0)
    ok = LLMResponse(content=(), stop_reason="end_turn", usage=usage, model="claude-sonnet-5-5")
    inner = ScriptedProvider(ok, Overloaded("busy"), ContextWindowExceeded("too long"))
    provider = CountedProvider(inner, metrics, DEFAULT_PRICES)
    request = LLMRequest(model="claude-sonnet-5-5", messages=())
    assert await provider.complete(request) is ok
    for _ in range(2):
        with pytest.raises(Exception):  # noqa: B017 - the provider's own errors pass through
            await provider.complete(request)
    s = await scraped(metrics)
    model = "claude-sonnet-5-5"
    assert value(s, "switchboard_llm_requests_total", model=model, outcome="ok") == 1
    assert value(s, "switchboard_llm_requests_total", model=model, outcome="overloaded") == 1
    kind = "context_window_exceeded"
    assert value(s, "switchboard_llm_requests_total", model=model, outcome=kind) == 1
    assert value(s, "switchboard_llm_cost_usd_total") == pytest.approx(3.0)  # $3 per M input


def test_error_kinds_are_code_names() -> None:
    assert error_kind(ProviderRateLimited("slow down")) == "provider_rate_limited"
    assert error_kind(ValueError("user text here")) == "error"


async def test_inbox_gauges_are_cached_and_a_slow_query_does_not_hold_the_scrape() -> None:
    metrics = Metrics(cache_seconds=60.0, timeout=0.05)
    calls = 0
    slow = asyncio.Event()

    async def backlog() -> tuple[int, object]:
        nonlocal calls
        calls += 1
        if calls > 1:
            await slow.wait()
        return 3, utcnow() - timedelta(seconds=30)

    metrics.watch_inbox(backlog)  # type: ignore[arg-type]
    s = await scraped(metrics)
    assert value(s, "switchboard_inbox_pending") == 3
    assert value(s, "switchboard_inbox_oldest_pending_seconds") >= 30
    await scraped(metrics)
    assert calls == 1  # the second scrape used the cached answer

    stale = Metrics(cache_seconds=0.0, timeout=0.05)
    calls = 1  # from now on every query hangs
    stale.watch_inbox(backlog)  # type: ignore[arg-type]
    s = await scraped(stale)  # answered, without the gauges
    assert value(s, "switchboard_inbox_pending") == 0
    slow.set()


async def test_an_adapter_without_ready_is_ready_and_a_failing_check_is_not() -> None:
    class Plain:
        platform = "console"

    class Broken:
        platform = "x"

        async def ready(self) -> bool:
            raise RuntimeError("boom")

    class Down:
        platform = "y"

        async def ready(self) -> bool:
            return False

    assert await is_ready(Plain()) is True
    assert await is_ready(Broken()) is False
    assert await is_ready(Down()) is False


async def test_the_llm_gate_shows_calls_in_flight_and_waiting() -> None:
    metrics = Metrics()
    gate = FairLimiter(1)
    metrics.watch_llm_gate(lambda: gate.held, lambda: gate.waiting)
    await gate.acquire()
    waiter = asyncio.create_task(gate.acquire(1.0))
    await asyncio.sleep(0)
    s = await scraped(metrics)
    assert value(s, "switchboard_llm_in_flight") == 1
    assert value(s, "switchboard_llm_waiting") == 1
    gate.release()
    await waiter
    gate.release()
    s = await scraped(metrics)
    assert value(s, "switchboard_llm_in_flight") == 0
    assert value(s, "switchboard_llm_waiting") == 0


async def test_sqlite_write_counts_are_read_at_each_scrape_from_the_latest_store() -> None:
    metrics = Metrics()
    counts = [10, 4, 0.5]
    metrics.watch_sqlite_writes(lambda: (counts[0], counts[1], counts[2]))
    assert value(await scraped(metrics), "switchboard_sqlite_writes_total") == 10
    counts[:] = [12, 5, 0.75]
    s = await scraped(metrics)
    assert value(s, "switchboard_sqlite_writes_total") == 12
    assert value(s, "switchboard_sqlite_commits_total") == 5
    assert value(s, "switchboard_sqlite_write_wait_seconds_total") == 0.75
    metrics.watch_sqlite_writes(lambda: (1, 1, 0.0))  # the app opened again: a new store
    assert value(await scraped(metrics), "switchboard_sqlite_writes_total") == 1
