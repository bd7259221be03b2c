"""Plain data passed between adapters, the pipeline and the agent.

Everything here is a frozen dataclass with slots: values, not objects with
behaviour. Adapters build `IncomingMessage`s; the pipeline hands `Reply`s back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

ChatType = Literal["direct", "group"]
Source = Literal["user", "scheduler"]


def utcnow() -> datetime:
    return datetime.now(UTC)


class Role(StrEnum):
    """User roles, ordered: guest < user < admin < owner."""

    GUEST = "guest"
    USER = "user"
    ADMIN = "admin"
    OWNER = "owner"

    @property
    def rank(self) -> int:
        return _ROLE_RANK[self]

    def at_least(self, other: Role) -> bool:
        return self.rank >= other.rank


_ROLE_RANK = {Role.GUEST: 0, Role.USER: 1, Role.ADMIN: 2, Role.OWNER: 3}


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is on one platform (used to spot mentions and own messages)."""

    platform: str
    user_id: str
    username: str | None = None


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file that came with a message. `data` is filled once downloaded."""

    kind: Literal["image", "document", "audio", "video", "other"]
    file_id: str
    name: str | None = None
    mime_type: str | None = None
    size: int | None = None
    url: str | None = None
    data: bytes | None = field(default=None, repr=False, compare=False)
    """The file's bytes, when the adapter downloaded it."""
    problem: str | None = None
    """Why it was not downloaded (too large, unsupported type, failed), for the user."""
    seconds: float | None = None
    """The length of a voice message or audio file, when the platform says it."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a reply goes: a channel, optionally a thread, optionally as a reply."""

    platform: str
    channel_id: str
    thread_id: str | None = None
    reply_to_message_id: str | None = None
    server_id: str | None = None

    @property
    def conversation_key(self) -> str:
        return conversation_key(self.platform, self.channel_id, self.thread_id)


def conversation_key(platform: str, channel_id: str, thread_id: str | None) -> str:
    return f"{platform}:{channel_id}:{thread_id or '-'}"


@dataclass(frozen=True, slots=True)
class IncomingMessage:
    """One message from any platform, normalized."""

    platform: str
    platform_user_id: str
    platform_channel_id: str
    text: str
    platform_message_id: str | None = None
    platform_thread_id: str | None = None
    platform_server_id: str | None = None
    user_display_name: str | None = None
    user_username: str | None = None
    """The sender's @username where the platform has one (Telegram), so that
    `/cmd @username` can find them later."""
    chat_type: ChatType = "direct"
    mentions_bot: bool = False
    reply_to_bot: bool = False
    attachments: tuple[Attachment, ...] = ()
    source: Source = "user"
    received_at: datetime = field(default_factory=utcnow)
    mentioned_user_ids: tuple[str, ...] = ()
    """Platform user ids of other people mentioned in the text (for `/cmd @user`)."""
    event_id: str | None = None
    """The platform's delivery id used for dedupe (update_id, event_id, ...).

    Falls back to `platform_message_id` when the platform has no separate one."""
    raw: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def conversation_key(self) -> str:
        return conversation_key(self.platform, self.platform_channel_id, self.platform_thread_id)

    @property
    def dedupe_key(self) -> str | None:
        return self.event_id or self.platform_message_id

    @property
    def is_command(self) -> bool:
        return self.text.startswith("/")

    @property
    def addressed(self) -> bool:
        """Whether the bot is spoken to: always in DMs, otherwise when mentioned,
        replied to or commanded."""
        return (
            self.chat_type == "direct"
            or self.mentions_bot
            or self.reply_to_bot
            or self.is_command
            or self.source == "scheduler"
        )

    def target(self, *, as_reply: bool = False) -> Target:
        return Target(
            platform=self.platform,
            channel_id=self.platform_channel_id,
            thread_id=self.platform_thread_id,
            reply_to_message_id=self.platform_message_id if as_reply else None,
            server_id=self.platform_server_id,
        )


ReplyKind = Literal["answer", "command", "refusal", "error", "notice"]
OutcomeStatus = Literal[
    "ignored",
    "context",
    "duplicate",
    "command",
    "refused",
    "silent",
    "answered",
    "failed",
    "merged",
    "cancelled",
    "queued",
]
"""`merged`: answered together with other messages by the run named in `run_id`
(its replies went out with that run); `cancelled`: its run was stopped (/stop);
`queued`: stored, to be answered by the instance running its conversation."""


@dataclass(frozen=True, slots=True)
class Button:
    """A native button under a reply (Telegram inline keyboard, Slack block
    actions, Discord components). Pressing it says `command` (e.g. "/confirm
    K7Q2MX") in the reply's conversation as the person who pressed it; the
    reply's text always says how to type the command too, for platforms (and
    clients) without buttons."""

    label: str
    command: str


@dataclass(frozen=True, slots=True)
class Reply:
    """Canonical Markdown text and where it goes. Adapters render it."""

    text: str
    target: Target
    kind: ReplyKind = "answer"
    private: bool = False
    """Only the requester should see it (ephemeral where the platform allows)."""
    buttons: tuple[Button, ...] = ()
    """Shown under the last part of the reply."""
    drafts: tuple[str, ...] = ()
    """Platform ids of messages that showed this reply while it was written
    (streamed): `send` edits them into the reply's parts, in order, instead of
    posting new ones, posts any further part, and deletes drafts left over."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one or more LLM calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    @property
    def total(self) -> int:
        """Tokens charged against a budget: everything the model read or wrote."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    """What `Core.handle` did with a message, and the replies it produced
    (already delivered unless the caller asked `deliver=False`)."""

    status: OutcomeStatus
    replies: tuple[Reply, ...] = ()
    run_id: str | None = None
