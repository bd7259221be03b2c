"""An MCP server's tools as the agent's tools.

`select` applies the server's policy to what it lists: the allowlist
(`tools`) and `exclude_tools`, names (`bot.mcp.names`), schemas that cannot be
sent (left out, with a WARNING), and each tool's effect: from the config's
`effects`, else its annotations (``readOnlyHint: true`` → "read", otherwise
"external"). `McpTool` is one of them: offered to `min_role` and up in the
server's `personas`, its output untrusted unless the server is
`trusted_output`, searchable (`tool_search` finds it when a run has too many
to send inline), each call bounded by the server's `timeout_seconds` and
counted per server.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mcp_types import CallToolResult
from mcp_types import Tool as Listed

from bot.config import McpServerSettings
from bot.mcp.content import to_output
from bot.mcp.link import CallTimeout
from bot.mcp.metrics import McpMetrics
from bot.mcp.names import schema_problem, tool_name
from bot.ports import Effect, ToolContext, ToolOutput
from bot.types import Role


@dataclass(frozen=True, slots=True)
class Selected:
    """One of the server's tools, as it is offered."""

    tool: str
    """The server's own name for it."""
    name: str
    """What the model calls it (`mcp__<server>__<tool>`)."""
    description: str
    input_schema: Mapping[str, Any]
    effect: Effect


def select(
    server: str,
    config: McpServerSettings,
    listed: Sequence[Listed],
    warn: Callable[[str], None],
) -> list[Selected]:
    """The tools of `listed` the server's config offers, in the order of their
    names; `warn` is told each one left out for a bad schema."""
    chosen: list[Selected] = []
    taken: set[str] = set()
    for tool in sorted(listed, key=lambda t: t.name):
        if config.tools is not None and tool.name not in config.tools:
            continue
        if tool.name in config.exclude_tools:
            continue
        problem = schema_problem(tool.input_schema)
        if problem is not None:
            warn(f"tool {tool.name} left out: {problem}")
            continue
        name = tool_name(server, tool.name, taken)
        taken.add(name)
        chosen.append(
            Selected(
                tool=tool.name,
                name=name,
                description=_description(server, tool),
                input_schema=tool.input_schema,
                effect=config.effects.get(tool.name) or _annotated_effect(tool),
            )
        )
    return chosen


def unknown_names(config: McpServerSettings, listed: Sequence[Listed]) -> list[str]:
    """Tool names the config mentions that the server does not list."""
    have = {tool.name for tool in listed}
    named = [*(config.tools or ()), *config.exclude_tools, *config.effects]
    return sorted({name for name in named if name not in have})


def _annotated_effect(tool: Listed) -> Effect:
    annotations = tool.annotations
    return "read" if annotations is not None and annotations.read_only_hint is True else "external"


def _description(server: str, tool: Listed) -> str:
    text = (tool.description or "").strip()
    if text:
        return text
    title = tool.title or (tool.annotations.title if tool.annotations else None)
    return title or f"The {tool.name} tool of the {server} MCP server."


class Link(Protocol):
    """What an `McpTool` needs of its server (`bot.mcp.link.ServerLink`)."""

    @property
    def name(self) -> str: ...

    async def call(self, tool: str, args: Mapping[str, Any], seconds: float) -> CallToolResult: ...


class McpTool:
    module = "mcp"
    searchable = True

    def __init__(
        self,
        link: Link,
        selected: Selected,
        config: McpServerSettings,
        metrics: McpMetrics | None = None,
    ) -> None:
        self._link = link
        self._metrics = metrics
        self.server: str = link.name
        self.tool = selected.tool
        self.name = selected.name
        self.description = selected.description
        self.input_schema = selected.input_schema
        self.effect: Effect = selected.effect
        self.min_role: Role = config.min_role
        self.personas: Collection[str] | None = config.personas
        self.trusted_output = config.trusted_output
        self.timeout_seconds = config.timeout_seconds

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        started = time.perf_counter()
        outcome: str | None = "error"
        try:
            result = await self._link.call(self.tool, args, self.timeout_seconds)
            output = to_output(result)  # a result flagged isError raises ToolFailed
            outcome = "ok"
            return output
        except CallTimeout:
            outcome = "timeout"
            raise
        except asyncio.CancelledError:
            outcome = None  # the run stopped: not the server's doing
            raise
        finally:
            if self._metrics is not None and outcome is not None:
                self._metrics.called(self.server, outcome, time.perf_counter() - started)

    def held(self) -> None:
        """A call held for confirmation (`bot.tools.actions.note_held`)."""
        if self._metrics is not None:
            self._metrics.called(self.server, "held")

    def describe(self, args: Mapping[str, Any]) -> str:
        shown = json.dumps(dict(args), ensure_ascii=False, sort_keys=True)
        if len(shown) > 300:
            shown = shown[:299] + "…"
        return f"Run {self.tool} on the MCP server {self.server} with {shown}"
