"""Slack payloads → `IncomingMessage`. Pure functions: no I/O, no clock.

`parse_event` reads the raw Events API envelope (`{"type": "event_callback",
"team_id", "event_id", "event": {...}}`), the same dict over HTTP and inside a
Socket Mode envelope's `payload`. `parse_command` reads a slash command's
fields (form-encoded over HTTP, JSON over Socket Mode).

Threads: a reply goes where the conversation is. A thread reply
(`thread_ts`) stays in that thread; a top-level channel message starts a thread
under itself (thread id = its `ts`), so each question in a channel is its own
conversation; a top-level DM stays top-level (the DM is the conversation).

Dedupe key (`event_id`): the message's identity, `"<channel>:<ts>"`, not the
envelope's `event_id`. Slack delivers one channel message that mentions the bot
twice, as `message` and as `app_mention`, with two different envelope ids;
retries (`X-Slack-Retry-Num`, Socket Mode `retry_attempt`) repeat one of them.
Keyed on channel + ts, all of these are one event for the pipeline's durable
dedupe. The envelope id stays in `raw` for logs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from bot.types import Attachment, BotIdentity, ChatType, IncomingMessage

PLATFORM = "slack"

AttachmentKind = Literal["image", "document", "audio", "video", "other"]

# Message subtypes that are a person saying something; every other subtype
# (edits, deletions, joins, topic changes, bot_message, ...) is ignored.
_USER_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
_USER_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^<>]*)?>")
_TOKEN = re.compile(r"<([^<>\s][^<>]*)>")
_BROADCASTS = {"here": "@here", "channel": "@channel", "everyone": "@everyone"}
_SKIPPED_FILE_MODES = frozenset({"tombstone", "hidden_by_limit"})


def parse_event(body: Mapping[str, Any], bot: BotIdentity) -> IncomingMessage | None:
    """An Events API envelope as a message, or None for what we ignore: other
    event types, our own and other bots' messages, edits, deletions and other
    subtypes."""
    if body.get("type") != "event_callback":
        return None
    event = body.get("event")
    if not isinstance(event, Mapping) or event.get("type") not in ("message", "app_mention"):
        return None
    if event.get("subtype") not in _USER_SUBTYPES or event.get("hidden"):
        return None
    user = event.get("user")
    channel = event.get("channel")
    ts = event.get("ts")
    if not (isinstance(user, str) and isinstance(channel, str) and isinstance(ts, str)):
        return None
    if event.get("bot_id") or user == bot.user_id:
        return None

    chat_type = _chat_type(event.get("channel_type"), channel)
    thread_ts = event.get("thread_ts")
    if isinstance(thread_ts, str) and thread_ts:
        thread: str | None = thread_ts
    else:
        thread = None if chat_type == "direct" else ts
    raw_text = str(event.get("text") or "")
    mentioned = _mentions(raw_text)
    team = body.get("team_id") or event.get("team")
    return IncomingMessage(
        platform=PLATFORM,
        platform_user_id=user,
        platform_channel_id=channel,
        text=to_plain(_strip_mention(raw_text, bot.user_id)),
        platform_message_id=ts,
        platform_thread_id=thread,
        platform_server_id=str(team) if team else None,
        user_display_name=_display_name(event.get("user_profile")),
        chat_type=chat_type,
        mentions_bot=event.get("type") == "app_mention" or bot.user_id in mentioned,
        reply_to_bot=bool(thread_ts) and event.get("parent_user_id") == bot.user_id,
        attachments=tuple(_attachments(event.get("files"))),
        mentioned_user_ids=tuple(u for u in dict.fromkeys(mentioned) if u != bot.user_id),
        event_id=f"{channel}:{ts}",
        raw=body,
    )


def parse_command(payload: Mapping[str, Any], command: str) -> IncomingMessage | None:
    """A slash command as the core's command text: `/switchboard budget x`
    (our one command, `command`) → `/budget x`; an empty one → `/help`. Any
    other command name routed to us (one created per spec) → `/<name> text`."""
    user = payload.get("user_id")
    channel = payload.get("channel_id")
    name = str(payload.get("command") or "").strip().lower()
    if not (isinstance(user, str) and isinstance(channel, str) and name.startswith("/")):
        return None
    raw_text = str(payload.get("text") or "").strip()
    if name == command.lower():
        text = "/" + raw_text.lstrip("/") if raw_text else "/help"
    else:
        text = f"{name} {raw_text}".rstrip()
    channel_name = payload.get("channel_name")
    direct = channel_name == "directmessage" or channel.startswith("D")
    trigger = payload.get("trigger_id")
    team = payload.get("team_id")
    return IncomingMessage(
        platform=PLATFORM,
        platform_user_id=user,
        platform_channel_id=channel,
        text=to_plain(text),
        platform_server_id=str(team) if team else None,
        user_display_name=str(payload.get("user_name") or "") or None,
        chat_type="direct" if direct else "group",
        mentioned_user_ids=tuple(dict.fromkeys(_mentions(raw_text))),
        event_id=f"command:{trigger}" if trigger else None,
        raw=payload,
    )


def to_plain(text: str) -> str:
    """Slack's wire format as plain text for the LLM: `<url|label>` → `label (url)`,
    `<#C1|general>` → `#general`, `<!here>` → `@here`, `&lt;` → `<`. User
    mentions stay `<@U123>`, Slack's own unambiguous spelling."""
    return _unescape(_TOKEN.sub(_token, text)).strip()


