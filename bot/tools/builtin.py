"""Built-in tools of the "core" module."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bot.errors import ToolFailed
from bot.ports import Tool, ToolContext
from bot.tools.errors import ErrorChannel
from bot.types import Role, utcnow


class GetErrorDetail:
    name = "get_error_detail"
    effect = "read"
    description = (
        "Fetch the full details (traceback, arguments) of a failed tool call by its "
        "error id, e.g. err_20260101_120000_abc123. Only errors of this conversation, "
        "of your own runs."
    )
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {"error_id": {"type": "string", "description": "The [Error ID: …] value"}},
        "required": ["error_id"],
    }
    min_role = Role.GUEST
    module = "core"
    private_result = True

    def __init__(self, errors: ErrorChannel) -> None:
        self._errors = errors

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        error_id = str(args.get("error_id", "")).strip()
        if not error_id:
            raise ToolFailed("error_id is required")
        detail = await self._errors.detail(error_id, ctx)
        if detail is None:
            raise ToolFailed(f"no error {error_id} in this conversation")
        return detail


class CurrentTime:
    name = "current_time"
    effect = "read"
    trusted_output = True
    description = "The current date and time in a time zone (IANA name, default UTC)."
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {"timezone": {"type": "string", "description": "e.g. Europe/Paris"}},
    }
    min_role = Role.GUEST
    module = "core"

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        name = str(args.get("timezone") or "UTC")
        try:
            zone = ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise ToolFailed(f"unknown time zone {name!r}; use an IANA name") from None
        now: datetime = utcnow().astimezone(zone)
        return now.strftime(f"%Y-%m-%d %H:%M:%S %Z (%A), {name}")


def core_tools(errors: ErrorChannel) -> list[Tool]:
    return [GetErrorDetail(errors), CurrentTime()]
