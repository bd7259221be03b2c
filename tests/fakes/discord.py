"""A fake Discord that the real discord.py runs against: REST API v10 and a gateway.

Run it in the test's event loop and point `discord.api_base_url` at `fake.api_base_url`::

    async with FakeDiscord() as fake:
        ...  # start the adapter
        await fake.dispatch("MESSAGE_CREATE", fake.user_message("hi <@bot id>"))
        reply = await fake.wait_for_message(channel_id=CHANNEL_ID)

REST, under /api/v10 (`Authorization: Bot <token>` required, except for interaction
callbacks and interaction webhooks, which carry their own token as on Discord):
``GET /users/@me``, ``/oauth2/applications/@me``, ``/gateway/bot``;
``POST /channels/{id}/messages`` (2000-character and empty-message validation,
``message_reference`` with ``fail_if_not_exists``, ``allowed_mentions`` applied to work
out who would be notified: `Posted.pings`), ``POST /channels/{id}/typing``;
``PUT /applications/{app}/commands``; ``POST /interactions/{id}/{token}/callback``
(types 4, 5, and 6 for button presses made with `button_press`; message components
checked: `Posted.components`);
``PATCH`` and ``DELETE /channels/{id}/messages/{id}`` (tests/fakes/discord_edits.py:
`Posted.edits` keeps each content an edit set);
``POST /webhooks/{app}/{token}`` and ``DELETE .../messages/@original``, with
Discord's rule that the first follow-up after a deferral fills the deferred message
and keeps the deferral's visibility; ``GET /attachments/...`` serves files added with
`add_file` (the CDN). Errors have Discord's ``{"message", "code"}`` shape; a 429 carries
``retry_after``, ``global`` and the ``Via`` header discord.py looks for (`rate_limit`,
per channel and method; `cloudflare=True`: a bare HTML 429 as Cloudflare sends).

Gateway, ``GET /gateway``: see tests/fakes/discord_gateway.py. `dispatch(event, d)`
sends to every identified session; messages the bot posts come back to it as
MESSAGE_CREATE, as on Discord. `sync()` is a protocol-level barrier: it asks each
session for a heartbeat and waits for one acknowledging the last sequence number, so
every frame sent before has been processed by the client.

Every request is recorded in `calls`; every message that exists in `posted`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TypeVar

from aiohttp import web

from tests.fakes.chaos import DROPPED, RETRY_AFTER_S, Chaos, hang
from tests.fakes.discord_edits import delete_message, edit_message
from tests.fakes.discord_gateway import Gateway
from tests.fakes.discord_payloads import (
    ALICE,
    APP_ID,
    BOT_USER,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    EPHEMERAL,
    GUILD_ID,
    LOADING,
    TOKEN,
    application_object,
    attachment_object,
    command_object,
    component_interaction_object,
    error,
    gateway_bot_object,
    interaction_object,
    invalid_components,
    invalid_content,
    json_response,
    message_object,
    pings,
    rate_limited,
    reference_object,
    user_message_object,
)

WAIT_LIMIT_S = 60.0  # generous: CI machines are shared and sometimes slow
T = TypeVar("T")


@dataclass
class Call:
    method: str
    path: str
    """Below /api/v10 for REST calls."""
    query: dict[str, str]
    body: Any


@dataclass
class Posted:
    """A message that exists on the fake Discord, sent by the bot or by an interaction."""

    id: str
    channel_id: str
    content: str
    reply_to: str | None
    allowed_mentions: dict[str, Any] | None
    pings: frozenset[str]
    """Who Discord would notify: "user:<id>", "role:<id>", "@everyone", "@here"."""
    ephemeral: bool = False
    loading: bool = False
    interaction_id: str | None = None
    deleted: bool = False
    components: list[dict[str, Any]] | None = None
    """Action rows of buttons under the message."""
    edits: list[str] = field(default_factory=list)
    """The content each edit set, in order (`content` is the last)."""


@dataclass
class Interaction:
    id: str
    token: str
    channel_id: str
    acknowledged: bool = False
    original: Posted | None = None


IS_VOICE_MESSAGE = 1 << 13


DISCORD_EPOCH_MS = 1_420_070_400_000
"""2015-01-01, the start of Discord's snowflake clock."""


