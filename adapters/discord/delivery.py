"""Posting a reply: its parts as messages in the channel, or as edits of the messages
that showed it while it was written (`Reply.drafts`, see `streaming.py`).

Part i of the rendered reply, when not already delivered (`SendProgress.done`), is an
edit of `drafts[i]` if there is one (an edit is idempotent: a reply taken over after a
crash just edits again), else a new message carrying a nonce derived from its outbox
row, enforced by Discord, so a part posted just before a crash is not posted twice.
Drafts left over (the reply came out shorter than what was streamed) are deleted. In
guilds the first part is a reply to the author's message (a streamed first draft was
posted as one); the buttons go under the last part.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import discord

from adapters.discord.client import NO_PINGS, REPLY_PING, buttons_view
from adapters.discord.render import render
from bot.errors import DeliveryFailed
from bot.ports import SendProgress
from bot.types import Reply, Target

log = logging.getLogger("switchboard.discord")

SEND_ERRORS = (discord.DiscordException, aiohttp.ClientError, OSError, TimeoutError)
"""What a REST call through discord.py may raise."""


def reply_reference(target: Target, index: int) -> discord.MessageReference | None:
    """Part `index` of a reply to `target` answers the author's message (the first part
    only, and only when the target asks for it)."""
    if index != 0 or not target.reply_to_message_id:
        return None
    return discord.MessageReference(
        message_id=int(target.reply_to_message_id),
        channel_id=int(target.channel_id),
        fail_if_not_exists=False,  # the author deleted it: post anyway
    )


def mentions(target: Target, index: int) -> discord.AllowedMentions:
    """Nothing ever pings, except the reply to the author (the first part in guilds)."""
    return REPLY_PING if reply_reference(target, index) is not None else NO_PINGS


async def deliver(
    channel: discord.PartialMessageable,
    reply: Reply,
    progress: SendProgress | None,
) -> list[str]:
    """Post (or edit into the drafts) the parts after those `progress` says are done;
    returns the ids of all parts. Raises `DeliveryFailed` when a part is refused."""
    chunks = render(reply.text)
    sent: list[str] = list(progress.done) if progress else []
    for index, chunk in enumerate(chunks):
        if index < len(sent):
            continue
        view = buttons_view(reply.buttons) if index == len(chunks) - 1 else None
        try:
            message_id = None
            if index < len(reply.drafts):
                message_id = await _edit(channel, reply, index, chunk, view)
            if message_id is None:
                message_id = await _post(channel, reply.target, index, chunk, view, progress)
        except SEND_ERRORS as exc:
            part = f" (part {index + 1} of {len(chunks)})" if len(chunks) > 1 else ""
            reason = f"Discord did not take the message{part}: {describe(exc)}"
            raise DeliveryFailed(reason) from exc
        sent.append(message_id)
        if progress is not None:
            await progress.sent(index, message_id, last=index == len(chunks) - 1)
    for draft in reply.drafts[len(chunks) :]:
        await delete_quietly(channel, draft)
    return sent


async def _post(
    channel: discord.PartialMessageable,
    target: Target,
    index: int,
    chunk: str,
    view: discord.ui.View | None,
    progress: SendProgress | None,
) -> str:
    # discord.py sends a nonce with enforce_nonce=true: Discord returns the message
    # already posted with it instead of posting it twice.
    extra: dict[str, Any] = {"nonce": progress.nonce(index)} if progress else {}
    if view is not None:
        extra["view"] = view
    reference = reply_reference(target, index)
    if reference is not None:
        extra["reference"] = reference
    message = await channel.send(chunk, allowed_mentions=mentions(target, index), **extra)
    return str(message.id)


async def _edit(
    channel: discord.PartialMessageable,
    reply: Reply,
    index: int,
    chunk: str,
    view: discord.ui.View | None,
) -> str | None:
    """Edit draft `index` into part `index`; None when the draft is gone (deleted by
    someone): the part is then posted as a new message."""
    draft = reply.drafts[index]
    message = channel.get_partial_message(int(draft))
    try:
        await message.edit(
            content=chunk,
            allowed_mentions=mentions(reply.target, index),
            view=view if view is not None else discord.utils.MISSING,
        )
    except discord.NotFound:
        log.warning("discord.draft_gone channel=%s message=%s: posting anew", channel.id, draft)
        return None
    return draft


async def delete_quietly(channel: discord.PartialMessageable, message_id: str) -> bool:
    """Delete a message we posted; a message already gone counts as deleted. Never
    raises (what is left is logged): True when it is gone."""
    try:
        await channel.get_partial_message(int(message_id)).delete()
    except discord.NotFound:
        return True
    except SEND_ERRORS as exc:
        log.warning(
            "discord.delete_failed channel=%s message=%s: %s", channel.id, message_id, describe(exc)
        )
        return False
    return True


def describe(exc: BaseException | None) -> str:
    if isinstance(exc, discord.RateLimited):
        return f"rate limited for {exc.retry_after:.0f}s (longer than discord.max_ratelimit_wait)"
    return f"{type(exc).__name__}: {exc}" if exc is not None else "no error"
