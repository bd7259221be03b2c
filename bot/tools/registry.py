"""All tools, filtered per run by the user's role and the persona's modules."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from bot.errors import ConfigError
from bot.llm.types import ServerTool, ToolSpec
from bot.ports import Tool
from bot.types import Role

T = TypeVar("T")


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._available: dict[tuple[Role, tuple[str, ...] | None], tuple[Tool, ...]] = {}
        """`available`'s answers (every run asks), until a tool is added"""
        self._derived: dict[Callable[[ToolRegistry], Any], Any] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ConfigError(f"two tools are named {tool.name!r}")
        self._tools[tool.name] = tool
        self._available.clear()
        self._derived.clear()

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def available(self, role: Role, modules: Sequence[str] | None) -> list[Tool]:
        """Tools this role may use, limited to `modules` (None: every module)."""
        key = (role, None if modules is None else tuple(modules))
        found = self._available.get(key)
        if found is None:
            found = self._available[key] = tuple(
                tool
                for tool in self._tools.values()
                if role.at_least(tool.min_role) and (modules is None or tool.module in modules)
            )
        return list(found)

    def derived(self, make: Callable[[ToolRegistry], T]) -> T:
        """`make(self)`, made once until a tool is added (what every run
        works out of all the tools)."""
        if make not in self._derived:
            self._derived[make] = make(self)
        return self._derived[make]  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self._tools)


def tool_spec(tool: Tool) -> ToolSpec:
    """The definition sent to the model: the same object for the same tool
    while its name, description and schema stay the same (each run makes its
    tools' definitions, twice; and later estimates of a definition's tokens
    are kept by its identity)."""
    name, description, schema = tool.name, tool.description, tool.input_schema
    known = _SPECS.get(id(tool))
    if known is not None and known[0] is tool:
        spec = known[1]
        if spec.name is name and spec.description is description and spec.input_schema is schema:
            return spec
    server: ServerTool | None = getattr(tool, "server", None)  # run by the provider
    spec = ToolSpec(name, description, schema, server)
    if len(_SPECS) >= 1024:
        _SPECS.clear()
    _SPECS[id(tool)] = (tool, spec)  # (the tool kept alive: its id is not reused meanwhile)
    return spec


_SPECS: dict[int, tuple[Tool, ToolSpec]] = {}