class FakeDiscord:
    def __init__(self, *, token: str = TOKEN, message_content_enabled: bool = True) -> None:
        self.token = token
        self.message_content_enabled = message_content_enabled
        self.calls: list[Call] = []
        self.posted: list[Posted] = []
        self.commands: list[dict[str, Any]] = []
        self.rate_limited: list[tuple[str, float]] = []
        self.files: dict[str, tuple[bytes, str]] = {}
        self.interactions: dict[str, Interaction] = {}
        self.gateway = Gateway(
            token=token,
            message_content_enabled=message_content_enabled,
            url=lambda: self.gateway_url,
            changed=self._notify,
        )
        self._messages: dict[str, dict[str, Any]] = {}
        self._nonces: dict[tuple[str, str], str] = {}
        self.nonce_hits = 0
        """Message posts answered with the message already created with that nonce."""
        self._limits: dict[tuple[str, str], list[tuple[float, bool, bool]]] = {}
        self.deleted_ids: set[str] = set()
        self._failures: dict[str, tuple[int, int, str]] = {}
        self._expired: set[str] = set()
        self._last_id = 0
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.chaos: Chaos | None = None
        """Fault injection (tests/fakes/chaos.py): asked with each REST call as
        ``"POST /channels/{channel}/messages"`` (method and route)."""

    # -- server -------------------------------------------------------------

    async def __aenter__(self) -> Self:
        app = web.Application(middlewares=[self._record])
        api = "/api/v10"
        app.router.add_get("/gateway", self.gateway.handle)
        app.router.add_get(api + "/users/@me", self._me)
        app.router.add_get(api + "/oauth2/applications/@me", self._application)
        app.router.add_get(api + "/gateway/bot", self._gateway_bot)
        app.router.add_post(api + "/channels/{channel}/messages", self._create_message)
        app.router.add_get(api + "/channels/{channel}/messages", self._history)
        one = api + "/channels/{channel}/messages/{message}"
        app.router.add_patch(one, self._edit_message)
        app.router.add_delete(one, self._delete_message)
        app.router.add_post(api + "/channels/{channel}/typing", self._typing)
        app.router.add_put(api + "/applications/{app}/commands", self._put_commands)
        app.router.add_post(api + "/interactions/{id}/{token}/callback", self._callback)
        app.router.add_post(api + "/webhooks/{app}/{token}", self._followup)
        original = api + "/webhooks/{app}/{token}/messages/@original"
        app.router.add_delete(original, self._delete_original)
        app.router.add_get("/attachments/{channel}/{id}/{name}", self._file)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.gateway.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base_url(self) -> str:
        return f"{self.url}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    @property
    def identified(self) -> list[dict[str, Any]]:
        """Every IDENTIFY payload the gateway received."""
        return self.gateway.identified

    # -- test controls --------------------------------------------------------

    def snowflake(self) -> str:
        """A new id as Discord makes them: the time it was made in the high
        bits (so `after=<a time's snowflake>` finds what came since), and
        increasing."""
        made = (time.time_ns() // 1_000_000 - DISCORD_EPOCH_MS) << 22
        self._last_id = max(self._last_id + 1, made)
        return str(self._last_id)

    def rate_limit(
        self,
        channel_id: str,
        retry_after: float,
        *,
        is_global: bool = False,
        method: str = "POST",
        cloudflare: bool = False,
    ) -> None:
        """Answer the next message `method` (POST: create, PATCH: edit, DELETE) in
        `channel_id` with a 429 (`cloudflare`: an HTML page without `Via`)."""
        self._limits.setdefault((method, channel_id), []).append(
            (retry_after, is_global, cloudflare)
        )

    def take_rate_limit(self, method: str, channel_id: str) -> web.Response | None:
        """The 429 to answer this request with, if one was asked for."""
        if not (limits := self._limits.get((method, channel_id))):
            return None
        retry_after, is_global, cloudflare = limits.pop(0)
        self.rate_limited.append((channel_id, retry_after))
        if cloudflare:
            return web.Response(
                status=429,
                text="<html><body>Error 1015: You are being rate limited</body></html>",
                content_type="text/html",
                headers={"Retry-After": str(int(retry_after + 0.999))},
            )
        return rate_limited(retry_after, is_global)

    def delete(self, message_id: str) -> None:
        """Someone (a moderator) deleted the message."""
        self.deleted_ids.add(message_id)
        for posted in self.posted:
            if posted.id == message_id:
                posted.deleted = True

    def message(self, message_id: str) -> dict[str, Any] | None:
        """The message object Discord keeps for `message_id` (deleted ones too)."""
        return self._messages.get(message_id)

    def fail(self, channel_id: str, status: int = 403, code: int = 50013, text: str = "") -> None:
        """Refuse every message POST to `channel_id` (default: Missing Permissions)."""
        self._failures[channel_id] = (status, code, text or "Missing Permissions")

    def expire(self, payload: Mapping[str, Any]) -> None:
        """The interaction's token has expired (15 minutes on Discord) after it was
        acknowledged: its follow-up webhook calls are refused."""
        self._expired.add(payload["token"])

    def add_file(self, filename: str, data: bytes, content_type: str | None) -> dict[str, Any]:
        """An attachment object for a file the fake CDN serves."""
        file_id = self.snowflake()
        path = f"/attachments/{CHANNEL_ID}/{file_id}/{filename}"
        self.files[path] = (data, content_type or "application/octet-stream")
        return attachment_object(file_id, filename, len(data), self.url + path, content_type)

    def add_voice_message(self, data: bytes, seconds: float) -> dict[str, Any]:
        """The attachment of a voice message: an Ogg Opus file with its length and
        waveform (the message carrying it has the IS_VOICE_MESSAGE flag: `voice`)."""
        attachment = self.add_file("voice-message.ogg", data, "audio/ogg")
        attachment.update(duration_secs=seconds, waveform=base64.b64encode(bytes(256)).decode())
        return attachment

    def user_message(
        self,
        content: str,
        *,
        channel_id: str = CHANNEL_ID,
        author: Mapping[str, Any] = ALICE,
        guild: bool = True,
        reply_to: Posted | None = None,
        attachments: Sequence[Mapping[str, Any]] = (),
        voice: bool = False,
    ) -> dict[str, Any]:
        """A MESSAGE_CREATE `d` as Discord sends it for a person's message
        (`voice`: a voice message, flag IS_VOICE_MESSAGE = 1 << 13)."""
        referenced = self._messages[reply_to.id] if reply_to is not None else None
        message = user_message_object(
            self.snowflake(), channel_id, author, content, guild, referenced, attachments
        )
        if voice:
            message["flags"] = int(message.get("flags") or 0) | IS_VOICE_MESSAGE
        self._messages[message["id"]] = message
        return message

    def slash_command(
        self,
        name: str,
        arguments: str | None = None,
        *,
        user: Mapping[str, Any] = ALICE,
        channel_id: str = CHANNEL_ID,
        guild: bool = True,
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE `d` for a slash command with our one string option."""
        interaction_id, token = self.snowflake(), "aW50ZXJhY3Rpb24" + secrets.token_urlsafe(48)
        self.interactions[token] = Interaction(interaction_id, token, channel_id)
        command = next((c for c in self.commands if c["name"] == name), None)
        data: dict[str, Any] = {"id": command["id"] if command else self.snowflake()}
        data.update(name=name, type=1)
        if arguments is not None:
            data["options"] = [{"name": "arguments", "type": 3, "value": arguments}]
        return interaction_object(
            interaction_id=interaction_id,
            token=token,
            data=data,
            channel_id=channel_id,
            user=user,
            guild=guild,
        )

    def button_press(
        self, posted: Posted, custom_id: str, *, user: Mapping[str, Any] = ALICE
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE `d`: `user` pressed the button `custom_id` under `posted`."""
        interaction_id, token = self.snowflake(), "aW50ZXJhY3Rpb24" + secrets.token_urlsafe(48)
        self.interactions[token] = Interaction(interaction_id, token, posted.channel_id)
        return component_interaction_object(
            interaction_id=interaction_id,
            token=token,
            custom_id=custom_id,
            message=self._messages[posted.id],
            user=user,
        )

    async def dispatch(self, event: str, data: Mapping[str, Any]) -> None:
        """Send a DISPATCH to every identified gateway session."""
        await self.gateway.dispatch(event, data)

    async def sync(self) -> None:
        """Wait until every session has processed every frame sent so far: the client
        answers a requested heartbeat with the last sequence number it has handled."""
        for session in list(self.gateway.sessions):
            if session.identified:
                target = await self.gateway.request_heartbeat(session)
                await self.wait_until(lambda s=session, t=target: s.acked_seq >= t)  # type: ignore[misc]

    async def wait_until(self, predicate: Callable[[], T | None]) -> T:
        """Wait (event-driven) until `predicate()` is truthy; returns its value. Gives up
        after WAIT_LIMIT_S, so a broken test fails instead of hanging."""
        async with asyncio.timeout(WAIT_LIMIT_S), self._changed:
            return await self._changed.wait_for(predicate)  # type: ignore[arg-type]

    async def wait_for_message(self, channel_id: str, count: int = 1) -> list[Posted]:
        """The channel's visible messages, once there are at least `count`."""

        def enough() -> list[Posted] | None:
            found = self.visible(channel_id)
            return found if len(found) >= count else None

        return await self.wait_until(enough)

    def visible(self, channel_id: str) -> list[Posted]:
        """Messages everyone can see in the channel (not ephemeral, deleted or "thinking…")."""
        return [
            p
            for p in self.posted
            if p.channel_id == channel_id and not (p.deleted or p.loading or p.ephemeral)
        ]

    def requests(self, method: str, pattern: str) -> list[Call]:
        return [c for c in self.calls if c.method == method and re.fullmatch(pattern, c.path)]

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- REST ---------------------------------------------------------------------

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == "/gateway":
            return await handler(request)  # type: ignore[no-any-return]
        raw = await request.read()
        body = json.loads(raw) if raw and request.content_type == "application/json" else None
        path = request.path.removeprefix("/api/v10")
        self.calls.append(Call(request.method, path, dict(request.query), body))
        authless = path.startswith(("/interactions/", "/webhooks/", "/attachments/"))
        if not authless and request.headers.get("Authorization") != f"Bot {self.token}":
            response: web.StreamResponse = error(401, 0, "401: Unauthorized")
        elif path.startswith("/webhooks/") and request.match_info.get("token") in self._expired:
            response = error(401, 50027, "Invalid Webhook Token")
        elif (injected := await self._chaos(request)) is not None:
            response = injected
        else:
            response = await handler(request)
        await self._notify()
        return response

    async def _chaos(self, request: web.Request) -> web.StreamResponse | None:
        """The fault `chaos` injects into this REST call, if any (None: answer it)."""
        if self.chaos is None:
            return None
        route = request.match_info.route.resource
        name = route.canonical.removeprefix("/api/v10") if route is not None else request.path
        fault = self.chaos(f"{request.method} {name}")
        if fault is None:
            return None
        if fault.kind == "status":
            if fault.code == 429:
                return rate_limited(RETRY_AFTER_S, False)
            return error(fault.code, 0, f"{fault.code}: Internal Server Error")
        if not await hang(request, fault.seconds):
            return web.Response(status=DROPPED)
        return None

    async def _me(self, request: web.Request) -> web.Response:
        return json_response({**BOT_USER, "flags": 0, "mfa_enabled": False, "verified": True})

    async def _application(self, request: web.Request) -> web.Response:
        return json_response(application_object(self.message_content_enabled))

    async def _gateway_bot(self, request: web.Request) -> web.Response:
        return json_response(gateway_bot_object(self.gateway_url))

    async def _typing(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def _put_commands(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.commands = [command_object(c, self.snowflake(), self.snowflake()) for c in body]
        return json_response(self.commands)

    async def _history(self, request: web.Request) -> web.Response:
        """GET /channels/{id}/messages: the channel's messages after `after` (or
        the latest), newest first, at most `limit` (1-100), as Discord answers."""
        channel_id = request.match_info["channel"]
        after = int(request.query.get("after") or 0)
        limit = min(max(int(request.query.get("limit") or 50), 1), 100)
        found = sorted(
            (
                m
                for m in self._messages.values()
                if m["channel_id"] == channel_id and m["id"] not in self.deleted_ids
            ),
            key=lambda m: int(m["id"]),
        )
        newer = [m for m in found if int(m["id"]) > after]
        chosen = newer[:limit] if after else newer[-limit:]
        return json_response(list(reversed(chosen)))

    async def _edit_message(self, request: web.Request) -> web.Response:
        return await edit_message(self, request)

    async def _delete_message(self, request: web.Request) -> web.Response:
        return await delete_message(self, request)

    async def _create_message(self, request: web.Request) -> web.Response:
        channel_id = request.match_info["channel"]
        body = await request.json()
        if limited := self.take_rate_limit("POST", channel_id):
            return limited
        if failure := self._failures.get(channel_id):
            return error(*failure)
        nonce = body.get("nonce")
        if nonce is not None and body.get("enforce_nonce"):
            key = (channel_id, str(nonce))
            if key in self._nonces:  # Discord returns the message already created with it
                self.nonce_hits += 1
                return json_response(self._messages[self._nonces[key]])
        content = str(body.get("content") or "")
        if problem := invalid_content(content) or invalid_components(body.get("components")):
            return problem
        reply_to: str | None = None
        if reference := body.get("message_reference"):
            reply_to = str(reference.get("message_id"))
            if reply_to not in self._messages:
                if reference.get("fail_if_not_exists", True):
                    return error(400, 50035, "Invalid Form Body (Unknown message)")
                reply_to = None
        posted = self._post(channel_id, content, body.get("allowed_mentions"), reply_to)
        message = self._messages[posted.id]
        if components := body.get("components"):
            posted.components = message["components"] = components
        if nonce is not None:
            self._nonces[(channel_id, str(nonce))] = posted.id
        await self.dispatch("MESSAGE_CREATE", message)  # the bot sees its own messages
        return json_response(message)

    def _post(
        self,
        channel_id: str,
        content: str,
        allowed: dict[str, Any] | None,
        reply_to: str | None,
        **state: Any,
    ) -> Posted:
        referenced = self._messages.get(reply_to) if reply_to else None
        reply_author = referenced["author"]["id"] if referenced else None
        posted = Posted(
            id=self.snowflake(),
            channel_id=channel_id,
            content=content,
            reply_to=reply_to,
            allowed_mentions=allowed,
            pings=pings(content, allowed, reply_author),
            **state,
        )
        self.posted.append(posted)
        message = message_object(posted.id, channel_id, dict(BOT_USER), content)
        if channel_id != DM_CHANNEL_ID:
            message["guild_id"] = GUILD_ID
        if referenced is not None:
            message["type"] = 19
            message["message_reference"] = reference_object(referenced["id"], channel_id)
            message["referenced_message"] = referenced
        if posted.interaction_id:
            message.update(webhook_id=APP_ID, application_id=APP_ID)
            message["flags"] = (EPHEMERAL if posted.ephemeral else 0) | (
                LOADING if posted.loading else 0
            )
        self._messages[posted.id] = message
        return posted

    # -- interactions ---------------------------------------------------------------

    async def _callback(self, request: web.Request) -> web.Response:
        interaction = self.interactions.get(request.match_info["token"])
        if interaction is None or interaction.id != request.match_info["id"]:
            return error(404, 10062, "Unknown interaction")
        if interaction.acknowledged:
            return error(400, 40060, "Interaction has already been acknowledged.")
        body = await request.json()
        kind, data = body.get("type"), body.get("data") or {}
        ephemeral = bool(int(data.get("flags") or 0) & EPHEMERAL)
        if kind == 5:  # DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE: "<bot> is thinking…"
            original = self._post(interaction.channel_id, "", None, None, loading=True)
        elif kind == 6:  # DEFERRED_UPDATE_MESSAGE: a component press, nothing shown
            interaction.acknowledged = True
            return json_response({"interaction": {"id": interaction.id, "type": 3}})
        elif kind == 4:  # CHANNEL_MESSAGE_WITH_SOURCE
            original = self._post(interaction.channel_id, str(data.get("content", "")), None, None)
        else:
            return error(400, 50035, f"Invalid Form Body (unsupported response type {kind})")
        original.ephemeral, original.interaction_id = ephemeral, interaction.id
        interaction.acknowledged, interaction.original = True, original
        message = self._messages[original.id]
        message["flags"] = (EPHEMERAL if ephemeral else 0) | (LOADING if original.loading else 0)
        response = {
            "id": interaction.id,
            "type": 2,
            "response_message_id": original.id,
            "response_message_loading": original.loading,
            "response_message_ephemeral": ephemeral,
        }
        return json_response(
            {"interaction": response, "resource": {"type": kind, "message": message}}
        )

    async def _followup(self, request: web.Request) -> web.Response:
        interaction = self.interactions.get(request.match_info["token"])
        if not (interaction and interaction.acknowledged and request.match_info["app"] == APP_ID):
            return error(404, 10015, "Unknown Webhook")
        body = await request.json()
        content = str(body.get("content") or "")
        if problem := invalid_content(content) or invalid_components(body.get("components")):
            return problem
        allowed = body.get("allowed_mentions")
        original = interaction.original
        if original is not None and original.loading and not original.deleted:
            # The first follow-up after a deferral fills the deferred message, and keeps
            # the deferral's visibility whatever flags it asks for.
            original.content, original.loading = content, False
            original.allowed_mentions, original.pings = allowed, pings(content, allowed, None)
            message = self._messages[original.id]
            message.update(content=content, flags=EPHEMERAL if original.ephemeral else 0)
        else:
            ephemeral = bool(int(body.get("flags") or 0) & EPHEMERAL)
            posted = self._post(
                interaction.channel_id,
                content,
                allowed,
                None,
                ephemeral=ephemeral,
                interaction_id=interaction.id,
            )
            message = self._messages[posted.id]
            if not ephemeral:
                await self.dispatch("MESSAGE_CREATE", message)
        if components := body.get("components"):
            message["components"] = components
            next(p for p in self.posted if p.id == message["id"]).components = components
        if request.query.get("wait") in ("1", "true", "True"):
            return json_response(message)
        return web.Response(status=204)

    async def _delete_original(self, request: web.Request) -> web.Response:
        original = self._original(request)
        if original is None:
            return error(404, 10008, "Unknown Message")
        original.deleted = True
        return web.Response(status=204)

    def _original(self, request: web.Request) -> Posted | None:
        interaction = self.interactions.get(request.match_info["token"])
        if interaction is None or interaction.original is None or interaction.original.deleted:
            return None
        return interaction.original

    async def _file(self, request: web.Request) -> web.Response:
        if (found := self.files.get(request.path)) is None:
            return error(404, 0, "404: Not Found")
        return web.Response(body=found[0], content_type=found[1])
