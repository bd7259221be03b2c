"""The fake transcription endpoint as a fixture, and the `[media]` settings
that point at it, for the platforms' media tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.fakes.transcription import KEY, FakeTranscription
from tests.media import samples

KEY_ENV = "SWITCHBOARD_TEST_TRANSCRIPTION_KEY"
VOICE = samples.ogg_opus(4.2)
SAID = "Book the room for Friday at ten."


@pytest.fixture
async def speech(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeTranscription]:
    monkeypatch.setenv(KEY_ENV, KEY)
    async with FakeTranscription(transcripts={VOICE: SAID}) as fake:
        yield fake


def listening(speech: FakeTranscription, **options: Any) -> dict[str, Any]:
    """`[media]` with `[media.transcription]` on the fake endpoint."""
    return {
        "transcription": {
            "base_url": speech.base_url,
            "model": "whisper-large-v3-turbo",
            "api_key_env": KEY_ENV,
            **options,
        }
    }
