"""Native buttons on Slack (Block Kit): a reply's buttons as an `actions` block
under its last part, and a press (a `block_actions` interaction) as the button's
command said by the presser.

With `blocks`, Slack shows the blocks and uses `text` only for notifications, so
the part's text goes into `section` blocks (mrkdwn, at most 3000 characters each)
above the buttons. Each button's `value` is its command ("/confirm K7Q2MX") and
its `action_id` is "switchboard.button.<n>" (unique within the block, as Slack
requires); the adapter listens for action ids with that prefix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from adapters.slack.parse import PLATFORM
from bot.types import BotIdentity, Button, IncomingMessage

ACTION_PREFIX = "switchboard.button."
ACTION_ID = re.compile(r"^switchboard\.button\.")
SECTION_LIMIT = 3000
MAX_BUTTONS = 25
MAX_VALUE = 2000
MAX_LABEL = 75


def blocks(text: str, buttons: Sequence[Button]) -> list[dict[str, Any]] | None:
    """`text` as section blocks with the buttons under them; None without buttons
    (or when a command is too long for a button's value: the text says how to type
    it)."""
    usable = [b for b in buttons[:MAX_BUTTONS] if b.label.strip()]
    if not usable or any(len(b.command) > MAX_VALUE for b in usable):
        return None
    sections: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": piece}} for piece in _pieces(text)
    ]
    elements = [
        {
            "type": "button",
            "action_id": f"{ACTION_PREFIX}{number}",
            "text": {"type": "plain_text", "text": b.label[:MAX_LABEL], "emoji": True},
            "value": b.command,
        }
        for number, b in enumerate(usable, 1)
    ]
    return [*sections, {"type": "actions", "block_id": "switchboard.buttons", "elements": elements}]


def _pieces(text: str) -> list[str]:
    """`text` cut into pieces of at most SECTION_LIMIT characters, at line breaks
    where possible."""
    pieces: list[str] = []
    rest = text
    while len(rest) > SECTION_LIMIT:
        cut = rest.rfind("\n", 0, SECTION_LIMIT)
        if cut <= 0:
            cut = SECTION_LIMIT
        pieces.append(rest[:cut].rstrip("\n"))
        rest = rest[cut:].lstrip("\n")
    if rest.strip():
        pieces.append(rest)
    return pieces


def parse_press(payload: Mapping[str, Any], bot: BotIdentity) -> IncomingMessage | None:
    """A `block_actions` payload whose action is one of our buttons → its command
    said by the presser, in the channel (and thread) of the message carrying the
    button, addressed to the bot. None for anything else."""
    if payload.get("type") != "block_actions":
        return None
    action = next(
        (
            a
            for a in payload.get("actions") or ()
            if isinstance(a, Mapping) and ACTION_ID.match(str(a.get("action_id") or ""))
        ),
        None,
    )
    user = payload.get("user") or {}
    container = payload.get("container") or {}
    message = payload.get("message") or {}
    channel = (payload.get("channel") or {}).get("id") or container.get("channel_id")
    value = action.get("value") if action else None
    user_id = user.get("id")
    if (
        action is None
        or not isinstance(value, str)
        or not value.startswith("/")
        or not isinstance(user_id, str)
        or user_id == bot.user_id
        or not isinstance(channel, str)
    ):
        return None
    thread = message.get("thread_ts") or container.get("thread_ts")
    stamp = action.get("action_ts") or payload.get("trigger_id")
    team = (payload.get("team") or {}).get("id") or user.get("team_id")
    name = user.get("name") or user.get("username")
    return IncomingMessage(
        platform=PLATFORM,
        platform_user_id=user_id,
        platform_channel_id=channel,
        text=value,
        platform_thread_id=str(thread) if thread else None,
        platform_server_id=str(team) if team else None,
        user_display_name=str(name) if name else None,
        chat_type="direct" if channel.startswith("D") else "group",
        mentions_bot=True,
        event_id=f"{channel}:press:{stamp}",
        raw=payload,
    )
