"""Bot API `Update` JSON → `IncomingMessage` (pure: no I/O, no library objects).

What becomes a message: `message` updates (and `edited_message` when asked) from a
person in a private chat, a group or a supergroup, with text, a caption or a file.
Everything else is `None`: channel posts, messages from bots (ourselves included, and
Telegram's anonymous-admin bot), service messages (members joining, topics created,
pins, ...), stickers and other content without text or a file, commands addressed to
another bot (`/cmd@OtherBot`), and update kinds we do not handle (inline queries,
member updates, ...). A `callback_query` (someone pressed one of our inline keyboard
buttons) becomes the button's command said by the presser: `parse_press`.

Entity offsets and lengths are in UTF-16 code units (Bot API rule), so substrings are
cut from the UTF-16 encoding of the text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from bot.types import Attachment, BotIdentity, ChatType, IncomingMessage, utcnow

PLATFORM = "telegram"
ALLOWED_UPDATES = ("message", "edited_message", "callback_query")
"""The update kinds the adapter asks Telegram for (`allowed_updates`)."""

_CHAT_TYPES: dict[str, ChatType] = {"private": "direct", "group": "group", "supergroup": "group"}

JSON = Mapping[str, Any]


def parse_update(
    update: JSON, bot: BotIdentity, *, handle_edited: bool = False
) -> IncomingMessage | None:
    """Normalize one raw `Update`, or `None` when it is nothing to answer or keep."""
    update_id = update.get("update_id")
    message = update.get("message")
    if message is None and handle_edited:
        message = update.get("edited_message")
    if not isinstance(update_id, int) or not isinstance(message, Mapping):
        return None
    chat = message.get("chat") or {}
    sender = message.get("from") or {}
    chat_type = _CHAT_TYPES.get(str(chat.get("type")))
    if chat_type is None or not sender or sender.get("is_bot") or "id" not in chat:
        return None

    has_caption = "text" not in message
    text: str = message.get("text") or message.get("caption") or ""
    entities: Sequence[JSON] = message.get("caption_entities" if has_caption else "entities") or ()
    attachments = _attachments(message)
    if not text.strip() and not attachments:
        return None  # service messages, stickers, polls, locations, ...

    command = _command(text, entities, bot)
    if command is None:
        return None  # a command for another bot

    topic = message.get("message_thread_id") if message.get("is_topic_message") else None
    return IncomingMessage(
        platform=PLATFORM,
        platform_user_id=str(sender["id"]),
        platform_channel_id=str(chat["id"]),
        text=command,
        platform_message_id=str(message["message_id"]) if "message_id" in message else None,
        platform_thread_id=str(topic) if topic is not None else None,
        user_display_name=_display_name(sender),
        user_username=sender.get("username") or None,
        chat_type=chat_type,
        mentions_bot=_mentions(message, entities, bot),
        reply_to_bot=_replies_to(message, bot),
        attachments=attachments,
        received_at=_timestamp(message.get("edit_date") or message.get("date")),
        mentioned_user_ids=_mentioned_users(entities, bot),
        event_id=f"{bot.user_id}:{update_id}",
        raw=update,
    )


def parse_press(update: JSON, bot: BotIdentity) -> IncomingMessage | None:
    """A `callback_query` update → the button's command (its `callback_data`, which we
    set to a command such as "/confirm K7Q2MX") said by the presser, in the chat (and
    topic) of the message that carried the keyboard, addressed to the bot. `None`
    for anything else, and for presses whose data is not a command of ours."""
    query = update.get("callback_query")
    if not isinstance(update.get("update_id"), int) or not isinstance(query, Mapping):
        return None
    sender = query.get("from") or {}
    message = query.get("message")
    if not isinstance(message, Mapping):
        return None  # a press on an inline-mode message: no chat to answer in
    chat = message.get("chat") or {}
    chat_type = _CHAT_TYPES.get(str(chat.get("type")))
    data = query.get("data")
    if (
        chat_type is None
        or "id" not in chat
        or not sender
        or sender.get("is_bot")
        or not isinstance(data, str)
        or not data.startswith("/")
        or "id" not in query
    ):
        return None
    topic = message.get("message_thread_id") if message.get("is_topic_message") else None
    return IncomingMessage(
        platform=PLATFORM,
        platform_user_id=str(sender["id"]),
        platform_channel_id=str(chat["id"]),
        text=data,
        platform_thread_id=str(topic) if topic is not None else None,
        user_display_name=_display_name(sender),
        user_username=sender.get("username") or None,
        chat_type=chat_type,
        mentions_bot=True,
        event_id=f"{bot.user_id}:press:{query['id']}",
        raw=update,
    )


def entity_text(text: str, entity: JSON) -> str:
    """The part of `text` an entity covers (offsets count UTF-16 code units)."""
    data = text.encode("utf-16-le")
    start = int(entity.get("offset", 0)) * 2
    end = start + int(entity.get("length", 0)) * 2
    return data[start:end].decode("utf-16-le", errors="replace")


def _command(text: str, entities: Sequence[JSON], bot: BotIdentity) -> str | None:
    """`/cmd@ThisBot args` → `/cmd args`; `/cmd@OtherBot …` → None; otherwise unchanged."""
    if not text.startswith("/"):
        return text
    command = next(
        (
            entity_text(text, e)
            for e in entities
            if e.get("type") == "bot_command" and e.get("offset") == 0
        ),
        text.split(maxsplit=1)[0],
    )
    name, at, addressee = command.partition("@")
    if not at:
        return text
    if bot.username and addressee.lower() == bot.username.lower():
        return name + text[len(command) :]
    return None


def _mentions(message: JSON, entities: Sequence[JSON], bot: BotIdentity) -> bool:
    text = message.get("text") or message.get("caption") or ""
    handle = f"@{bot.username}".lower() if bot.username else None
    for entity in entities:
        kind = entity.get("type")
        if kind == "mention" and handle and entity_text(text, entity).lower() == handle:
            return True
        if kind == "text_mention" and str((entity.get("user") or {}).get("id")) == bot.user_id:
            return True
    return False


def _mentioned_users(entities: Sequence[JSON], bot: BotIdentity) -> tuple[str, ...]:
    """Other people named by `text_mention` entities (users without a username)."""
    found: list[str] = []
    for entity in entities:
        user = entity.get("user") or {}
        if entity.get("type") == "text_mention" and "id" in user:
            user_id = str(user["id"])
            if user_id != bot.user_id and user_id not in found:
                found.append(user_id)
    return tuple(found)


def _replies_to(message: JSON, bot: BotIdentity) -> bool:
    replied = message.get("reply_to_message")
    if not isinstance(replied, Mapping):
        return False
    # In a forum topic every message "replies" to the topic's creation message; that
    # is not a reply to whoever opened the topic.
    if "forum_topic_created" in replied:
        return False
    return str((replied.get("from") or {}).get("id")) == bot.user_id


def _attachments(message: JSON) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    photos = message.get("photo")
    if isinstance(photos, list) and photos:
        best = max(photos, key=lambda p: p.get("width", 0) * p.get("height", 0))
        found.append(
            Attachment("image", best["file_id"], "photo.jpg", "image/jpeg", best.get("file_size"))
        )
    kinds: tuple[tuple[str, Literal["document", "audio"]], ...] = (
        ("document", "document"),
        ("voice", "audio"),
        ("audio", "audio"),
    )
    for key, kind in kinds:
        item = message.get(key)
        if isinstance(item, Mapping) and "file_id" in item:
            name = item.get("file_name") or (f"voice.{_ext(item)}" if key == "voice" else None)
            duration = item.get("duration")  # voice and audio: seconds
            found.append(
                Attachment(
                    kind,
                    item["file_id"],
                    name,
                    item.get("mime_type") or ("audio/ogg" if key == "voice" else None),
                    item.get("file_size"),
                    seconds=float(duration) if _seconds(duration) else None,
                )
            )
    # An animation (GIF) also comes as a `document`, so it is covered above.
    for key in ("video", "video_note"):
        item = message.get(key)
        if isinstance(item, Mapping) and "file_id" in item:
            found.append(
                Attachment(
                    "video",
                    item["file_id"],
                    item.get("file_name"),
                    item.get("mime_type", "video/mp4"),
                    item.get("file_size"),
                )
            )
    return tuple(found)


def _seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _ext(item: JSON) -> str:
    mime = str(item.get("mime_type") or "audio/ogg")
    return mime.rsplit("/", 1)[-1]


def _display_name(user: JSON) -> str:
    name = " ".join(p for p in (user.get("first_name"), user.get("last_name")) if p).strip()
    return name or str(user.get("username") or user.get("id"))


def _timestamp(value: Any) -> datetime:
    if isinstance(value, int | float) and value > 0:
        return datetime.fromtimestamp(value, UTC)
    return utcnow()
