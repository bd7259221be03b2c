"""The transcription client against a fake OpenAI-compatible endpoint: what
it sends, and each way the service can fail (a refusal, an outage retried
once, a cut connection, garbage, nobody listening) as `TranscriptionFailed`
naming no secret."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from bot.config.media import TranscriptionSettings
from bot.media.errors import TranscriptionFailed
from bot.media.transcription import Transcriber
from tests.fakes.transcription import KEY, FakeTranscription
from tests.media.samples import ogg_opus

VOICE = ogg_opus(4.0)


@pytest.fixture
async def service() -> AsyncIterator[FakeTranscription]:
    async with FakeTranscription(transcripts={VOICE: "Hello there."}) as fake:
        yield fake


def _client(service: FakeTranscription, key: str | None = KEY, **settings: object) -> Transcriber:
    config = TranscriptionSettings.model_validate(
        {"base_url": service.base_url, "model": "whisper-large-v3", **settings}
    )
    return Transcriber(config, key)


async def test_the_audio_model_and_key_are_sent(service: FakeTranscription) -> None:
    client = _client(service, language="de")
    try:
        assert await client.transcribe(VOICE, "voice.ogg", "audio/ogg") == "Hello there."
    finally:
        await client.aclose()
    [upload] = service.uploads
    assert upload.audio == VOICE and upload.model == "whisper-large-v3"
    assert (upload.filename, upload.content_type) == ("voice.ogg", "audio/ogg")
    assert upload.authorization == f"Bearer {KEY}"
    assert (upload.response_format, upload.language) == ("json", "de")


async def test_a_local_server_without_a_key(service: FakeTranscription) -> None:
    service.key = None
    client = _client(service, key=None)
    try:
        assert await client.transcribe(VOICE, "voice.ogg", "audio/ogg") == "Hello there."
    finally:
        await client.aclose()
    assert service.uploads[0].authorization is None


async def test_an_outage_is_tried_once_more_then_fails(service: FakeTranscription) -> None:
    service.status = 503
    client = _client(service)
    try:
        with pytest.raises(TranscriptionFailed, match="HTTP 503"):
            await client.transcribe(VOICE, "voice.ogg", "audio/ogg")
    finally:
        await client.aclose()
    assert len(service.uploads) == 2


async def test_a_refusal_is_not_retried_and_keeps_no_key(service: FakeTranscription) -> None:
    client = _client(service, key="sk-wrong-key-abcdef")
    try:
        with pytest.raises(TranscriptionFailed) as caught:
            await client.transcribe(VOICE, "voice.ogg", "audio/ogg")
    finally:
        await client.aclose()
    assert "HTTP 401: Incorrect API key" in str(caught.value)
    assert "sk-wrong" not in str(caught.value) and len(service.uploads) == 1


async def test_a_cut_connection_and_nobody_listening(service: FakeTranscription) -> None:
    service.cut = True
    client = _client(service)
    try:
        with pytest.raises(TranscriptionFailed, match="did not answer"):
            await client.transcribe(VOICE, "voice.ogg", "audio/ogg")
        assert len(service.uploads) == 2
        await service.stop()
        with pytest.raises(TranscriptionFailed, match="did not answer"):
            await client.transcribe(VOICE, "voice.ogg", "audio/ogg")
    finally:
        await client.aclose()


async def test_garbage_is_not_a_transcript() -> None:
    async def garbage(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text="<html>proxy error page</html>", content_type="text/html")

    app = web.Application()
    app.router.add_post("/v1/audio/transcriptions", garbage)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    config = TranscriptionSettings(base_url=f"http://127.0.0.1:{port}/v1")
    client = Transcriber(config, None)
    try:
        with pytest.raises(TranscriptionFailed, match="not a transcript"):
            await client.transcribe(VOICE, "voice.ogg", "audio/ogg")
    finally:
        await client.aclose()
        await runner.cleanup()


def test_a_missing_ffprobe_is_one_warning_at_start(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    import logging

    from bot.config.media import MediaSettings
    from bot.media import build_media

    monkeypatch.setattr("bot.media.audio.shutil.which", lambda name: None)
    caplog.set_level(logging.WARNING, logger="switchboard.media")
    build_media(MediaSettings(), None, {})  # no transcription: nothing to look for
    assert caplog.records == []
    settings = MediaSettings.model_validate(
        {"transcription": {"base_url": "http://127.0.0.1:9/v1"}}
    )
    media = build_media(settings, None, {})
    [warning] = caplog.records
    assert warning.levelno == logging.WARNING and "ffprobe" in warning.getMessage()
    assert media.ffprobe is None and media.transcriber is not None


async def test_audio_of_unknown_length_is_estimated_from_its_size(
    service: FakeTranscription,
) -> None:
    """A container mutagen does not read, no ffprobe, no platform figure: the
    length is taken as at most 16 kbit/s, so a long one is still refused."""
    from bot.config.media import MediaSettings
    from bot.media import Media, Sender
    from bot.types import Attachment, IncomingMessage

    settings = MediaSettings.model_validate(
        {"transcription": {"base_url": service.base_url, "max_seconds": 60}}
    )
    media = Media(settings, transcriber=Transcriber(settings.transcription, KEY))
    webm = b"\x1a\x45\xdf\xa3" + bytes(200_000)  # 100 s at 16 kbit/s
    clip = Attachment("audio", "f1", "clip.webm", "audio/webm", len(webm), data=webm)
    msg = IncomingMessage("slack", "U1", "D1", "", attachments=(clip,))
    try:
        prepared = await media.prepare(msg, Sender(1, 1))
    finally:
        await media.transcriber.aclose()  # type: ignore[union-attr]
    [part] = prepared.parts
    assert part.problem == "it is 1:40 long; I transcribe voice messages of up to 1:00"
    assert service.uploads == []
