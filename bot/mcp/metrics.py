"""The MCP servers' Prometheus series, on the app's registry (`bot.metrics`).

- ``switchboard_mcp_up{server}``: 1 while connected; every configured server
  has a series from the start, 0 until it connects;
- ``switchboard_mcp_calls_total{server,outcome}``: ok, error, timeout, held
  (for confirmation);
- ``switchboard_mcp_call_seconds{server}``: each call, from the agent's call
  to the answer (the wait for a server that was down included).

The server label is the configured name (letters, digits, ``_.-``).
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from bot.metrics import label

OUTCOMES = ("ok", "error", "timeout", "held")
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class McpMetrics:
    def __init__(self, registry: CollectorRegistry, servers: Sequence[str]) -> None:
        self._servers = frozenset(servers)
        self.up = Gauge(
            "switchboard_mcp_up",
            "Whether each configured MCP server is connected (1) or not (0)",
            ["server"],
            registry=registry,
        )
        self.calls = Counter(
            "switchboard_mcp_calls",
            "MCP tool calls by server and outcome (ok, error, timeout, held)",
            ["server", "outcome"],
            registry=registry,
        )
        self.seconds = Histogram(
            "switchboard_mcp_call_seconds",
            "MCP tool calls, from the call to the answer",
            ["server"],
            buckets=BUCKETS,
            registry=registry,
        )
        for server in self._servers:
            self.up.labels(label(server)).set(0)
            self.seconds.labels(label(server))
            for outcome in OUTCOMES:
                self.calls.labels(label(server), outcome)

    def set_up(self, server: str, up: bool) -> None:
        self.up.labels(label(server, self._servers)).set(1 if up else 0)

    def called(self, server: str, outcome: str, seconds: float | None = None) -> None:
        name = label(server, self._servers)
        self.calls.labels(name, label(outcome, OUTCOMES)).inc()
        if seconds is not None:
            self.seconds.labels(name).observe(max(seconds, 0.0))
