"""Speech to text through an OpenAI-compatible `/v1/audio/transcriptions`
endpoint (OpenAI, Groq, a self-hosted faster-whisper server): one multipart
POST per voice message, `{"text": …}` back.

One HTTP session for the process. A connection that fails or a 5xx/429 is
tried once more after a short pause; anything else, or a second failure, is
`TranscriptionFailed` with a reason that names no secret (the key is only in
the Authorization header, never in a message or a log line).
"""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp

from bot.config.media import TranscriptionSettings
from bot.media.errors import TranscriptionFailed

log = logging.getLogger("switchboard.media")

RETRY_PAUSE_S = 0.5
_RETRIED = frozenset({429, 500, 502, 503, 504})


class Transcriber:
    def __init__(self, settings: TranscriptionSettings, api_key: str | None) -> None:
        if settings.base_url is None:
            raise ValueError("no [media.transcription] base_url")
        self.settings = settings
        self.model = settings.model
        self._url = f"{settings.base_url}/audio/transcriptions"
        self._key = api_key
        self._session: aiohttp.ClientSession | None = None

    async def transcribe(self, data: bytes, filename: str, mime_type: str) -> str:
        """The text spoken in `data`. Raises `TranscriptionFailed`."""
        for attempt in (1, 2):
            try:
                return await self._post(data, filename, mime_type)
            except _Retry as exc:
                if attempt == 2:
                    raise TranscriptionFailed(str(exc)) from None
                log.info("transcription.retry reason=%s", exc)
                await asyncio.sleep(RETRY_PAUSE_S)
        raise AssertionError("unreachable")

    async def _post(self, data: bytes, filename: str, mime_type: str) -> str:
        form = aiohttp.FormData()
        form.add_field("file", data, filename=filename, content_type=mime_type)
        form.add_field("model", self.model)
        form.add_field("response_format", "json")
        if self.settings.language:
            form.add_field("language", self.settings.language)
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        try:
            async with self._http().post(self._url, data=form, headers=headers) as response:
                body = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _Retry(f"the service did not answer ({type(exc).__name__})") from None
        if status in _RETRIED:
            raise _Retry(f"the service answered HTTP {status}")
        if status != 200:
            raise TranscriptionFailed(f"the service refused it (HTTP {status}{_error(body)})")
        try:
            text = json.loads(body)["text"]
        except (ValueError, KeyError, TypeError):
            raise TranscriptionFailed("the service's answer was not a transcript") from None
        if not isinstance(text, str):
            raise TranscriptionFailed("the service's answer was not a transcript")
        return text.strip()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(total=self.settings.timeout_seconds)
            self._session = aiohttp.ClientSession(timeout=timeout)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class _Retry(Exception):
    """A failure worth one more try."""


def _error(body: bytes) -> str:
    """The service's own error message, short (OpenAI: {"error": {"message"}})."""
    try:
        found = json.loads(body)
        message = found["error"]["message"] if isinstance(found["error"], dict) else found["error"]
    except (ValueError, KeyError, TypeError):
        return ""
    return f": {' '.join(str(message).split())[:200]}"
