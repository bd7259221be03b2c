"""Large tool results: stored whole, replaced in the context by a preview and a
reference that the built-in `get_tool_result` tool pages through.

A result longer than `[agent] tool_result_max_chars` would crowd the context
window (and be re-sent on every later call of the conversation). The executor
hands it to `ResultStore.shrink`, which stores it in `tool_results` and returns
the first part with a note naming the reference (``res_…``). References are
scoped to their conversation, and readable only by the user whose run stored
them (and admins): see `bot.tools.access`.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from typing import Any

from bot.errors import ToolFailed
from bot.ports import ToolContext
from bot.store import Store
from bot.store.models import StoredToolResult
from bot.tools.access import may_read, refusal
from bot.types import Role

log = logging.getLogger("switchboard.tools")

NOTE_ROOM = 400
"""Characters kept free for the note after a preview or a page."""


def new_ref() -> str:
    return f"res_{secrets.token_hex(6)}"


class ResultStore:
    def __init__(self, store: Store, max_chars: int = 8000) -> None:
        self._store = store
        self.max_chars = max_chars

    @property
    def preview_chars(self) -> int:
        return max(100, self.max_chars // 2)

    @property
    def page_chars(self) -> int:
        return max(100, self.max_chars - NOTE_ROOM)

    async def shrink(
        self, content: str, *, tool_name: str, tool_use_id: str | None, ctx: ToolContext
    ) -> str:
        """`content` itself when short enough, else a preview and a reference."""
        if len(content) <= self.max_chars:
            return content
        ref = new_ref()
        preview = content[: self.preview_chars]
        try:
            async with self._store.write() as session:
                session.add(
                    StoredToolResult(
                        id=ref,
                        conversation_id=ctx.conversation_id,
                        run_id=ctx.run_id,
                        tool_name=tool_name,
                        tool_use_id=tool_use_id,
                        content=content,
                        chars=len(content),
                    )
                )
        except Exception:
            log.exception("tool.result_not_stored tool=%s run=%s", tool_name, ctx.run_id)
            return (
                f"{preview}\n\n[… truncated: {len(content):,} characters in all; the full "
                "result could not be stored.]"
            )
        log.info("tool.result_stored tool=%s ref=%s chars=%d", tool_name, ref, len(content))
        return (
            f"{preview}\n\n[Showing characters 0–{len(preview):,} of {len(content):,}. The "
            f'whole result is stored as {ref}: call get_tool_result with ref="{ref}" and an '
            f"offset (limit up to {self.page_chars:,}) to read more.]"
        )

    async def keep(
        self,
        content: str,
        *,
        name: str,
        conversation_id: int,
        user_id: int,
        run_id: str | None,
        shown: int,
    ) -> tuple[str, str]:
        """Store a document `user_id` sent (its text, of which the model was
        shown the first `shown` characters) for `get_tool_result`: its first
        part, and the note naming the reference. Raises when it cannot be stored."""
        ref = new_ref()
        async with self._store.write() as session:
            session.add(
                StoredToolResult(
                    id=ref,
                    conversation_id=conversation_id,
                    run_id=run_id,
                    tool_name="document",
                    tool_use_id=None,
                    user_id=user_id,
                    content=content,
                    chars=len(content),
                )
            )
        log.info("document.stored ref=%s chars=%d", ref, len(content))
        note = (
            f"[{name}: showing characters 0–{shown:,} of {len(content):,}. The whole text is "
            f'stored as {ref}: call get_tool_result with ref="{ref}" and offset={shown} '
            f"(limit up to {self.page_chars:,}) to read on.]"
        )
        return ref, note

    async def page(self, ref: str, ctx: ToolContext, offset: int, limit: int) -> str:
        async with self._store.read() as session:
            row = await session.get(StoredToolResult, ref)
            if row is None or row.conversation_id != ctx.conversation_id:
                raise ToolFailed(f"no stored result {ref} in this conversation")
            if row.user_id is not None:  # a document: its sender's
                allowed = row.user_id == ctx.user_id or ctx.role.at_least(Role.ADMIN)
            else:
                allowed = await may_read(session, row.run_id, ctx)
        if not allowed:
            log.info("tool.result_refused ref=%s user=%s", ref, ctx.user_id)
            raise ToolFailed(refusal(f"Stored result {ref}"))
        limit = max(1, min(limit, self.page_chars))
        offset = max(0, offset)
        if offset >= row.chars:
            raise ToolFailed(f"offset {offset:,} is past the end ({row.chars:,} characters)")
        end = min(row.chars, offset + limit)
        more = f" Next: offset={end}." if end < row.chars else " (end)"
        header = (
            f"[{ref} from {row.tool_name}: characters {offset:,}–{end:,} of {row.chars:,}.{more}]"
        )
        return f"{header}\n{row.content[offset:end]}"


class GetToolResult:
    name = "get_tool_result"
    effect = "read"
    description = (
        "Read part of a large tool result that was stored and shown only in part "
        "(its reference looks like res_1a2b3c4d5e6f)."
    )
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "ref": {"type": "string", "description": "The stored result's reference"},
            "offset": {"type": "integer", "description": "First character (default 0)"},
            "limit": {"type": "integer", "description": "How many characters"},
        },
        "required": ["ref"],
    }
    min_role = Role.GUEST
    module = "core"
    private_result = True

    def __init__(self, results: ResultStore) -> None:
        self._results = results

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        ref = str(args.get("ref", "")).strip()
        if not ref:
            raise ToolFailed("ref is required")
        try:
            offset = int(args.get("offset") or 0)
            limit = int(args.get("limit") or self._results.page_chars)
        except (TypeError, ValueError):
            raise ToolFailed("offset and limit must be numbers") from None
        return await self._results.page(ref, ctx, offset, limit)
