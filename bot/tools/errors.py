"""The error channel: a failed tool's full error is stored under an id; the LLM
gets a one-line summary it can quote, and `get_error_detail` fetches the rest
(only for the user whose run failed, and admins: see `bot.tools.access`).
"""

from __future__ import annotations

import logging
import secrets
import traceback
from collections.abc import Mapping
from typing import Any

from sqlmodel import select

from bot.errors import ToolFailed
from bot.ports import ToolContext
from bot.store import Store
from bot.store.models import ToolError
from bot.tools.access import may_read, refusal
from bot.types import utcnow

log = logging.getLogger("switchboard.tools")

SUMMARY_CHARS = 100
FALLBACK_CHARS = 500


def new_error_id() -> str:
    return f"err_{utcnow():%Y%m%d_%H%M%S}_{secrets.token_hex(3)}"


def summarize(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if not str(exc).strip():
        text = type(exc).__name__
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


class ErrorChannel:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def report(
        self, tool_name: str, args: Mapping[str, Any], exc: BaseException, ctx: ToolContext
    ) -> str:
        """Store the error; return the text the LLM sees. Never raises."""
        error_id = new_error_id()
        detail = "".join(traceback.format_exception(exc))
        summary = summarize(exc)
        log.warning(
            "tool.failed tool=%s error_id=%s run=%s conversation=%s: %s",
            tool_name,
            error_id,
            ctx.run_id,
            ctx.conversation_key,
            summary,
        )
        try:
            async with self._store.write() as session:
                session.add(
                    ToolError(
                        id=error_id,
                        conversation_id=ctx.conversation_id,
                        run_id=ctx.run_id,
                        tool_name=tool_name,
                        arguments=_jsonable(args),
                        summary=summary,
                        detail=detail,
                    )
                )
        except Exception:
            log.exception("tool.error_not_stored tool=%s error_id=%s", tool_name, error_id)
            text = " ".join(f"{type(exc).__name__}: {exc}".split())
            return f"Tool '{tool_name}' failed: {text[:FALLBACK_CHARS]}"
        return f"Tool '{tool_name}' failed: {summary} [Error ID: {error_id}]"

    async def detail(self, error_id: str, ctx: ToolContext) -> str | None:
        """The error's details; None when there is no such error in the
        conversation; `ToolFailed` when it belongs to another person's run."""
        async with self._store.read() as session:
            row = (
                await session.exec(
                    select(ToolError).where(
                        ToolError.id == error_id, ToolError.conversation_id == ctx.conversation_id
                    )
                )
            ).first()
            allowed = row is not None and await may_read(session, row.run_id, ctx)
        if row is None:
            return None
        if not allowed:
            log.info("tool.error_detail_refused error_id=%s user=%s", error_id, ctx.user_id)
            raise ToolFailed(refusal(f"Error {error_id}"))
        return (
            f"Error {row.id} in tool '{row.tool_name}' at {row.created_at:%Y-%m-%d %H:%M:%S} UTC\n"
            f"Arguments: {row.arguments}\n\n{row.detail}"
        )


def _jsonable(args: Mapping[str, Any]) -> dict[str, Any]:
    import json

    try:
        return dict(json.loads(json.dumps(dict(args), default=str)))
    except (TypeError, ValueError):
        return {"repr": repr(args)[:1000]}
