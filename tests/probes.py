"""A tool whose behaviour each test scripts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.ports import ToolContext
from bot.types import Role


@dataclass
class ProbeTool:
    """A tool whose behaviour each test scripts."""

    name: str
    behaviour: Any = None
    description: str = "A test tool."
    input_schema: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {"x": {"type": "string"}}}
    )
    min_role: Role = Role.GUEST
    module: str = "test"
    effect: str = "read"
    """Declared: a probe only reads (undeclared tools count as `external`)."""
    trusted_output: bool = True
    """Its result is the test's own text; False: content from elsewhere (marked)."""
    calls: list[Mapping[str, Any]] = field(default_factory=list)
    contexts: list[ToolContext] = field(default_factory=list)
    """each call's context, in order"""

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        self.calls.append(args)
        self.contexts.append(ctx)
        if self.behaviour is None:
            return f"{self.name} ok {args.get('x', '')}".strip()
        result: str = await self.behaviour(self, args)
        return result
