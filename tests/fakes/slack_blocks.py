"""Block Kit as the fake Slack checks it (sections, actions blocks of buttons, with
Slack's documented limits), and the `block_actions` interaction payload Slack sends
when someone presses a button (shape as in Slack's interactivity docs)."""

from __future__ import annotations

import time
import uuid
from typing import Any

TEAM_ID = "T0001"  # the fake's workspace (tests.fakes.slack.TEAM_ID)


def blocks_problem(blocks: Any) -> str | None:
    """Why Slack would refuse these `blocks` (`invalid_blocks`), or None."""
    if not isinstance(blocks, list) or not 0 < len(blocks) <= 50:
        return "blocks must be a list of 1-50 blocks"
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "section":
            text = block.get("text") or {}
            if text.get("type") not in ("mrkdwn", "plain_text"):
                return "section text must be mrkdwn or plain_text"
            if not 0 < len(str(text.get("text") or "")) <= 3000:
                return "section text must be 1-3000 characters"
        elif kind == "actions":
            if problem := _actions_problem(block.get("elements")):
                return problem
        else:
            return f"unsupported block type {kind!r} in this fake"
    return None


def _actions_problem(elements: Any) -> str | None:
    if not isinstance(elements, list) or not 0 < len(elements) <= 25:
        return "actions need 1-25 elements"
    ids = [e.get("action_id") for e in elements if isinstance(e, dict)]
    if len(set(ids)) != len(elements):
        return "action_id must be unique within the block"
    for element in elements:
        text = element.get("text") or {}
        if element.get("type") != "button" or text.get("type") != "plain_text":
            return "buttons need a plain_text text"
        if not 0 < len(str(text.get("text") or "")) <= 75:
            return "button text must be 1-75 characters"
        if not 0 < len(str(element.get("action_id"))) <= 255:
            return "action_id must be 1-255 characters"
        if len(str(element.get("value") or "")) > 2000:
            return "value must be at most 2000 characters"
    return None


def block_actions(
    message: dict[str, Any],
    action: dict[str, Any],
    *,
    user: str = "U0ALICE",
    name: str = "alice",
    response_url: str = "https://hooks.slack.com/actions/T0001/1/xyz",
) -> dict[str, Any]:
    """The payload Slack sends when `user` presses the button `action` (an element
    of the posted `message`'s actions block, as `FakeSlack.messages` holds it)."""
    action_ts = f"{time.time():.6f}"
    container: dict[str, Any] = {
        "type": "message",
        "message_ts": message["ts"],
        "channel_id": message["channel"],
        "is_ephemeral": False,
    }
    posted: dict[str, Any] = {
        "type": "message",
        "user": "UBOT0001",
        "ts": message["ts"],
        "text": message["text"],
        "blocks": message["blocks"],
    }
    if message.get("thread_ts"):
        container["thread_ts"] = posted["thread_ts"] = message["thread_ts"]
    return {
        "type": "block_actions",
        "user": {"id": user, "username": name, "name": name, "team_id": TEAM_ID},
        "api_app_id": "A0001",
        "token": "one-long-verification-token",
        "container": container,
        "trigger_id": f"13345224609.738474920.{uuid.uuid4().hex[:16]}",
        "team": {"id": TEAM_ID, "domain": "example"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": message["channel"], "name": "general"},
        "message": posted,
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [
            {
                "action_id": action["action_id"],
                "block_id": "switchboard.buttons",
                "text": action["text"],
                "value": action.get("value"),
                "type": "button",
                "action_ts": action_ts,
            }
        ],
    }
