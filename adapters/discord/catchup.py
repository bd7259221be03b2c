"""Catching up what the gateway did not deliver.

Discord does not redeliver: events sent while the bot was away, or between a
dropped connection and a new session that could not resume it, are gone from
the gateway. So after every new session (READY: the start, or a reconnect that
could not resume) the adapter asks the core for the channels with recent
traffic and the newest message it stored of each (`Core.recent_channels`),
reads each channel's history after that message (`GET /channels/{id}/messages`,
bounded in channels, age and count: `[discord] catch_up_*`) and hands every
message to the pipeline like a live one. The other text channels of the
session's guilds, of which nothing was stored lately, are read too, from
the start of that window: the first message of a channel may be the one
sent while the bot was away. The inbox makes the ones already
stored no-ops, and the gate drops what was not addressed to the bot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import discord

from bot.config import DiscordSettings
from bot.ports import ChannelMark, Core, hand_over

log = logging.getLogger("switchboard.discord")

Parse = Callable[[Mapping[str, Any]], Any]


def unmarked(
    client: discord.Client, marks: list[ChannelMark], window: timedelta, room: int
) -> list[ChannelMark]:
    """The text channels of the session's guilds with nothing stored within
    `window` (at most `room`), each marked at the window's start."""
    since = str(discord.utils.time_snowflake(datetime.now(UTC) - window, high=False))
    known = {mark.channel_id for mark in marks}
    found: list[ChannelMark] = []
    for guild in client.guilds:
        for channel in guild.text_channels:
            if len(found) >= room:
                return found
            if str(channel.id) not in known:
                found.append(ChannelMark(str(channel.id), str(guild.id), since))
    return found


async def catch_up(
    client: discord.Client,
    core: Core,
    settings: DiscordSettings,
    parse: Parse,
    tasks: set[Any],
) -> int:
    """Feed the messages missed in recently active channels through the pipeline.
    Returns how many were taken."""
    window = timedelta(hours=settings.catch_up_hours)
    marks = list(await core.recent_channels("discord", window, settings.catch_up_channels))
    marks += unmarked(client, marks, window, settings.catch_up_channels - len(marks))
    taken = channels = 0
    for mark in marks:
        try:
            payloads = await client.http.logs_from(
                int(mark.channel_id), settings.catch_up_messages, after=int(mark.last_message_id)
            )
        except (discord.DiscordException, OSError) as exc:
            log.warning("discord.catch_up_failed channel=%s: %s", mark.channel_id, exc)
            continue
        missed = sorted(payloads, key=lambda p: int(p["id"]))
        if missed:
            channels += 1
        for payload in missed:
            data: dict[str, Any] = dict(payload)
            if mark.server_id and "guild_id" not in data:
                data["guild_id"] = mark.server_id  # REST messages do not say it
            msg = parse(data)
            if msg is not None and await hand_over(core, msg, tasks):
                taken += 1
    log.info(
        "discord.caught_up channels_checked=%d channels_with_news=%d messages=%d",
        len(marks),
        channels,
        taken,
    )
    return taken
