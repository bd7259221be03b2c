"""Catching up what the gateway did not deliver.

Discord does not redeliver: events sent while the bot was away, or between a
dropped connection and a new session that could not resume it, are gone from
the gateway. So after every new session (READY: the start, or a reconnect that
could not resume) the adapter asks the core for the channels with recent
traffic and the newest message it stored of each (`Core.recent_channels`),
reads each channel's history after that message (`GET /channels/{id}/messages`,
bounded in channels, age and count: `[discord] catch_up_*`) and hands every
message to the pipeline like a live one. The inbox makes the ones already
stored no-ops, and the gate drops what was not addressed to the bot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import discord

from bot.config import DiscordSettings
from bot.ports import Core, hand_over

log = logging.getLogger("switchboard.discord")

Parse = Callable[[Mapping[str, Any]], Any]


async def catch_up(
    client: discord.Client,
    core: Core,
    settings: DiscordSettings,
    parse: Parse,
    tasks: set[Any],
) -> int:
    """Feed the messages missed in recently active channels through the pipeline.
    Returns how many were taken."""
    marks = await core.recent_channels(
        "discord", timedelta(hours=settings.catch_up_hours), settings.catch_up_channels
    )
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
