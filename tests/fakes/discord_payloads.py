"""Payloads and responses of the fake Discord (tests/fakes/discord.py): the ids and
users of its small world, Discord-shaped objects (messages, members, the guild with
its roles, channels and a thread), Discord's error bodies and how `allowed_mentions`
decides who is notified."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

TOKEN = "MTEwMDAwMDAwMDAwMDAwMDAwMQ.fake.discord-test-token"
BOT_ID = "1100000000000000001"
APP_ID = BOT_ID  # for bots created today the application id is the bot user's id
GUILD_ID = "1200000000000000001"
BOT_ROLE_ID = "1200000000000000009"
MODS_ROLE_ID = "1200000000000000008"
CHANNEL_ID = "1300000000000000001"
OTHER_CHANNEL_ID = "1300000000000000002"
THREAD_ID = "1300000000000000003"
DM_CHANNEL_ID = "1400000000000000001"
BOT_USER: dict[str, Any] = {
    "id": BOT_ID,
    "username": "switchboard",
    "discriminator": "0",
    "global_name": None,
    "avatar": None,
    "bot": True,
    "public_flags": 0,
}
ALICE: dict[str, Any] = {
    "id": "1500000000000000001",
    "username": "alice",
    "discriminator": "0",
    "global_name": "Alice",
    "avatar": None,
    "public_flags": 0,
}
BOB: dict[str, Any] = {
    "id": "1500000000000000002",
    "username": "bob",
    "discriminator": "0",
    "global_name": "Bob",
    "avatar": None,
    "public_flags": 0,
}
EPHEMERAL = 1 << 6
LOADING = 1 << 7
USER_MENTION = re.compile(r"<@!?(\d+)>")
ROLE_MENTION = re.compile(r"<@&(\d+)>")
EVERYONE = re.compile(r"@(everyone|here)\b")


def message_object(
    message_id: str, channel_id: str, author: dict[str, Any], content: str, **fields: Any
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": message_id,
        "channel_id": channel_id,
        "author": author,
        "content": content,
        "timestamp": datetime.now(UTC).isoformat(),
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "components": [],
        "pinned": False,
        "type": 0,
        "flags": 0,
    }
    message.update(fields)
    return message


def member_object() -> dict[str, Any]:
    return {
        "roles": [],
        "nick": None,
        "avatar": None,
        "premium_since": None,
        "joined_at": "2024-01-01T00:00:00.000000+00:00",
        "pending": False,
        "deaf": False,
        "mute": False,
        "flags": 0,
    }


def guild_object() -> dict[str, Any]:
    everyone = {"id": GUILD_ID, "name": "@everyone", "permissions": "1071698660929"}
    roles = [
        {**role_object(), **everyone},
        {**role_object(), "id": MODS_ROLE_ID, "name": "mods", "mentionable": True},
        {
            **role_object(),
            "id": BOT_ROLE_ID,
            "name": "Switchboard",
            "managed": True,
            "tags": {"bot_id": BOT_ID},
        },
    ]
    text = {"type": 0, "guild_id": GUILD_ID, "position": 0, "permission_overwrites": []}
    return {
        "id": GUILD_ID,
        "name": "Test Guild",
        "icon": None,
        "owner_id": ALICE["id"],
        "afk_timeout": 300,
        "verification_level": 0,
        "default_message_notifications": 0,
        "explicit_content_filter": 0,
        "mfa_level": 0,
        "nsfw_level": 0,
        "premium_tier": 0,
        "preferred_locale": "en-US",
        "features": [],
        "emojis": [],
        "stickers": [],
        "roles": roles,
        "member_count": 3,
        "large": False,
        "unavailable": False,
        "joined_at": "2024-01-01T00:00:00.000000+00:00",
        "members": [{**member_object(), "user": BOT_USER, "roles": [BOT_ROLE_ID]}],
        "channels": [
            {**text, "id": CHANNEL_ID, "name": "general"},
            {**text, "id": OTHER_CHANNEL_ID, "name": "random", "position": 1},
        ],
        "threads": [
            {
                "id": THREAD_ID,
                "type": 11,
                "guild_id": GUILD_ID,
                "parent_id": CHANNEL_ID,
                "owner_id": ALICE["id"],
                "name": "a thread",
                "message_count": 1,
                "member_count": 2,
                "thread_metadata": {
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "archive_timestamp": "2024-01-01T00:00:00.000000+00:00",
                    "locked": False,
                },
            }
        ],
        "voice_states": [],
        "presences": [],
        "stage_instances": [],
        "guild_scheduled_events": [],
        "soundboard_sounds": [],
    }


def role_object() -> dict[str, Any]:
    return {
        "color": 0,
        "hoist": False,
        "icon": None,
        "unicode_emoji": None,
        "position": 0,
        "permissions": "0",
        "managed": False,
        "mentionable": False,
        "flags": 0,
    }


def pings(
    content: str, allowed: Mapping[str, Any] | None, reply_author: str | None
) -> frozenset[str]:
    """Who Discord notifies for `content` under `allowed_mentions` (absent: everything
    parsed from the content, and the replied-to author)."""
    if allowed is None:
        parse, users, roles, replied = {"users", "roles", "everyone"}, set(), set(), True
    else:
        parse = set(allowed.get("parse") or ())
        users, roles = set(allowed.get("users") or ()), set(allowed.get("roles") or ())
        replied = bool(allowed.get("replied_user", False))
    pings: set[str] = set()
    if "everyone" in parse:
        pings |= {f"@{m}" for m in EVERYONE.findall(content)}
    pings |= {f"user:{u}" for u in USER_MENTION.findall(content) if "users" in parse or u in users}
    pings |= {f"role:{r}" for r in ROLE_MENTION.findall(content) if "roles" in parse or r in roles}
    if reply_author and replied:
        pings.add(f"user:{reply_author}")
    return frozenset(pings)


def invalid_content(content: str) -> web.Response | None:
    if not content.strip():
        return error(400, 50006, "Cannot send an empty message")
    if len(content) > 2000:
        return error(400, 50035, "Invalid Form Body (content: Must be 2000 or fewer in length.)")
    return None


def invalid_components(components: Any) -> web.Response | None:
    """Discord's checks on message components: action rows (type 1) of at most five
    buttons (type 2), each with a label of 1-80 characters and a custom_id of 1-100
    characters, unique in the message, and a style of 1-4."""
    if components is None:
        return None
    bad = error(400, 50035, "Invalid Form Body (components)")
    if not isinstance(components, list) or len(components) > 5:
        return bad
    seen: set[str] = set()
    for row in components:
        buttons = row.get("components") if isinstance(row, dict) else None
        if row.get("type") != 1 or not isinstance(buttons, list) or not 0 < len(buttons) <= 5:
            return bad
        for button in buttons:
            custom_id = str(button.get("custom_id") or "")
            if (
                button.get("type") != 2
                or button.get("style") not in (1, 2, 3, 4)
                or not 0 < len(str(button.get("label") or "")) <= 80
                or not 0 < len(custom_id) <= 100
                or custom_id in seen
            ):
                return bad
            seen.add(custom_id)
    return None


def json_response(
    body: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """JSON with Discord's exact `Content-Type: application/json` (no charset), which
    is what discord.py checks before decoding a body."""
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **(headers or {})}
    return web.Response(body=data, status=status, headers=headers)


def error(status: int, code: int, text: str) -> web.Response:
    return json_response({"message": text, "code": code}, status=status)


def rate_limited(retry_after: float, is_global: bool) -> web.Response:
    body = {
        "message": "You are being rate limited.",
        "retry_after": retry_after,
        "global": is_global,
    }
    headers = {
        "Retry-After": str(int(retry_after + 0.999)),
        "X-RateLimit-Scope": "global" if is_global else "user",
        "Via": "1.1 google",
    }
    if is_global:
        headers["X-RateLimit-Global"] = "true"
    return json_response(body, status=429, headers=headers)


def application_object(message_content_enabled: bool) -> dict[str, Any]:
    """GET /oauth2/applications/@me. Flag 1 << 19: GATEWAY_MESSAGE_CONTENT_LIMITED, the
    message content intent switched on in the developer portal (an unverified bot)."""
    return {
        "id": APP_ID,
        "name": "Switchboard",
        "icon": None,
        "description": "",
        "rpc_origins": [],
        "bot_public": True,
        "bot_require_code_grant": False,
        "bot": BOT_USER,
        "owner": ALICE,
        "team": None,
        "verify_key": "0" * 64,
        "flags": (1 << 19) if message_content_enabled else 0,
        "interactions_endpoint_url": None,
        "tags": [],
    }


def gateway_bot_object(gateway_url: str) -> dict[str, Any]:
    session_start_limit = {
        "total": 1000,
        "remaining": 999,
        "reset_after": 14400000,
        "max_concurrency": 1,
    }
    return {"url": gateway_url, "shards": 1, "session_start_limit": session_start_limit}


def command_object(command: Mapping[str, Any], command_id: str, version: str) -> dict[str, Any]:
    """An application command as PUT /applications/{id}/commands returns it."""
    defaults: dict[str, Any] = {
        "type": 1,
        "default_member_permissions": None,
        "dm_permission": True,
        "nsfw": False,
        "options": [],
    }
    return {"id": command_id, "application_id": APP_ID, "version": version, **defaults, **command}


def interaction_object(
    *,
    interaction_id: str,
    token: str,
    data: dict[str, Any],
    channel_id: str,
    user: Mapping[str, Any],
    guild: bool,
) -> dict[str, Any]:
    """An INTERACTION_CREATE `d` for an application command, with the fields of the
    Interaction Structure in Discord's Receiving and Responding docs."""
    payload: dict[str, Any] = {
        "id": interaction_id,
        "application_id": APP_ID,
        "type": 2,
        "data": data,
        "channel_id": channel_id,
        "channel": {"id": channel_id, "type": 0 if guild else 1},
        "token": token,
        "version": 1,
        "app_permissions": "562949953421311",
        "locale": "en-US",
        "entitlements": [],
        "authorizing_integration_owners": {"0": GUILD_ID if guild else "0"},
        "context": 0 if guild else 1,
        "attachment_size_limit": 10485760,
    }
    if guild:
        payload.update(guild_id=GUILD_ID, guild_locale="en-US")
        payload["member"] = {
            **member_object(),
            "user": dict(user),
            "permissions": "2248473465835073",
        }
        payload["channel"]["guild_id"] = GUILD_ID
    else:
        payload["user"] = dict(user)
    return payload


