"""The service's Prometheus metrics (`GET /metrics`, `bot.web.server`).

One `Metrics` per `App`, each on its own `CollectorRegistry` (never the
process-global default), so several apps in one process — tests — keep their
counts apart. The components that count get it as an argument; its methods
take only what may become a label value, and every label value passes
`label()`: a short token of letters, digits and ``_.:-`` from a code-defined
set (platform names, model names, tool names, outcomes), else ``"other"``.
Labels never carry user ids, message text or secrets.

The inbox gauges are computed at scrape time by one query (`InboxBacklog`),
cached for `cache_seconds` and bounded by `timeout`, so a busy scraper costs
the database little and a slow database never holds a scrape long.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Collection, Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from bot.types import Usage, utcnow

log = logging.getLogger("switchboard.metrics")

__all__ = ["CONTENT_TYPE", "InboxBacklog", "Metrics", "label"]

InboxBacklog = Callable[[], Awaitable[tuple[int, datetime | None]]]
"""Open inbox messages: how many, and when the oldest was accepted."""

SqliteWrites = Callable[[], tuple[int, int, float]]
"""SQLite's writes so far: turns on the write lock, commits, seconds waited."""

OTHER = "other"
_TOKEN = re.compile(r"[A-Za-z0-9_.:/\-]{1,64}")
RUN_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")
WAKEUP_OUTCOMES = ("answered", "silent", "refused", "failed", "delivery_failed", "missed")
WEB_TOOLS = ("web_fetch", "web_search")
WEB_OUTCOMES = ("ok", "refused", "timeout", "too_large", "error")
MEDIA_KINDS = (
    "image",
    "pdf",
    "docx",
    "xlsx",
    "pptx",
    "html",
    "csv",
    "tsv",
    "epub",
    "text",
    "audio",
)
MEDIA_OUTCOMES = ("ok", "unreadable", "problem", "failed")


MAX_CHILDREN = 4096
"""Labelled children kept by `Metrics._child` (label values are few)."""


def label(value: object, allowed: Collection[str] | None = None) -> str:
    """`value` as a label value: itself when it is a short plain token (and in
    `allowed`, when given), else "other"."""
    text = str(value)
    if allowed is not None and text not in allowed:
        return OTHER
    return text if _TOKEN.fullmatch(text) else OTHER


