"""Connecting to a server once, for the operator (`switchboard mcp list` and
`switchboard mcp call`): what it offers, or why it cannot be reached, and a
tool tried by hand. Independent of a running service: each command opens its
own session and closes it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.config import McpServerSettings
from bot.errors import ToolFailed
from bot.mcp.content import to_output
from bot.mcp.link import describe
from bot.mcp.tools import Selected, select
from bot.mcp.transport import list_tools, open_session
from bot.ports import ToolOutput

CONNECT_TIMEOUT_S = 30.0


@dataclass(slots=True)
class Probe:
    name: str
    transport: str
    state: str = "down"
    """up | down"""
    offered: list[Selected] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    """Tools listed but not offered for a bad schema, with the reason."""
    listed: int = 0
    error: str | None = None


async def probe(name: str, config: McpServerSettings, within: float = CONNECT_TIMEOUT_S) -> Probe:
    """Connect to the server, list its tools, disconnect."""
    found = Probe(name, config.transport)
    try:
        async with asyncio.timeout(within), open_session(name, config) as session:
            listed = await list_tools(session)
    except Exception as exc:
        found.error = "timed out" if isinstance(exc, TimeoutError) else describe(exc)
        return found
    found.state = "up"
    found.listed = len(listed)
    found.offered = select(name, config, listed, found.left_out.append)
    return found


async def call(
    name: str,
    config: McpServerSettings,
    tool: str,
    args: Mapping[str, Any],
    seconds: float | None = None,
) -> ToolOutput:
    """Call one tool (the server's own name, or the name the model sees) and
    return its result as the model would get it; `ToolFailed` with the
    server's text when it reports an error."""
    seconds = config.timeout_seconds if seconds is None else seconds
    try:
        async with (
            asyncio.timeout(CONNECT_TIMEOUT_S + seconds),
            open_session(name, config) as session,
        ):
            listed = await list_tools(session)
            by_name = {s.name: s.tool for s in select(name, config, listed, lambda _: None)}
            own = by_name.get(tool, tool)
            if own not in {t.name for t in listed}:
                raise ToolFailed(f"the server {name} has no tool {tool!r}")
            result = await session.call_tool(own, dict(args), read_timeout_seconds=seconds)
    except ToolFailed:
        raise
    except TimeoutError:
        raise ToolFailed(f"timed out after {seconds:g} s") from None
    except Exception as exc:
        raise ToolFailed(describe(exc)) from None
    return to_output(result)
