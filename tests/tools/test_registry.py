"""The tool registry: which tools a run gets, kept between runs and made again
once a tool is added; a tool's definition is the same object while it stays
the same."""

from __future__ import annotations

from bot.tools.registry import ToolRegistry, tool_spec
from bot.types import Role
from tests.probes import ProbeTool


def test_available_follows_role_and_modules_and_tools_added_later() -> None:
    registry = ToolRegistry([ProbeTool("a"), ProbeTool("b", min_role=Role.ADMIN, module="ops")])
    assert [t.name for t in registry.available(Role.USER, None)] == ["a"]
    assert [t.name for t in registry.available(Role.ADMIN, None)] == ["a", "b"]
    assert [t.name for t in registry.available(Role.ADMIN, ["ops"])] == ["b"]
    registry.add(ProbeTool("c", module="ops"))  # asked before: the answers are made again
    assert [t.name for t in registry.available(Role.USER, None)] == ["a", "c"]
    assert [t.name for t in registry.available(Role.ADMIN, ["ops"])] == ["b", "c"]
    mine = registry.available(Role.USER, None)
    mine.clear()  # a caller's list is its own
    assert len(registry.available(Role.USER, None)) == 2


def test_what_is_derived_from_the_tools_is_made_once_until_a_tool_is_added() -> None:
    registry = ToolRegistry([ProbeTool("a")])
    made: list[int] = []

    def names(tools: ToolRegistry) -> frozenset[str]:
        made.append(1)
        return frozenset(t.name for t in tools.available(Role.OWNER, None))

    assert registry.derived(names) == {"a"}
    assert registry.derived(names) == {"a"} and len(made) == 1
    registry.add(ProbeTool("b"))
    assert registry.derived(names) == {"a", "b"} and len(made) == 2


def test_a_tools_definition_is_the_same_object_until_the_tool_changes() -> None:
    tool = ProbeTool("a")
    first = tool_spec(tool)
    assert tool_spec(tool) is first
    assert (first.name, first.description, dict(first.input_schema)) == (
        "a",
        "A test tool.",
        dict(tool.input_schema),
    )
    tool.description = "Another text."
    changed = tool_spec(tool)
    assert changed is not first and changed.description == "Another text."
    assert tool_spec(ProbeTool("a")) is not changed  # another tool of the same name


def test_groups_are_replaced_whole_and_ordered_by_name() -> None:
    registry = ToolRegistry([ProbeTool("core")])
    registry.replace("mcp:zeta", [ProbeTool("z1")])
    registry.replace("mcp:alpha", [ProbeTool("a2"), ProbeTool("a1")])
    assert [t.name for t in registry.available(Role.USER, None)] == ["core", "a2", "a1", "z1"]
    registry.replace("mcp:alpha", [ProbeTool("a3")])  # a new list replaces the old
    assert [t.name for t in registry.available(Role.USER, None)] == ["core", "a3", "z1"]
    assert registry.get("a1") is None and registry.get("a3") is not None
    assert registry.replace("mcp:zeta", [ProbeTool("core"), ProbeTool("z2")]) == ["core"]
    assert [t.name for t in registry.available(Role.USER, None)] == ["core", "a3", "z2"]
    registry.replace("mcp:zeta", [])
    assert [t.name for t in registry.available(Role.USER, None)] == ["core", "a3"]


def test_a_tool_offered_in_some_personas_only() -> None:
    only_sales = ProbeTool("quote")
    only_sales.personas = ("sales",)  # type: ignore[attr-defined]
    registry = ToolRegistry([ProbeTool("core"), only_sales])
    assert [t.name for t in registry.available(Role.USER, None, "default")] == ["core"]
    assert [t.name for t in registry.available(Role.USER, None, "sales")] == ["core", "quote"]
    assert len(registry.available(Role.USER, None)) == 2  # no persona given: all
