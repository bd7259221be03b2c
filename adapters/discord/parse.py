"""Raw Discord gateway payloads → `IncomingMessage`. Pure: no network, no discord.py.

`parse_message` reads the `d` object of a `MESSAGE_CREATE` dispatch, `parse_interaction`
the `d` object of an `INTERACTION_CREATE` for a slash command. What we ignore gives
`None`: our own messages, other bots, webhooks (`webhook_id`), crossposts from followed
channels, system messages (any `type` but DEFAULT 0 and REPLY 19), and messages with
neither text nor files.

Conversations: Discord threads are channels with their own id, and a message in a
thread carries the thread's id as `channel_id` (the parent is not in the payload). That
thread id is the conversation's `platform_channel_id` (`platform_thread_id` stays None),
so each thread is its own conversation and replies go to the thread itself.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any, Literal

from bot.types import Attachment, BotIdentity, IncomingMessage, utcnow

PLATFORM = "discord"

DEFAULT_TYPE = 0
REPLY_TYPE = 19
IS_CROSSPOST = 1 << 1
APPLICATION_COMMAND = 2
CHAT_INPUT = 1

_USER_MENTION = re.compile(r"<@!?(\d+)>")


def parse_message(
    payload: Mapping[str, Any],
    bot: BotIdentity,
    *,
    bot_role_ids: Collection[str] = (),
) -> IncomingMessage | None:
    """A `MESSAGE_CREATE` payload as an `IncomingMessage`, or None when we ignore it.

    `bot_role_ids`: the bot's managed role in this guild (discord.py's `Guild.self_role`),
    since people often mention the bot through its role. Neither payload nor
    `BotIdentity` names it."""
    author = _mapping(payload.get("author"))
    author_id = _id(author.get("id"))
    if author_id is None or author_id == bot.user_id or author.get("bot") or author.get("system"):
        return None
    if payload.get("webhook_id") is not None:
        return None
    if payload.get("type", DEFAULT_TYPE) not in (DEFAULT_TYPE, REPLY_TYPE):
        return None
    if int(payload.get("flags") or 0) & IS_CROSSPOST:
        return None
    message_id = _id(payload.get("id"))
    channel_id = _id(payload.get("channel_id"))
    if message_id is None or channel_id is None:
        return None

    content = str(payload.get("content") or "")
    mentioned = {_id(_mapping(user).get("id")) for user in payload.get("mentions") or ()}
    our_roles = {str(role) for role in payload.get("mention_roles") or ()} & set(bot_role_ids)
    referenced = _mapping(payload.get("referenced_message"))
    reply_to_bot = _id(_mapping(referenced.get("author")).get("id")) == bot.user_id

    text = strip_mentions(content, bot.user_id, our_roles)
    attachments = tuple(
        _attachment(item) for item in payload.get("attachments") or () if isinstance(item, Mapping)
    )
    if not text and not attachments:
        return None
    guild_id = _id(payload.get("guild_id"))
    member = _mapping(payload.get("member"))
    return IncomingMessage(
        platform=PLATFORM,
        platform_user_id=author_id,
        platform_channel_id=channel_id,
        text=text,
        platform_message_id=message_id,
        platform_server_id=guild_id,
        user_display_name=_display_name(author, member),
        user_username=author.get("username") or None,
        chat_type="group" if guild_id else "direct",
        mentions_bot=bot.user_id in mentioned or bool(our_roles),
        reply_to_bot=reply_to_bot,
        attachments=attachments,
        received_at=_timestamp(payload.get("timestamp")),
        mentioned_user_ids=user_mentions(content, exclude=bot.user_id),
        event_id=message_id,
        raw=payload,
    )


def parse_interaction(payload: Mapping[str, Any], bot: BotIdentity) -> IncomingMessage | None:
    """An `INTERACTION_CREATE` payload for a slash (CHAT_INPUT) command as the command
    text `/name arguments`; other interactions give None."""
    if payload.get("type") != APPLICATION_COMMAND:
        return None
    data = _mapping(payload.get("data"))
    if data.get("type", CHAT_INPUT) != CHAT_INPUT or not data.get("name"):
        return None
    member = _mapping(payload.get("member"))
    user = _mapping(member.get("user") or payload.get("user"))
    interaction_id = _id(payload.get("id"))
    user_id = _id(user.get("id"))
    channel_id = _id(payload.get("channel_id") or _mapping(payload.get("channel")).get("id"))
    if interaction_id is None or user_id is None or channel_id is None:
        return None
    return command_message(
        interaction_id=interaction_id,
        command=str(data["name"]),
        arguments=option_text(data.get("options")),
        user_id=user_id,
        user_name=_display_name(user, member),
        channel_id=channel_id,
        guild_id=_id(payload.get("guild_id")),
        bot=bot,
        raw=payload,
    )


def command_message(
    *,
    interaction_id: str,
    command: str,
    arguments: str,
    user_id: str,
    user_name: str | None,
    channel_id: str,
    guild_id: str | None,
    bot: BotIdentity,
    raw: Mapping[str, Any] | None = None,
) -> IncomingMessage:
    """A slash command as the text the core's command dispatch reads. The
    interaction id is the dedupe key; there is no message to reply to."""
    text = f"/{command} {arguments}".strip()
    return IncomingMessage(
        platform=PLATFORM,
        platform_user_id=user_id,
        platform_channel_id=channel_id,
        text=text,
        platform_server_id=guild_id,
        user_display_name=user_name,
        chat_type="group" if guild_id else "direct",
        mentioned_user_ids=user_mentions(arguments, exclude=bot.user_id),
        event_id=interaction_id,
        raw=raw,
    )


def press_message(
    *,
    interaction_id: str,
    custom_id: str,
    user_id: str,
    user_name: str | None,
    channel_id: str,
    guild_id: str | None,
    raw: Mapping[str, Any] | None = None,
) -> IncomingMessage | None:
    """A press on one of our reply buttons (a component interaction whose custom_id
    is the button's command) as that command said by the presser, addressed to the
    bot; None for components that are not ours. The interaction id is the dedupe
    key."""
    if not custom_id.startswith("/"):
        return None
    return IncomingMessage(
        platform=PLATFORM,
        platform_user_id=user_id,
        platform_channel_id=channel_id,
        text=custom_id,
        platform_server_id=guild_id,
        user_display_name=user_name,
        chat_type="group" if guild_id else "direct",
        mentions_bot=True,
        event_id=interaction_id,
        raw=raw,
    )


def option_text(options: Any) -> str:
    """The values of a command's options, in order, as one argument string."""
    values: list[str] = []
    for option in options or ():
        option = _mapping(option)
        if "value" in option and option["value"] is not None:
            values.append(str(option["value"]))
        elif option.get("options"):  # a subcommand: its name, then its own options
            values += [str(option.get("name", "")), option_text(option["options"])]
    return " ".join(v for v in values if v).strip()


def strip_mentions(content: str, bot_id: str, role_ids: Collection[str] = ()) -> str:
    """The text without the mentions that address the bot (`<@id>`, `<@!id>`, and its
    role `<@&id>`); other mentions stay, so `/cmd @user` keeps its argument."""
    targets = [rf"<@!?{re.escape(bot_id)}>"]
    targets += [rf"<@&{re.escape(role)}>" for role in role_ids]
    return re.sub(rf"(?:{'|'.join(targets)})[ \t]*", "", content).strip()


def user_mentions(text: str, *, exclude: str) -> tuple[str, ...]:
    """User ids mentioned in the text, in order, once each, without `exclude`."""
    seen: dict[str, None] = {}
    for match in _USER_MENTION.finditer(text):
        if match[1] != exclude:
            seen.setdefault(match[1], None)
    return tuple(seen)


def _attachment(item: Mapping[str, Any]) -> Attachment:
    """A voice message (the message's IS_VOICE_MESSAGE flag) is an audio/ogg
    attachment with `duration_secs` (and a waveform we ignore)."""
    mime = str(item.get("content_type") or "").split(";", 1)[0].strip().lower() or None
    size = item.get("size")
    seconds = item.get("duration_secs")
    return Attachment(
        kind=_kind(mime),
        file_id=str(item.get("id", "")),
        name=item.get("filename"),
        mime_type=mime,
        size=size if isinstance(size, int) else None,
        url=item.get("url"),
        seconds=float(seconds) if _number(seconds) else None,
    )


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _kind(mime: str | None) -> Literal["image", "document", "audio", "video", "other"]:
    major = (mime or "").split("/", 1)[0]
    if major == "image":
        return "image"
    if major == "audio":
        return "audio"
    if major == "video":
        return "video"
    return "document" if mime else "other"


def _display_name(user: Mapping[str, Any], member: Mapping[str, Any]) -> str | None:
    name = member.get("nick") or user.get("global_name") or user.get("username")
    return str(name) if name else None


def _timestamp(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    return utcnow()


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _id(value: Any) -> str | None:
    """Snowflakes arrive as strings; tolerate integers."""
    if isinstance(value, bool) or value is None or value == "":
        return None
    return str(value)
