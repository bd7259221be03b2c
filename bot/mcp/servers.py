"""Every configured MCP server of this process (`McpServers`): started in the
background with the service (it answers with a server down), its tools put in
the tool registry as a group of their own (`publish`), replaced whenever the
server lists them again, and its state for the operator (`statuses`: the
`/admin` overview, `/readyz`'s detail, where a server down never makes the
service unready).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence

from bot.config import McpSettings
from bot.mcp.link import ServerLink
from bot.mcp.metrics import McpMetrics
from bot.mcp.status import ServerStatus
from bot.mcp.tools import McpTool, select, unknown_names
from bot.ports import Tool

log = logging.getLogger("switchboard.mcp")

Publish = Callable[[str, Sequence[Tool]], Sequence[str]]
"""Put a group's tools in place of what it had (`ToolRegistry.replace`);
the names left out because another tool has them."""


def group(server: str) -> str:
    """The registry group of a server's tools."""
    return f"mcp:{server}"


class McpServers:
    def __init__(
        self,
        settings: McpSettings,
        publish: Publish,
        metrics: McpMetrics | None = None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._publish = publish
        self._metrics = metrics
        sdk = logging.getLogger("mcp")  # its warnings repeat ours (mcp.down); errors still show
        if sdk.level == logging.NOTSET:
            sdk.setLevel(logging.ERROR)
        self._offered: dict[str, tuple[McpTool, ...]] = {}
        self._warned: dict[str, set[str]] = {}
        self.links = {
            name: ServerLink(
                name,
                config,
                on_tools=self._listed,
                on_state=self._state,
                environ=environ,
            )
            for name, config in settings.servers.items()
        }

    def __len__(self) -> int:
        return len(self.links)

    def start(self) -> None:
        """Connect every server in the background."""
        for link in self.links.values():
            link.start()
        if self.links:
            log.info("mcp.starting servers=%s", ",".join(self.links))

    async def close(self) -> None:
        await asyncio.gather(*(link.close() for link in self.links.values()))

    def statuses(self) -> list[ServerStatus]:
        return [
            ServerStatus(
                name=name,
                transport=link.transport,
                state=link.state,
                tools=tuple(tool.name for tool in self._offered.get(name, ())),
                last_error=link.last_error,
                since=link.changed_at,
            )
            for name, link in self.links.items()
        ]

    def _listed(self, link: ServerLink) -> None:
        config = link.config

        def warn(problem: str) -> None:
            if problem not in self._warned.setdefault(link.name, set()):
                self._warned[link.name].add(problem)
                log.warning("mcp.tool_skipped server=%s: %s", link.name, problem)

        chosen = select(link.name, config, link.listed, warn)
        for name in unknown_names(config, link.listed):
            warn(f"the config names {name}, which the server does not list")
        tools = tuple(McpTool(link, selected, config, self._metrics) for selected in chosen)
        before = [tool.name for tool in self._offered.get(link.name, ())]
        self._offered[link.name] = tools
        clashes = self._publish(group(link.name), tools)
        if clashes:
            self._offered[link.name] = tuple(t for t in tools if t.name not in clashes)
        now = [tool.name for tool in self._offered[link.name]]
        if now != before:
            log.info(
                "mcp.tools server=%s offered=%d listed=%d", link.name, len(now), len(link.listed)
            )

    def _state(self, link: ServerLink) -> None:
        if self._metrics is not None:
            self._metrics.set_up(link.name, link.state == "up")
