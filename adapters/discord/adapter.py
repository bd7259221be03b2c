"""The Discord adapter (discord.py 2.x): gateway events in, REST replies out.

Messages: each raw `MESSAGE_CREATE` (see `client.py`) is parsed by `parse_message` and
handed to the core in its own task; the core gates guild messages (mentioned, replied
to, or commanded, unless `discord.require_mention = false`), dedupes on the message id
and answers through `send`. Attachments are downloaded only for messages the core will
answer.

Delivery: `send` renders Markdown to chunks of at most 2000 characters and posts them
to the channel (a thread is a channel); in guilds the first chunk is a reply to the
author's message and may ping the author, nothing else ever pings
(`AllowedMentions.none()`). discord.py retries 429s itself, per route and channel
bucket, so a rate-limited channel never holds up another one; a wait longer than
`discord.max_ratelimit_wait` gives up. Anything that finally fails raises
`DeliveryFailed`, which the pipeline records (`delivery.py`).

Streaming (`open_stream`, `streaming.py`): while the model writes, the reply is posted
once there is text and then edited (the core throttles the updates); `send` then edits
those messages (`Reply.drafts`) into the final reply's parts.

Slash commands: one per core command, synced at start (`discord.sync_commands`). The
interaction is deferred ephemerally before anything else (Discord wants an answer
within 3 s), then the core runs the command (`handle(deliver=False)`: our role check,
never the LLM) and its replies are sent as follow-ups. The first follow-up after a
deferral takes the deferral's visibility, so a private reply fills the ephemeral
placeholder while a public one first deletes it and is then posted publicly.

Buttons (`Reply.buttons`): message components under the last part, custom_id = the
command. A press (INTERACTION_CREATE, component) is handed to the core as the
presser's message in that channel (`hand_over`: stored first), then acknowledged
with a deferred update, which leaves the message as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import replace
from typing import Any

import aiohttp
import discord

from adapters.discord.catchup import catch_up
from adapters.discord.client import NO_PINGS, Endpoints, SwitchboardClient, buttons_view
from adapters.discord.delivery import SEND_ERRORS, deliver, describe
from adapters.discord.files import Downloader
from adapters.discord.parse import (
    PLATFORM,
    command_message,
    option_text,
    parse_message,
    press_message,
)
from adapters.discord.render import render
from adapters.discord.streaming import LiveDiscordMessage, StreamRest
from bot.config import DiscordSettings, Secrets, Settings
from bot.errors import ConfigError, DeliveryFailed, ShuttingDown, StartupError
from bot.ports import Core, SendProgress, hand_over
from bot.types import BotIdentity, IncomingMessage, Reply, Target

log = logging.getLogger("switchboard.discord")

READY_TIMEOUT_S = 60.0
_TOKEN_HINT = "Check DISCORD_BOT_TOKEN: the bot's token from the developer portal (Bot page)."


class DiscordAdapter:
    platform = PLATFORM

    def __init__(self, settings: DiscordSettings, token: str) -> None:
        self.settings = settings
        self._token = token
        self._client: SwitchboardClient | None = None
        self._core: Core | None = None
        self._endpoints: Endpoints | None = None
        self._connection: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._caught_up = asyncio.Event()
        """Clear while a new session catches up: live messages wait for it, so
        that what was sent while the bot was away is taken in first (in order)."""
        self._caught_up.set()
        self._files = Downloader(settings.max_file_bytes)
        self._stream = StreamRest()
        self.identity = BotIdentity(PLATFORM, "")

    # -- lifecycle ----------------------------------------------------------

    async def start(self, core: Core) -> None:
        """Log in, sync commands, connect to the gateway; returns at READY."""
        self._core = core
        self._endpoints = Endpoints.apply(self.settings.api_base_url)
        client = self._client = SwitchboardClient(
            on_message_payload=self._on_message_payload,
            on_new_session=self._on_new_session,
            commands=core.command_infos(),
            on_command=self._on_command,
            on_press=self._on_press,
            sync_commands=self.settings.sync_commands,
            max_ratelimit_wait=self.settings.max_ratelimit_wait,
            shard_id=self.settings.shard_id,
            shard_count=self.settings.shard_count,
        )
        try:
            await self._connect(client)
        except BaseException:
            await self.stop()
            raise
        log.info("discord.ready user=%s id=%s", self.identity.username, self.identity.user_id)

    async def _connect(self, client: SwitchboardClient) -> None:
        where = self.settings.api_base_url
        try:
            await client.login(self._token)
        except discord.LoginFailure:
            raise StartupError(
                "Discord rejected the bot token (401 Unauthorized)", _TOKEN_HINT
            ) from None
        except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            raise StartupError(
                f"cannot log in to Discord at {where}: {describe(exc)}",
                "Check the network and [discord] api_base_url.",
            ) from None
        assert client.user is not None  # login() fetched /users/@me
        self.identity = BotIdentity(PLATFORM, str(client.user.id), client.user.name)
        await self._files.open()  # messages may arrive as soon as the gateway is up
        await self._open_stream_rest()
        self._connection = asyncio.create_task(client.connect(reconnect=True))
        ready = asyncio.create_task(client.connected.wait())
        await asyncio.wait(
            {ready, self._connection}, timeout=READY_TIMEOUT_S, return_when="FIRST_COMPLETED"
        )
        if ready.done():
            self._connection.add_done_callback(_connection_ended)
            return
        ready.cancel()
        if not self._connection.done():
            raise StartupError(f"Discord's gateway sent no READY within {READY_TIMEOUT_S:.0f}s")
        error = self._connection.exception()
        if isinstance(error, discord.PrivilegedIntentsRequired):
            raise ConfigError(
                "Discord refused the gateway connection: enable the privileged Message Content "
                "intent for this bot in the developer portal (Bot → Privileged Gateway Intents)"
            )
        if isinstance(error, discord.ConnectionClosed) and error.code == 4004:
            raise StartupError("Discord's gateway rejected the bot token (4004)", _TOKEN_HINT)
        raise StartupError(f"cannot connect to Discord's gateway: {describe(error)}")

    async def _open_stream_rest(self) -> None:
        try:
            await self._stream.open(self._token)
        except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            log.warning("discord.streaming_off: cannot log in its REST client: %s", describe(exc))

    async def ready(self) -> bool:
        """The gateway is connected (not closed, not between reconnects).
        (`client.is_ready()` lags READY by discord.py's guild wait, 2 s.)"""
        client = self._client
        return client is not None and client.connected.is_set() and not client.is_closed()

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.close()
        if self._connection is not None:
            with contextlib.suppress(BaseException):
                await self._connection
            self._connection = None
        await self._files.close()
        await self._stream.close()
        if self._endpoints is not None:
            self._endpoints.restore()
            self._endpoints = None
        self._client = None
        self._core = None

    async def idle(self) -> None:
        """Wait until every message and command received so far has been handled."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- incoming -----------------------------------------------------------

    def _on_message_payload(self, payload: Mapping[str, Any]) -> None:
        self._spawn(self._handle_message(payload))

    def _on_new_session(self) -> None:
        if self.settings.catch_up_channels and self.identity.user_id:
            self._caught_up.clear()
            self._spawn(self._catch_up())

    async def _catch_up(self) -> None:
        client, core = self._client, self._core
        try:
            if client is not None and core is not None:
                await catch_up(client, core, self.settings, self._parse, self._tasks)
        except Exception:
            log.exception("discord.catch_up_failed")
        finally:
            self._caught_up.set()

    def _parse(self, payload: Mapping[str, Any]) -> IncomingMessage | None:
        return parse_message(payload, self.identity, bot_role_ids=self._bot_roles(payload))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle_message(self, payload: Mapping[str, Any]) -> None:
        try:
            msg = self._parse(payload)
            if msg is None or self._core is None:
                return
            await self._caught_up.wait()  # after what was missed before it
            await self._core.handle(msg)  # stored first; files are fetched after
        except ShuttingDown:  # not stored: the next session's catch-up reads it
            log.warning("discord.not_taken id=%s: shutting down", payload.get("id"))
        except Exception:
            log.exception("discord.message_failed id=%s", payload.get("id"))

    async def fetch_files(self, msg: IncomingMessage) -> IncomingMessage:
        """Download what the agent may read (called by the pipeline after intake)."""
        if not msg.attachments or not (msg.addressed or not self.settings.require_mention):
            return msg
        return replace(msg, attachments=await self._files.fetch_all(msg.attachments))

    def _bot_roles(self, payload: Mapping[str, Any]) -> frozenset[str]:
        """The bot's managed role in the message's guild, from discord.py's guild cache."""
        guild_id = payload.get("guild_id")
        if self._client is None or not guild_id:
            return frozenset()
        guild = self._client.get_guild(int(guild_id))
        role = guild.self_role if guild is not None else None
        return frozenset({str(role.id)}) if role is not None else frozenset()

    async def _on_command(self, interaction: discord.Interaction) -> None:
        """A slash command: defer at once, run it through the core, answer by follow-up.
        Runs in discord.py's task, tracked with ours so `idle` and `stop` see it."""
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._command(interaction)
        finally:
            self._tasks.discard(task)

    async def _command(self, interaction: discord.Interaction) -> None:
        try:
            await interaction.response.defer(ephemeral=True, thinking=True)
        except SEND_ERRORS as exc:  # expired, answered elsewhere, unreachable: no way to reply
            log.error("discord.defer_failed interaction=%s: %s", interaction.id, describe(exc))
            return
        core = self._core
        if core is None:
            return
        data: dict[str, Any] = dict(interaction.data or {})
        msg = command_message(
            interaction_id=str(interaction.id),
            command=str(data.get("name", "")),
            arguments=option_text(data.get("options")),
            user_id=str(interaction.user.id),
            user_name=interaction.user.display_name,
            channel_id=str(interaction.channel_id),
            guild_id=str(interaction.guild_id) if interaction.guild_id else None,
            bot=self.identity,
        )
        outcome = await core.handle(msg, deliver=False)
        await self._answer(interaction, outcome.replies, core)

    async def _on_press(self, interaction: discord.Interaction) -> None:
        """A button press: hand the button's command to the core as the presser's
        message, then acknowledge it (deferred update: the message stays as it is)."""
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._press(interaction)
        finally:
            self._tasks.discard(task)

    async def _press(self, interaction: discord.Interaction) -> None:
        data: dict[str, Any] = dict(interaction.data or {})
        msg = press_message(
            interaction_id=str(interaction.id),
            custom_id=str(data.get("custom_id", "")),
            user_id=str(interaction.user.id),
            user_name=interaction.user.display_name,
            channel_id=str(interaction.channel_id),
            guild_id=str(interaction.guild_id) if interaction.guild_id else None,
        )
        core = self._core
        if msg is not None and core is not None and not await hand_over(core, msg, self._tasks):
            log.warning("discord.press_not_taken interaction=%s", interaction.id)
        try:
            await interaction.response.defer()
        except SEND_ERRORS as exc:
            log.warning("discord.press_ack_failed interaction=%s: %s", interaction.id, exc)

    async def _answer(
        self, interaction: discord.Interaction, replies: Sequence[Reply], core: Core
    ) -> None:
        placeholder = True  # the deferred "thinking…" message is still showing
        for reply in replies:
            try:
                chunks = render(reply.text)
                for index, chunk in enumerate(chunks):
                    if placeholder and not reply.private:  # it is ephemeral: make way
                        placeholder = False
                        await interaction.delete_original_response()
                    view = buttons_view(reply.buttons) if index == len(chunks) - 1 else None
                    await interaction.followup.send(
                        chunk,
                        ephemeral=reply.private,
                        allowed_mentions=NO_PINGS,
                        wait=True,
                        view=view if view is not None else discord.utils.MISSING,
                    )
                    placeholder = False
            except SEND_ERRORS as exc:
                await core.record_delivery_failure(
                    reply, DeliveryFailed(f"interaction follow-up failed: {describe(exc)}")
                )
        if placeholder:  # nothing to say (a duplicate delivery): remove "thinking…"
            with contextlib.suppress(*SEND_ERRORS):
                await interaction.delete_original_response()

    # -- outgoing -----------------------------------------------------------

    async def send(self, reply: Reply, progress: SendProgress | None = None) -> list[str]:
        """Post the parts after those `progress` says are done, editing the streamed
        drafts into the first ones (see `delivery.py`)."""
        return await deliver(self._channel(reply.target), reply, progress)

    def open_stream(self, target: Target) -> LiveDiscordMessage | None:
        """Post, then edit, while the reply is written (`streaming.py`). No I/O here."""
        if self._client is None or not self._stream.ready:
            return None
        return LiveDiscordMessage(self._stream, target, self._channel(target))

    async def show_typing(self, target: Target) -> None:
        await self._channel(target).typing()

    def _channel(self, target: Target) -> discord.PartialMessageable:
        if self._client is None:
            raise DeliveryFailed("the Discord adapter is not running")
        guild_id = int(target.server_id) if target.server_id else None
        return self._client.get_partial_messageable(int(target.channel_id), guild_id=guild_id)


def _connection_ended(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("discord.disconnected: %s", describe(task.exception()))


def create_adapter(settings: Settings, secrets: Secrets) -> DiscordAdapter:
    return DiscordAdapter(settings.discord, secrets.require("discord_bot_token"))
