"""Editing and deleting messages on the fake Discord (tests/fakes/discord.py):
``PATCH /channels/{channel}/messages/{message}`` and
``DELETE /channels/{channel}/messages/{message}``, as Discord answers them.

PATCH: only the author may edit (a bot's own messages: 403 code 50005 otherwise); an
unknown or deleted message is 404 code 10008; `content` is checked like a new message
(not empty, at most 2000 characters) and so are `components`; the answer is the whole
message object with `edited_timestamp` set, and the gateway gets a MESSAGE_UPDATE with
it. Editing does not notify anyone again (`Posted.pings` stays what the post decided).
DELETE: 204 No Content, MESSAGE_DELETE on the gateway (`{id, channel_id, guild_id}`);
deleting another user's message needs Manage Messages, which the bot lacks here (403
code 50013). Both can be answered with a 429 (`FakeDiscord.rate_limit(..., method=)`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tests.fakes.discord_payloads import (
    BOT_ID,
    DM_CHANNEL_ID,
    GUILD_ID,
    error,
    invalid_components,
    invalid_content,
    json_response,
)

if TYPE_CHECKING:
    from tests.fakes.discord import FakeDiscord, Posted


async def edit_message(fake: FakeDiscord, request: web.Request) -> web.Response:
    channel_id, message_id = request.match_info["channel"], request.match_info["message"]
    if limited := fake.take_rate_limit("PATCH", channel_id):
        return limited
    posted, message = _find(fake, channel_id, message_id)
    if message is None:
        return error(404, 10008, "Unknown Message")
    if message["author"]["id"] != BOT_ID:
        return error(403, 50005, "Cannot edit a message authored by another user")
    body: dict[str, Any] = await request.json()
    if "content" in body:
        content = str(body.get("content") or "")
        if problem := invalid_content(content):
            return problem
        message["content"] = content
        if posted is not None:
            posted.content = content
            posted.edits.append(content)
    if "components" in body:
        if problem := invalid_components(body["components"]):
            return problem
        message["components"] = body["components"] or []
        if posted is not None:
            posted.components = body["components"] or None
    message["edited_timestamp"] = datetime.now(UTC).isoformat()
    await fake.dispatch("MESSAGE_UPDATE", message)
    return json_response(message)


async def delete_message(fake: FakeDiscord, request: web.Request) -> web.Response:
    channel_id, message_id = request.match_info["channel"], request.match_info["message"]
    if limited := fake.take_rate_limit("DELETE", channel_id):
        return limited
    posted, message = _find(fake, channel_id, message_id)
    if message is None:
        return error(404, 10008, "Unknown Message")
    if message["author"]["id"] != BOT_ID:
        return error(403, 50013, "Missing Permissions")
    fake.deleted_ids.add(message_id)
    if posted is not None:
        posted.deleted = True
    event = {"id": message_id, "channel_id": channel_id}
    if channel_id != DM_CHANNEL_ID:
        event["guild_id"] = GUILD_ID
    await fake.dispatch("MESSAGE_DELETE", event)
    return web.Response(status=204)


def _find(
    fake: FakeDiscord, channel_id: str, message_id: str
) -> tuple[Posted | None, dict[str, Any] | None]:
    message = fake.message(message_id)
    if message is None or message["channel_id"] != channel_id or message_id in fake.deleted_ids:
        return None, None
    posted = next((p for p in fake.posted if p.id == message_id), None)
    return posted, message
