"""Memory tools (module "memory"): save, search and read a user's memories.

Memories belong to the user of the run (`ToolContext.user_id`): nobody reads
another person's memories through these tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.errors import ToolFailed
from bot.ports import Tool, ToolContext
from bot.store.memories import MemoryStore
from bot.types import Role

MAX_SEARCH_RESULTS = 20


class MemorySave:
    name = "memory_save"
    effect = "private_write"
    trusted_output = True
    description = (
        "Save one durable fact about the person you are talking with (a preference, a "
        "name, a decision, an ongoing project) to your long-term memory. One fact per call, "
        "written so it makes sense on its own later."
    )
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The fact, self-contained"}},
        "required": ["text"],
    }
    min_role = Role.GUEST
    module = "memory"
    private_result = True

    def __init__(self, memories: MemoryStore) -> None:
        self._memories = memories

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        try:
            record, created = await self._memories.save(
                ctx.user_id,
                str(args.get("text", "")),
                conversation_id=ctx.conversation_id,
                run_id=ctx.run_id,
            )
        except ValueError as exc:
            raise ToolFailed(str(exc)) from None
        return (
            f"Saved to memory (#{record.id})." if created else f"Already in memory (#{record.id})."
        )


class MemorySearch:
    name = "memory_search"
    effect = "read"
    description = (
        "Search your long-term memory of the person you are talking with. Give a few "
        "keywords; any of them may match (prefixes count: 'deploy' finds 'deployment')."
    )
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Keywords"},
            "limit": {"type": "integer", "description": "At most this many (default 5)"},
        },
        "required": ["query"],
    }
    min_role = Role.GUEST
    module = "memory"
    private_result = True

    def __init__(self, memories: MemoryStore) -> None:
        self._memories = memories

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        query = str(args.get("query", "")).strip()
        if not query:
            raise ToolFailed("query is required")
        try:
            limit = max(1, min(int(args.get("limit") or 5), MAX_SEARCH_RESULTS))
        except (TypeError, ValueError):
            raise ToolFailed("limit must be a number") from None
        found = await self._memories.search(ctx.user_id, query, limit)
        if not found:
            return f"No memories match {query!r}."
        return "\n".join(record.line() for record in found)


class MemoryGet:
    name = "memory_get"
    effect = "read"
    description = "Read one memory by its number (#id), as shown by memory_search."
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {"id": {"type": "integer", "description": "The memory's number"}},
        "required": ["id"],
    }
    min_role = Role.GUEST
    module = "memory"
    private_result = True

    def __init__(self, memories: MemoryStore) -> None:
        self._memories = memories

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        try:
            memory_id = int(str(args.get("id", "")).lstrip("#"))
        except ValueError:
            raise ToolFailed("id must be a memory number such as 12") from None
        record = await self._memories.get(ctx.user_id, memory_id)
        if record is None:
            raise ToolFailed(f"no memory #{memory_id}")
        return f"#{record.id} (saved {record.created_at:%Y-%m-%d %H:%M} UTC): {record.text}"


def memory_tools(memories: MemoryStore) -> list[Tool]:
    return [MemorySave(memories), MemorySearch(memories), MemoryGet(memories)]
