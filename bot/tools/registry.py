"""All tools, filtered per run by the user's role and the persona.

Tools are built in (added once, at start) or come in groups that change while
the service runs: an MCP server's tools, replaced as a whole whenever its list
changes (`replace`). A run gets the built-in tools in the order they were
added, then each group's in the order of the groups' names: the same tools in
the same order in every process, so the definitions sent to the model (the
start of every prompt's cached prefix) stay byte-identical.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, TypeVar

from bot.errors import ConfigError
from bot.llm.types import ServerTool, ToolSpec
from bot.ports import Tool
from bot.types import Role

T = TypeVar("T")
log = logging.getLogger("switchboard.tools")

_Key = tuple[Role, tuple[str, ...] | None, str | None]


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._static: dict[str, Tool] = {}
        self._groups: dict[str, tuple[Tool, ...]] = {}
        self._tools: dict[str, Tool] = {}
        """every tool by name: the built-in ones, then the groups' in order"""
        self._available: dict[_Key, tuple[Tool, ...]] = {}
        """`available`'s answers (every run asks), until the tools change"""
        self._derived: dict[Callable[[ToolRegistry], Any], Any] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ConfigError(f"two tools are named {tool.name!r}")
        self._static[tool.name] = tool
        self._changed()

    def replace(self, group: str, tools: Iterable[Tool]) -> list[str]:
        """`tools` in place of what `group` had (an MCP server's tools when
        its list changes; none: the group is gone). A tool whose name another
        tool has is left out; returns the names left out."""
        taken = set(self._static) | {
            t.name for name, kept in self._groups.items() if name != group for t in kept
        }
        chosen: list[Tool] = []
        clashes: list[str] = []
        for tool in tools:
            if tool.name in taken:
                clashes.append(tool.name)
                continue
            taken.add(tool.name)
            chosen.append(tool)
        if chosen:
            self._groups[group] = tuple(chosen)
        else:
            self._groups.pop(group, None)
        self._changed()
        if clashes:
            log.warning("tools.name_taken group=%s: %s", group, ", ".join(clashes))
        return clashes

    def _changed(self) -> None:
        self._tools = dict(self._static)
        for group in sorted(self._groups):
            self._tools.update((tool.name, tool) for tool in self._groups[group])
        self._available.clear()
        self._derived.clear()

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def available(
        self, role: Role, modules: Sequence[str] | None, persona: str | None = None
    ) -> list[Tool]:
        """Tools this role may use, limited to `modules` (None: every module)
        and to those offered in `persona` (a tool's optional `personas`: the
        personas it is offered in; None, or no such attribute: all)."""
        key = (role, None if modules is None else tuple(modules), persona)
        found = self._available.get(key)
        if found is None:
            found = self._available[key] = tuple(
                tool
                for tool in self._tools.values()
                if role.at_least(tool.min_role)
                and (modules is None or tool.module in modules)
                and _offered_in(tool, persona)
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


def _offered_in(tool: Tool, persona: str | None) -> bool:
    personas: Collection[str] | None = getattr(tool, "personas", None)
    return persona is None or personas is None or persona in personas


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
    server: ServerTool | None = getattr(tool, "provider_tool", None)  # run by the provider
    spec = ToolSpec(name, description, schema, server)
    if len(_SPECS) >= 1024:
        _SPECS.clear()
    _SPECS[id(tool)] = (tool, spec)  # (the tool kept alive: its id is not reused meanwhile)
    return spec


_SPECS: dict[int, tuple[Tool, ToolSpec]] = {}