def _token(match: re.Match[str]) -> str:
    target, _, label = match.group(1).partition("|")
    if target.startswith("@"):
        return f"<{target}>"
    if target.startswith("#"):
        return f"#{label or target[1:]}"
    if target.startswith("!"):
        name = target[1:].split("^", 1)[0]
        if name in _BROADCASTS:
            return _BROADCASTS[name]
        return label or f"@{name}"
    if target.startswith("mailto:"):
        return label or target.removeprefix("mailto:")
    if not label or label == target or target.split("://", 1)[-1] == label:
        return target
    return f"{label} ({target})"


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _mentions(text: str) -> list[str]:
    return _USER_MENTION.findall(text)


def _strip_mention(text: str, user_id: str) -> str:
    """The text without the bot's own mention (`<@UBOT> hi` → `hi`)."""
    stripped = re.sub(rf"<@{re.escape(user_id)}(?:\|[^<>]*)?>", " ", text)
    return re.sub(r"[ \t]{2,}", " ", stripped).strip()


def _chat_type(channel_type: object, channel: str) -> ChatType:
    if channel_type == "im":
        return "direct"
    if channel_type is None and channel.startswith("D"):  # app_mention has no channel_type
        return "direct"
    return "group"


def _display_name(profile: object) -> str | None:
    if not isinstance(profile, Mapping):
        return None
    for key in ("display_name", "real_name", "name"):
        value = profile.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _attachments(files: object) -> list[Attachment]:
    if not isinstance(files, list):
        return []
    out: list[Attachment] = []
    for file in files:
        if not isinstance(file, Mapping) or not isinstance(file.get("id"), str):
            continue
        if file.get("mode") in _SKIPPED_FILE_MODES:
            continue
        out.append(file_attachment(file))
    return out


def file_attachment(file: Mapping[str, Any]) -> Attachment:
    """A Slack file object as an `Attachment` (not downloaded yet). Files shared
    with `mode: "file_access"` carry only their id: `url` is None until
    `files.info` fills it in."""
    mime = file.get("mimetype") or None
    size = file.get("size")
    url = file.get("url_private_download") or file.get("url_private") or None
    problem = None
    if file.get("mode") == "external" or file.get("is_external"):
        problem = "it is a link to an external file, not a file uploaded to Slack"
    # An audio clip recorded in Slack: subtype "slack_audio" (WebM or MP4 audio,
    # whatever its mimetype says), its length in `duration_ms`.
    clip = file.get("subtype") == "slack_audio"
    duration = file.get("duration_ms")
    seconds = None
    if isinstance(duration, int | float) and not isinstance(duration, bool) and duration > 0:
        seconds = duration / 1000
    return Attachment(
        kind="audio" if clip else _kind(mime),
        file_id=str(file["id"]),
        name=file.get("name") or file.get("title") or None,
        mime_type=mime,
        size=size if isinstance(size, int) else None,
        url=url,
        problem=problem,
        seconds=seconds,
    )


def _kind(mime: str | None) -> AttachmentKind:
    major = (mime or "").split("/", 1)[0]
    if major == "image":
        return "image"
    if major == "audio":
        return "audio"
    if major == "video":
        return "video"
    if major in ("text", "application"):
        return "document"
    return "other"
