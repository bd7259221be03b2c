"""What the rest of the service knows of the MCP servers without loading the
SDK (a process with no server configured never imports it): a server's state
for the operator, and the check of the personas the servers name."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from bot.config import McpSettings
from bot.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ServerStatus:
    name: str
    transport: str
    state: str
    """connecting | up | down | stopped"""
    tools: tuple[str, ...]
    """The names the model sees, of the tools offered now."""
    last_error: str | None
    since: datetime


def check_personas(settings: McpSettings, personas: Collection[str]) -> None:
    """Every persona a server names exists; `ConfigError` naming the key if not."""
    for name, server in settings.servers.items():
        for persona in server.personas or ():
            if persona not in personas:
                known = ", ".join(sorted(personas)) or "none"
                raise ConfigError(
                    f"mcp.servers.{name}.personas: no persona named {persona!r} "
                    f"(the personas are: {known})"
                )
