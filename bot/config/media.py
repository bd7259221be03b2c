"""`[media]` and `[media.transcription]`: what people send, as the model gets it.

Photos are shrunk to `image_max_px` on their long edge, PDFs go to the model
as documents (or as their text), office documents become Markdown capped at
`document_max_chars`, and voice messages are transcribed by an
OpenAI-compatible `/v1/audio/transcriptions` endpoint when one is set
(`bot.media`). Per message: at most `max_files` files and `max_bytes` bytes.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from bot.config.sections import Section

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class TranscriptionSettings(Section):
    base_url: str | None = None
    """An OpenAI-compatible API's base URL, ending in /v1 as OpenAI clients'
    do (OpenAI, Groq, a self-hosted faster-whisper server): the bot posts to
    `{base_url}/audio/transcriptions`. Unset: voice messages are answered
    with "I can't listen to voice messages yet"."""
    model: str = Field(default="whisper-1", min_length=1, max_length=200)
    api_key_env: str | None = None
    """The environment variable holding the API key (sent as a Bearer token);
    unset: no key (a local server)."""
    echo: bool = True
    """Quote the transcript as the first line of the reply."""
    max_seconds: int = Field(default=600, ge=1, le=4 * 3600)
    """Longer voice messages and audio files are refused, before any upload."""
    timeout_seconds: float = Field(default=120.0, gt=0, le=900)
    language: str | None = Field(default=None, pattern=r"^[a-z]{2,3}$")
    """The spoken language as an ISO-639-1 code ("en"), when known: helps
    accuracy; unset: the service detects it."""

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            return None
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL (ending in /v1)")
        return value.rstrip("/") if value is not None else None

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.fullmatch(value):
            raise ValueError("must be the name of an environment variable (not the key itself)")
        return value


class MediaSettings(Section):
    image_max_px: int = Field(default=1568, ge=200, le=8000)
    """The long edge of an image as the model gets it (Anthropic recommends
    1568: larger ones cost more and are shrunk by the API anyway). The
    original is kept in the files table."""
    max_files: int = Field(default=10, ge=1, le=100)
    """Files one message may carry; more get a clear reply, no model call."""
    max_bytes: int = Field(default=50 * 1024 * 1024, ge=1)
    """The files of one message together (as downloaded)."""
    document_max_chars: int = Field(default=40_000, ge=1000)
    """A document's text the model reads at once; the rest is stored and
    read on with `get_tool_result`."""
    transcription: TranscriptionSettings = TranscriptionSettings()
