"""The HTTP front door's checks, before bolt sees a request: the signature first
(401, including a timestamp that is not a number, which bolt's own check turns
into a 500), then the payload's shape (400 for what no Slack request looks
like), so bolt only ever dispatches requests it can read."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web
from slack_sdk.signature import SignatureVerifier

log = logging.getLogger("switchboard.slack")

EVENTS_PATH = "/slack/events"
COMMANDS_PATH = "/slack/commands"
INTERACTIVITY_PATH = "/slack/interactivity"


def signature_ok(verifier: SignatureVerifier, body: bytes, headers: Mapping[str, str]) -> bool:
    """Whether Slack signed `body` (recently). Garbage headers are simply not."""
    timestamp = headers.get("X-Slack-Request-Timestamp", "")
    signature = headers.get("X-Slack-Signature", "")
    if not timestamp.isascii() or not timestamp.isdigit() or not signature:
        return False
    try:
        return verifier.is_valid(body=body, timestamp=timestamp, signature=signature)
    except (ValueError, UnicodeError):
        return False


def shape_problem(path: str, body: bytes) -> str | None:
    """Why a signed body can't be a Slack request for `path`, or None if it can."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "body is not UTF-8"
    if path == EVENTS_PATH:
        return _event_problem(_json_object(text))
    form = parse_qs(text, keep_blank_values=True)
    if path == COMMANDS_PATH:
        command = form.get("command", [""])[0]
        return None if command.startswith("/") else "not a slash command"
    if path == INTERACTIVITY_PATH:
        payload = form.get("payload", [""])[0]
        value = _json_object(payload)
        if value is None:
            return "no interaction payload"
        return None if isinstance(value.get("type"), str) else "interaction without a type"
    return None


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _event_problem(envelope: dict[str, Any] | None) -> str | None:
    if envelope is None:
        return "not a JSON object"
    kind = envelope.get("type")
    if not isinstance(kind, str):
        return "envelope without a type"
    if kind == "event_callback":
        event = envelope.get("event")
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            return "event_callback without an event"
    return None


def rejected(request: web.Request, status: int, reason: str) -> web.Response:
    """Answer a request we won't dispatch, with one WARNING (never the body)."""
    log.warning(
        "slack.rejected path=%s status=%d reason=%s remote=%s",
        request.path,
        status,
        reason,
        request.remote,
    )
    return web.json_response({"error": reason}, status=status)