class Metrics:
    def __init__(self, *, cache_seconds: float = 2.0, timeout: float = 0.5) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.messages_received = Counter(
            "switchboard_messages_received",
            "Messages from people accepted into the inbox",
            ["platform"],
            registry=r,
        )
        self.replies_sent = Counter(
            "switchboard_replies_sent", "Replies delivered", ["platform"], registry=r
        )
        self.replies_suppressed = Counter(
            "switchboard_replies_suppressed",
            "Runs that chose not to answer (NO_REPLY)",
            ["platform"],
            registry=r,
        )
        self.llm_requests = Counter(
            "switchboard_llm_requests",
            "LLM calls by model and outcome (ok or the error kind)",
            ["model", "outcome"],
            registry=r,
        )
        self.llm_tokens = Counter(
            "switchboard_llm_tokens", "LLM tokens by kind", ["kind"], registry=r
        )
        self.llm_cost = Counter(
            "switchboard_llm_cost_usd", "Estimated LLM cost (USD, from [llm] prices)", registry=r
        )
        self.llm_fallbacks = Counter(
            "switchboard_llm_fallbacks",
            "LLM calls that went on to the next model of their chain (names from config)",
            ["from", "to", "reason"],
            registry=r,
        )
        self.run_duration = Histogram(
            "switchboard_run_duration_seconds",
            "Agent runs, start to saved",
            ["status"],
            buckets=RUN_BUCKETS,
            registry=r,
        )
        self.tool_calls = Counter(
            "switchboard_tool_calls",
            "Tool calls by tool and outcome (ok, error, held, unavailable)",
            ["tool", "outcome"],
            registry=r,
        )
        self.web_requests = Counter(
            "switchboard_web_requests",
            "Web fetches and searches by tool and outcome (ok, refused, timeout, too_large, error)",
            ["tool", "outcome"],
            registry=r,
        )
        self.delivery_failures = Counter(
            "switchboard_delivery_failures",
            "Replies that could not be delivered",
            ["platform"],
            registry=r,
        )
        self.budget_refusals = Counter(
            "switchboard_budget_refusals", "Runs refused or stopped by a budget", registry=r
        )
        self.wakeups = Counter(
            "switchboard_wakeups", "Scheduled wakeups by outcome", ["outcome"], registry=r
        )
        self.media_files = Counter(
            "switchboard_media_files",
            "Files people sent, by how they were read (image, pdf, docx, audio, …) and "
            "outcome (ok, unreadable, problem, failed)",
            ["kind", "outcome"],
            registry=r,
        )
        self.transcribed_seconds = Counter(
            "switchboard_transcribed_seconds", "Seconds of audio transcribed", registry=r
        )
        self.inbox_pending = Gauge(
            "switchboard_inbox_pending", "Inbox messages accepted and not finished", registry=r
        )
        self.inbox_oldest = Gauge(
            "switchboard_inbox_oldest_pending_seconds",
            "Age of the oldest unfinished inbox message (0 when none)",
            registry=r,
        )
        self.llm_in_flight = Gauge(
            "switchboard_llm_in_flight",
            "LLM calls under way now (at most [llm] max_in_flight)",
            registry=r,
        )
        self.llm_waiting = Gauge(
            "switchboard_llm_waiting",
            "LLM calls waiting for a place under [llm] max_in_flight",
            registry=r,
        )
        for kind in TOKEN_KINDS:  # every series shows at 0 before its first count
            self.llm_tokens.labels(kind)
        for outcome in WAKEUP_OUTCOMES:
            self.wakeups.labels(outcome)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._backlog: InboxBacklog | None = None
        self._sqlite_writes: _SqliteWrites | None = None
        self._cache_seconds = cache_seconds
        self._timeout = timeout
        self._refreshed: float | None = None
        self._pending: asyncio.Future[tuple[int, datetime | None]] | None = None

    # -- counting -------------------------------------------------------------

    def serve_platform(self, platform: str) -> None:
        """A platform's series show (at 0) from its start on."""
        name = label(platform)
        for counter in (
            self.messages_received,
            self.replies_sent,
            self.replies_suppressed,
            self.delivery_failures,
        ):
            counter.labels(name)

    def _child(self, metric: Any, *values: str) -> Any:
        """`metric` with the labels `values` (each through `label`), the child
        kept: prometheus_client's `labels` validates and looks it up under a
        lock on every call, and a message counts half a dozen times."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            if len(self._children) >= MAX_CHILDREN:
                self._children.clear()
            child = self._children[key] = metric.labels(*(label(v) for v in values))
        return child

    def message_received(self, platform: str) -> None:
        self._child(self.messages_received, platform).inc()

    def reply_sent(self, platform: str) -> None:
        self._child(self.replies_sent, platform).inc()

    def reply_suppressed(self, platform: str) -> None:
        self._child(self.replies_suppressed, platform).inc()

    def delivery_failed(self, platform: str) -> None:
        self.delivery_failures.labels(label(platform)).inc()

    def llm_call(self, model: str, outcome: str, usage: Usage | None, cost: float = 0.0) -> None:
        self._child(self.llm_requests, model, outcome).inc()
        if usage is not None:
            for kind, tokens in zip(
                TOKEN_KINDS,
                (
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.cache_read_tokens,
                    usage.cache_write_tokens,
                ),
                strict=True,
            ):
                if tokens > 0:
                    self._child(self.llm_tokens, kind).inc(tokens)
        if cost > 0:
            self.llm_cost.inc(cost)

    def llm_fallback(self, from_model: str, to_model: str, reason: str) -> None:
        self._child(self.llm_fallbacks, from_model, to_model, reason).inc()

    def run_finished(self, status: str, seconds: float) -> None:
        self._child(self.run_duration, status).observe(max(seconds, 0.0))

    def tool_called(self, tool: str, known: Collection[str], outcome: str) -> None:
        """`tool` as the model named it: a name not in `known` (the model's
        own text) is counted as "other"."""
        self.tool_calls.labels(label(tool, known), label(outcome)).inc()

    def web_request(self, tool: str, outcome: str) -> None:
        """One fetch or search (`WEB_TOOLS`), ended `outcome` (`WEB_OUTCOMES`)."""
        self._child(self.web_requests, label(tool, WEB_TOOLS), label(outcome, WEB_OUTCOMES)).inc()

    def budget_refused(self) -> None:
        self.budget_refusals.inc()

    def media_file(self, kind: str, outcome: str) -> None:
        """One file a message brought, read as `kind` (`MEDIA_KINDS`)."""
        self._child(
            self.media_files, label(kind, MEDIA_KINDS), label(outcome, MEDIA_OUTCOMES)
        ).inc()

    def transcribed(self, seconds: float) -> None:
        self.transcribed_seconds.inc(seconds)

    def wakeup(self, outcome: str) -> None:
        self.wakeups.labels(label(outcome)).inc()

    # -- scraping -------------------------------------------------------------

    def watch_llm_gate(self, in_flight: Callable[[], float], waiting: Callable[[], float]) -> None:
        """Read the LLM gate's occupancy at each scrape."""
        self.llm_in_flight.set_function(in_flight)
        self.llm_waiting.set_function(waiting)

    def watch_inbox(self, backlog: InboxBacklog) -> None:
        self._backlog = backlog

    def watch_sqlite_writes(self, writes: SqliteWrites) -> None:
        """Read SQLite's write counts at each scrape (`_SqliteWrites`)."""
        if self._sqlite_writes is not None:  # the app opened again: its new store
            self.registry.unregister(self._sqlite_writes)
        self._sqlite_writes = _SqliteWrites(writes)
        self.registry.register(self._sqlite_writes)

    async def render(self) -> bytes:
        """The registry in Prometheus text format, inbox gauges refreshed."""
        await self._refresh_inbox()
        return generate_latest(self.registry)

    async def _refresh_inbox(self) -> None:
        if self._backlog is None:
            return
        now = time.monotonic()
        if self._refreshed is not None and now - self._refreshed < self._cache_seconds:
            return
        if self._pending is None or self._pending.done():
            self._pending = asyncio.ensure_future(self._backlog())
            self._pending.add_done_callback(_consume)
        try:
            pending, oldest = await asyncio.wait_for(asyncio.shield(self._pending), self._timeout)
        except Exception as exc:  # stale gauges rather than a failed scrape
            log.warning("metrics.inbox_unavailable: %s", type(exc).__name__)
            return
        self._refreshed = now
        self.inbox_pending.set(pending)
        age = (utcnow() - _aware(oldest)).total_seconds() if oldest is not None else 0.0
        self.inbox_oldest.set(max(age, 0.0))


class _SqliteWrites(Collector):
    """SQLite's one writer, read at scrape time: writes waiting long for their
    turn say the database is the bottleneck (PostgreSQL scales out); writes
    per commit say how much group commit shares."""

    def __init__(self, writes: SqliteWrites) -> None:
        self._writes = writes

    def collect(self) -> Iterator[Metric]:
        writes, commits, waited = self._writes()
        yield CounterMetricFamily(
            "switchboard_sqlite_writes",
            "SQLite write transactions (turns on the write lock)",
            value=writes,
        )
        yield CounterMetricFamily(
            "switchboard_sqlite_commits",
            "SQLite commits (writes grouped together share one)",
            value=commits,
        )
        yield CounterMetricFamily(
            "switchboard_sqlite_write_wait_seconds",
            "Time SQLite writes spent waiting for their turn, all together",
            value=waited,
        )


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _consume(future: asyncio.Future[tuple[int, datetime | None]]) -> None:
    """Retrieve a failure nobody awaited any more (a scrape that timed out)."""
    if not future.cancelled():
        future.exception()
