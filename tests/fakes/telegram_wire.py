"""The Bot API's wire format for the fake server (tests/fakes/telegram.py): error
answers, recorded calls, and how request parameters arrive (query string, urlencoded or
multipart form with JSON-encoded values, or a JSON body)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

STRING_PARAMS = {
    "text", "parse_mode", "url", "secret_token", "action", "file_id", "caption",
    "ip_address", "language_code", "business_connection_id", "message_effect_id",
    "inline_message_id", "callback_query_id",
}  # fmt: skip
"""Parameters that are strings even when they look like JSON ("123", "true")."""


@dataclass(frozen=True, slots=True)
class ApiError:
    status: int
    description: str
    retry_after: int | None = None


def flood(retry_after: int = 3) -> ApiError:
    return ApiError(429, f"Too Many Requests: retry after {retry_after}", retry_after)


def bad_request(description: str) -> ApiError:
    return ApiError(400, f"Bad Request: {description}")


def server_error(description: str = "Internal Server Error") -> ApiError:
    return ApiError(500, description)


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    at: float
    status: int = 200
    result: Any = None
    description: str | None = None
    visible_text: str | None = None
    """sendMessage/editMessageText: the text a user sees (tags and entities resolved)."""

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def chat_id(self) -> str | None:
        value = self.params.get("chat_id")
        return None if value is None else str(value)


@dataclass
class Scripted:
    method: str
    error: ApiError
    chat_id: str | None


@dataclass
class StoredFile:
    data: bytes
    path: str
    unique_id: str


@dataclass
class Webhook:
    url: str
    secret_token: str | None
    allowed_updates: list[str] | None = None
    deliveries: list[tuple[int, int]] = field(default_factory=list)
    """(update_id, HTTP status) of every delivery attempt."""


class Refused(Exception):
    def __init__(self, error: ApiError) -> None:
        super().__init__(error.description)
        self.error = error


def error_response(error: ApiError) -> web.Response:
    body: dict[str, Any] = {
        "ok": False,
        "error_code": error.status,
        "description": error.description,
    }
    if error.retry_after is not None:
        body["parameters"] = {"retry_after": error.retry_after}
    return web.json_response(body, status=error.status)


_CANONICAL = {
    name.lower(): name
    for name in (
        "getMe", "getUpdates", "setWebhook", "deleteWebhook", "setMyCommands", "sendMessage",
        "sendChatAction", "editMessageText", "getFile", "answerCallbackQuery",
        "sendMessageDraft", "deleteMessage",
    )
}  # fmt: skip


def canonical(method: str) -> str:
    return _CANONICAL.get(method.lower(), method)


async def read_params(request: web.Request) -> dict[str, Any]:
    """Query string + body (JSON, urlencoded or multipart), values decoded as the Bot API
    does: JSON-encoded objects, arrays, numbers and booleans; strings as they are."""
    raw: dict[str, Any] = dict(request.query)
    if request.can_read_body:
        if request.content_type == "application/json":
            body = await request.json()
            return {**raw, **(body if isinstance(body, dict) else {})}
        form = await request.post()
        raw.update({k: v for k, v in form.items() if isinstance(v, str)})
    return {k: _decode(k, v) for k, v in raw.items()}


def _decode(name: str, value: Any) -> Any:
    if not isinstance(value, str) or name in STRING_PARAMS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def inline_keyboard(markup: Any) -> list[list[dict[str, Any]]] | None:
    """The `inline_keyboard` of a `reply_markup`, checked as Telegram does (each
    button has a text and 1-64 bytes of callback_data); raises `Refused`."""
    if markup is None:
        return None
    rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise Refused(bad_request("can't parse reply keyboard markup JSON object"))
    for row in rows:
        for button in row:
            if not isinstance(button, dict) or not str(button.get("text") or "").strip():
                raise Refused(bad_request("BUTTON_TEXT_EMPTY"))
            data = button.get("callback_data")
            if not isinstance(data, str) or not 1 <= len(data.encode()) <= 64:
                raise Refused(bad_request("BUTTON_DATA_INVALID"))
    return rows
