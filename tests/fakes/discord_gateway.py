"""The fake Discord's gateway (part of tests/fakes/discord.py): one websocket endpoint
speaking Discord's gateway protocol, JSON encoding.

HELLO (op 10) on connect; heartbeats (op 1) answered with HEARTBEAT_ACK (op 11);
IDENTIFY (op 2) → READY and a GUILD_CREATE, or close 4004 for a wrong token and 4014
for the privileged message content intent when the application does not have it;
RESUME (op 6) → RESUMED. A session that identified with ``shard: [id, count]`` gets
only its shard's events (a guild's by ``(guild_id >> 22) % count``, DMs on shard 0).
With `compress=zlib-stream` in the URL (discord.py asks for it)
every frame is a binary zlib stream chunk ending in Z_SYNC_FLUSH, as Discord sends it.
"""

from __future__ import annotations

import json
import secrets
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.discord_payloads import APP_ID, BOT_USER, GUILD_ID, guild_object

HEARTBEAT_INTERVAL_MS = 41250
MESSAGE_CONTENT_INTENT = 1 << 15


@dataclass
class Session:
    ws: web.WebSocketResponse
    compressor: Any | None
    seq: int = 0
    identified: bool = False
    acked_seq: int = -1
    """The highest sequence number a heartbeat from the client has acknowledged."""
    session_id: str = field(default_factory=lambda: secrets.token_hex(16))
    shard: tuple[int, int] | None = None
    """(shard id, shard count) from IDENTIFY; None: an unsharded session."""

    def receives(self, data: Mapping[str, Any]) -> bool:
        """Whether Discord sends this event to the session: a sharded one gets a
        guild's events when (guild_id >> 22) % count is its id, and DMs on shard 0."""
        if self.shard is None:
            return True
        shard_id, count = self.shard
        guild = data.get("guild_id") if isinstance(data, Mapping) else None
        return (int(guild) >> 22) % count == shard_id if guild else shard_id == 0

    async def send(self, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload, separators=(",", ":"))
        if self.compressor is None:
            await self.ws.send_str(data)
        else:
            chunk = self.compressor.compress(data.encode())
            await self.ws.send_bytes(chunk + self.compressor.flush(zlib.Z_SYNC_FLUSH))


class Gateway:
    def __init__(
        self,
        *,
        token: str,
        message_content_enabled: bool,
        url: Callable[[], str],
        changed: Callable[[], Awaitable[None]],
    ) -> None:
        self.token = token
        self.message_content_enabled = message_content_enabled
        self.identified: list[dict[str, Any]] = []
        """Every IDENTIFY payload received."""
        self.sessions: list[Session] = []
        self._url = url
        self._changed = changed
        self._shards: dict[str, tuple[int, int]] = {}
        """session id → shard, for a RESUME"""

    async def dispatch(self, event: str, data: Mapping[str, Any]) -> None:
        """Send a DISPATCH (op 0) to every identified session."""
        for session in self.sessions:
            if session.identified and session.receives(data):
                session.seq += 1
                await session.send({"op": 0, "t": event, "s": session.seq, "d": data})

    async def request_heartbeat(self, session: Session) -> int:
        """Ask the client for a heartbeat (op 1 from the server); returns the sequence
        number a heartbeat must acknowledge to prove everything sent was processed."""
        await session.send({"op": 1, "d": None, "s": None, "t": None})
        return session.seq

    async def invalidate_sessions(self) -> None:
        """INVALID_SESSION (op 9), not resumable: clients must IDENTIFY afresh."""
        for session in list(self.sessions):
            if session.identified:
                await session.send({"op": 9, "d": False, "s": None, "t": None})

    async def close(self) -> None:
        for session in list(self.sessions):
            await session.ws.close(code=1001)

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        zlib_stream = request.query.get("compress") == "zlib-stream"
        session = Session(ws, zlib.compressobj() if zlib_stream else None)
        self.sessions.append(session)
        try:
            hello = {"heartbeat_interval": HEARTBEAT_INTERVAL_MS}
            await session.send({"op": 10, "d": hello, "s": None, "t": None})
            async for frame in ws:
                if frame.type is WSMsgType.TEXT:
                    await self._receive(session, json.loads(frame.data))
        finally:
            self.sessions.remove(session)
            await self._changed()
        return ws

    async def _receive(self, session: Session, payload: Mapping[str, Any]) -> None:
        op, data = payload.get("op"), payload.get("d")
        if op == 1:  # heartbeat: `d` is the last sequence number the client has seen
            session.acked_seq = max(session.acked_seq, data if isinstance(data, int) else 0)
            await session.send({"op": 11})
            await self._changed()
        elif op == 2:
            await self._identify(session, data or {})
        elif op == 6:
            resumed = data.get("session_id") if isinstance(data, Mapping) else None
            session.shard = self._shards.get(str(resumed))
            session.identified = True
            session.seq += 1
            await session.send({"op": 0, "t": "RESUMED", "s": session.seq, "d": {}})

    async def _identify(self, session: Session, data: Mapping[str, Any]) -> None:
        self.identified.append(dict(data))
        if data.get("token") != self.token:
            await session.ws.close(code=4004, message=b"Authentication failed.")
            return
        intents = int(data.get("intents") or 0)
        if intents & MESSAGE_CONTENT_INTENT and not self.message_content_enabled:
            await session.ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        shard = data.get("shard")
        if isinstance(shard, list) and len(shard) == 2:
            session.shard = (int(shard[0]), int(shard[1]))
            self._shards[session.session_id] = session.shard
        session.identified = True
        session.seq += 1
        ready = {
            "v": 10,
            "user": BOT_USER,
            "guilds": [{"id": GUILD_ID, "unavailable": True}],
            "session_id": session.session_id,
            "resume_gateway_url": self._url(),
            "application": {"id": APP_ID, "flags": 1 << 19},
        }
        await session.send({"op": 0, "t": "READY", "s": session.seq, "d": ready})
        session.seq += 1
        guild = {"op": 0, "t": "GUILD_CREATE", "s": session.seq, "d": guild_object()}
        await session.send(guild)
        await self._changed()