def component_interaction_object(
    *,
    interaction_id: str,
    token: str,
    custom_id: str,
    message: Mapping[str, Any],
    user: Mapping[str, Any],
) -> dict[str, Any]:
    """An INTERACTION_CREATE `d` for a press on a button (type 3, MESSAGE_COMPONENT)
    under `message`."""
    guild = "guild_id" in message
    payload = interaction_object(
        interaction_id=interaction_id,
        token=token,
        data={"custom_id": custom_id, "component_type": 2},
        channel_id=str(message["channel_id"]),
        user=user,
        guild=guild,
    )
    payload.update(type=3, message=dict(message))
    return payload


def attachment_object(
    file_id: str, filename: str, size: int, url: str, content_type: str | None
) -> dict[str, Any]:
    attachment: dict[str, Any] = {"id": file_id, "filename": filename, "size": size}
    attachment.update(url=url, proxy_url=url)
    if content_type:
        attachment["content_type"] = content_type
    return attachment


def user_message_object(
    message_id: str,
    channel_id: str,
    author: Mapping[str, Any],
    content: str,
    guild: bool,
    referenced: Mapping[str, Any] | None,
    attachments: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """A person's message as MESSAGE_CREATE carries it: mentions resolved from the
    content, in a guild with `guild_id` and the partial `member` objects, as a reply
    (type 19) with the replied-to message, whose author it pings by default."""
    users = {u["id"]: u for u in (ALICE, BOB, BOT_USER)}
    ids = dict.fromkeys(USER_MENTION.findall(content))
    message = message_object(
        message_id,
        channel_id,
        dict(author),
        content,
        mentions=[dict(users[i]) for i in ids if i in users],
        mention_roles=list(dict.fromkeys(ROLE_MENTION.findall(content))),
        mention_everyone=bool(EVERYONE.search(content)),
        attachments=list(attachments),
    )
    if referenced is not None:
        message["type"] = 19
        message["message_reference"] = reference_object(referenced["id"], channel_id)
        message["referenced_message"] = referenced
        if referenced["author"]["id"] not in ids:
            message["mentions"].append(dict(referenced["author"]))
    if guild:
        message["guild_id"] = GUILD_ID
        message["member"] = member_object()
        for user in message["mentions"]:
            user["member"] = member_object()
    return message


def reference_object(message_id: str, channel_id: str) -> dict[str, Any]:
    """A reply's `message_reference` as received (channel_id always present)."""
    reference = {"type": 0, "message_id": message_id, "channel_id": channel_id}
    if channel_id != DM_CHANNEL_ID:
        reference["guild_id"] = GUILD_ID
    return reference
