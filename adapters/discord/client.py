"""The discord.py side: intents, where REST and the gateway live, raw message events,
and the slash commands.

Where Discord is. discord.py keeps the REST base in a class attribute,
`discord.http.Route.BASE` (the library's own `_set_api_version` rewrites it the same
way), and every REST call, interaction callbacks and follow-up webhooks included, builds
its URL from it. The gateway URL a plain `Client` connects to is another class
attribute, `DiscordWebSocket.DEFAULT_GATEWAY` (wss://gateway.discord.gg/), also used again
whenever a session is invalidated. So `Endpoints.apply(api_base_url)` sets `Route.BASE`
before `login()` (the first request), and `SwitchboardClient.setup_hook` (run by
`login()` before `connect()`) reads `GET /gateway/bot` from that server and points
`DEFAULT_GATEWAY` at the URL it returns. Both are process-wide: one Discord adapter per
process; `Endpoints.restore()` puts the previous values back on stop.

Raw payloads. `parse_message` wants the gateway's own `MESSAGE_CREATE` data, not
discord.py's `Message` model. The client is created with `enable_debug_events=True` and
receives every gateway message, decompressed, through the documented
`on_socket_raw_receive` event before discord.py parses it; frames that are not a
`MESSAGE_CREATE` are skipped by a substring check before any JSON decoding. This uses
only public API (unlike wrapping the private `ConnectionState.parsers`), sees exactly
what Discord sent, and does not depend on discord.py's caches.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import discord
import yarl
from discord import app_commands
from discord.gateway import DiscordWebSocket
from discord.http import Route

from bot.ports import CommandInfo
from bot.types import Button

log = logging.getLogger("switchboard.discord")

DEFAULT_API_BASE = "https://discord.com/api/v10"
NO_PINGS = discord.AllowedMentions.none()
REPLY_PING = discord.AllowedMentions(everyone=False, users=False, roles=False, replied_user=True)
_COMMAND_NAME = re.compile(r"^[-_a-z0-9]{1,32}$")
MAX_CUSTOM_ID = 100
MAX_BUTTONS = 5
"""Buttons in one action row."""

RawHandler = Callable[[Mapping[str, Any]], None]
CommandHandler = Callable[[discord.Interaction], Awaitable[None]]


def intents() -> discord.Intents:
    """Guilds (channels, roles: the bot's role), guild and direct messages, and message
    content, which is privileged: it must be enabled in the developer portal."""
    wanted = discord.Intents.none()
    wanted.guilds = True
    wanted.guild_messages = True
    wanted.dm_messages = True
    wanted.message_content = True
    return wanted


@dataclass
class Endpoints:
    """discord.py's process-wide REST base and gateway URL, set for one adapter."""

    rest: str
    gateway: yarl.URL

    @classmethod
    def apply(cls, api_base_url: str) -> Endpoints:
        """Point REST at `api_base_url`; returns the previous values."""
        previous = cls(Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
        Route.BASE = api_base_url.rstrip("/")
        return previous

    def restore(self) -> None:
        Route.BASE = self.rest
        DiscordWebSocket.DEFAULT_GATEWAY = self.gateway


class SwitchboardClient(discord.Client):
    def __init__(
        self,
        *,
        on_message_payload: RawHandler,
        on_new_session: Callable[[], None],
        commands: Sequence[CommandInfo],
        on_command: CommandHandler,
        on_press: CommandHandler,
        sync_commands: bool,
        max_ratelimit_wait: float,
        shard_id: int | None = None,
        shard_count: int | None = None,
    ) -> None:
        # No voice here: spare the operator discord.py's "PyNaCl is not installed" warnings.
        discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
        super().__init__(
            intents=intents(),
            enable_debug_events=True,  # for on_socket_raw_receive
            max_messages=None,  # we never read discord.py's message cache
            chunk_guilds_at_startup=False,
            allowed_mentions=NO_PINGS,
            max_ratelimit_timeout=max_ratelimit_wait,
            shard_id=shard_id,
            shard_count=shard_count,
        )
        self.connected = asyncio.Event()
        """Set on READY. (discord.py's own "ready" also waits `guild_ready_timeout`, 2 s,
        after the last GUILD_CREATE; messages are handled meanwhile, so we do not wait.)"""
        self._on_message_payload = on_message_payload
        self._on_new_session = on_new_session
        self._on_press = on_press
        self._sync_commands = sync_commands
        self.tree = app_commands.CommandTree(self)
        for info in commands:
            command = slash_command(info, on_command)
            if command is not None:
                self.tree.add_command(command)

    async def setup_hook(self) -> None:
        """After login (REST works), before the gateway connects."""
        _shards, url, limits = await self.http.get_bot_gateway()
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
        log.info(
            "discord.gateway url=%s session_starts_remaining=%s",
            url,
            limits.get("remaining", "?"),
        )
        if self._sync_commands:
            synced = await self.tree.sync()
            log.info("discord.commands_synced names=%s", ",".join(c.name for c in synced))

    async def on_connect(self) -> None:
        self.connected.set()

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """Button presses (component interactions); slash commands go through the tree."""
        if interaction.type == discord.InteractionType.component:
            await self._on_press(interaction)

    async def on_disconnect(self) -> None:
        self.connected.clear()  # until discord.py has connected again

    async def on_socket_raw_receive(self, raw: str | bytes) -> None:
        if isinstance(raw, bytes):
            return
        if '"READY"' in raw and '"t":"READY"' in raw.replace(" ", ""):
            # A new session (not a RESUMED one): events in between are lost.
            self._on_new_session()
            return
        if "MESSAGE_CREATE" not in raw:
            return
        try:
            frame = json.loads(raw)
        except ValueError:
            return
        data = frame.get("d")
        if frame.get("t") == "MESSAGE_CREATE" and isinstance(data, dict):
            self._on_message_payload(data)


def slash_command(
    info: CommandInfo, handler: CommandHandler
) -> app_commands.Command[Any, Any, None] | None:
    """One application command per core command spec, with one optional string
    option, `arguments`, when the spec takes any. No `default_permissions`: who may
    run what is decided by our own role check when the command is dispatched."""
    if not _COMMAND_NAME.match(info.name):
        log.warning("discord.command_skipped name=%r (not a valid Discord command name)", info.name)
        return None
    description = (info.description or info.name)[:100]
    if info.usage:

        @app_commands.describe(arguments=info.usage[:100])
        async def with_arguments(
            interaction: discord.Interaction, arguments: str | None = None
        ) -> None:
            await handler(interaction)

        return app_commands.Command(
            name=info.name, description=description, callback=with_arguments
        )

    async def plain(interaction: discord.Interaction) -> None:
        await handler(interaction)

    return app_commands.Command(name=info.name, description=description, callback=plain)


def buttons_view(buttons: Sequence[Button]) -> discord.ui.View | None:
    """A reply's buttons as message components, custom_id = the command (Discord
    allows 100 characters; none at all when a command is longer: the reply's text
    says how to type it). The view is stopped before it is sent, so discord.py does
    not keep it to dispatch presses itself: `on_interaction` takes them."""
    usable = [b for b in buttons[:MAX_BUTTONS] if b.label.strip()]
    if not usable or any(len(b.command) > MAX_CUSTOM_ID for b in usable):
        return None
    view = discord.ui.View(timeout=None)
    for number, b in enumerate(usable):
        style = discord.ButtonStyle.primary if number == 0 else discord.ButtonStyle.secondary
        view.add_item(discord.ui.Button(label=b.label[:80], custom_id=b.command, style=style))
    view.stop()
    return view
