"""All tools, filtered per run by the user's role and the persona's modules."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from bot.errors import ConfigError
from bot.llm.types import ToolSpec
from bot.ports import Tool
from bot.types import Role


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ConfigError(f"two tools are named {tool.name!r}")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def available(self, role: Role, modules: Sequence[str] | None) -> list[Tool]:
        """Tools this role may use, limited to `modules` (None: every module)."""
        return [
            tool
            for tool in self._tools.values()
            if role.at_least(tool.min_role) and (modules is None or tool.module in modules)
        ]

    def __len__(self) -> int:
        return len(self._tools)


def tool_spec(tool: Tool) -> ToolSpec:
    return ToolSpec(tool.name, tool.description, tool.input_schema)
