"""A fake OpenAI-compatible transcription API on 127.0.0.1:
``POST /v1/audio/transcriptions`` (multipart: ``file``, ``model``,
``response_format``, optional ``language``; ``Authorization: Bearer`` when a
key is set) answering ``{"text": …}`` like OpenAI's. Every request is recorded
with the bytes it carried; `transcripts` maps audio bytes to what they say.
`status` answers an outage instead; `cut` closes the connection unanswered."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

from aiohttp import web

KEY = "sk-transcribe-test-0123456789"


@dataclass
class Upload:
    model: str
    filename: str
    content_type: str
    audio: bytes
    response_format: str | None
    language: str | None
    authorization: str | None


@dataclass
class FakeTranscription:
    key: str | None = KEY
    transcripts: dict[bytes, str] = field(default_factory=dict)
    uploads: list[Upload] = field(default_factory=list)
    status: int = 200
    cut: bool = False
    hold: asyncio.Event | None = None
    """While set and not yet set(): requests wait (a slow service)."""
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> Self:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self._runner = runner
        self.port = runner.addresses[0][1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Stop listening: the service is down (connections refused)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _transcribe(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        upload = form.get("file")
        if not isinstance(upload, web.FileField):
            return web.json_response({"error": {"message": "file is required"}}, status=400)
        found = Upload(
            model=str(form.get("model", "")),
            filename=upload.filename,
            content_type=upload.content_type,
            audio=upload.file.read(),
            response_format=_text(form.get("response_format")),
            language=_text(form.get("language")),
            authorization=request.headers.get("Authorization"),
        )
        self.uploads.append(found)
        if self.hold is not None:
            await self.hold.wait()
        if self.cut:
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if self.key is not None and found.authorization != f"Bearer {self.key}":
            return web.json_response({"error": {"message": "Incorrect API key"}}, status=401)
        if self.status != 200:
            return web.json_response({"error": {"message": "overloaded"}}, status=self.status)
        text = self.transcripts.get(found.audio)
        if text is None:
            return web.json_response({"error": {"message": "unknown audio"}}, status=400)
        return web.json_response({"text": text})


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
