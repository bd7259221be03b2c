"""What people send on Telegram, for both libraries: a 4,000-pixel photo sent
as a file, a PDF and a voice note, downloaded through the fake Bot API's file
endpoint, read or transcribed (the fake transcription endpoint), answered."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image
from sqlmodel import select

from bot.store.models import InboxItem, Run
from tests.fakes.anthropic import text_reply
from tests.fakes.telegram_updates import private
from tests.media import samples
from tests.media.fixtures import SAID, VOICE, listening, speech

pytestmark = pytest.mark.slow  # seconds a test (tests/tiers.py)

__all__ = ["speech"]  # a fixture

UNLIMITED = {"budgets": {"guest": "unlimited"}}


async def test_a_photo_file_and_a_pdf_reach_the_model(rig, library, fake_anthropic):
    await rig.open(library, sections=UNLIMITED)
    fake_anthropic.script(text_reply("A red wall."), text_reply("Three pages."))
    original = samples.photo(4000, 3000, orientation=6)
    photo_id = rig.telegram.add_file(original)
    await rig.deliver(
        private(
            None,
            document={
                "file_id": photo_id,
                "file_unique_id": "p1",
                "file_name": "IMG_4000.jpg",
                "mime_type": "image/jpeg",
                "file_size": len(original),
            },
        )
    )
    report = samples.pdf(3)
    pdf_id = rig.telegram.add_file(report)
    await rig.deliver(
        private(
            "summary?",
            document={
                "file_id": pdf_id,
                "file_unique_id": "p2",
                "file_name": "report.pdf",
                "mime_type": "application/pdf",
                "file_size": len(report),
            },
        )
    )

    first, second = fake_anthropic.requests
    [image] = [b for b in first.messages[-1]["content"] if b["type"] == "image"]
    copy = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"])))
    assert copy.size == (1176, 1568)
    [document] = [b for b in second.messages[-1]["content"] if b["type"] == "document"]
    assert base64.b64decode(document["source"]["data"]) == report
    assert [c.visible_text for c in rig.telegram.sent()] == ["A red wall.", "Three pages."]


async def test_a_voice_note_is_transcribed_and_answered_under_its_quote(
    rig, library, fake_anthropic, speech
):
    app = await rig.open(library, sections={"media": listening(speech), **UNLIMITED})
    fake_anthropic.script(text_reply("Booked."))
    voice_id = rig.telegram.add_file(VOICE, path="voice/file_1.oga")
    await rig.deliver(
        private(
            None,
            voice={
                "file_id": voice_id,
                "file_unique_id": "v1",
                "duration": 4,
                "mime_type": "audio/ogg",
                "file_size": len(VOICE),
            },
        )
    )

    [upload] = speech.uploads
    assert upload.audio == VOICE and upload.model == "whisper-large-v3-turbo"
    assert upload.filename == "voice.ogg" and upload.content_type == "audio/ogg"
    said = fake_anthropic.last_request.messages[-1]["content"][0]["text"]
    assert said == f"[Voice message voice.ogg, 0:04, transcribed]: {SAID}"
    [sent] = rig.telegram.sent()
    assert sent.params["text"].startswith(f"<blockquote>🎤 {SAID}</blockquote>")
    assert sent.visible_text is not None and sent.visible_text.endswith("Booked.")
    async with app.store.read() as session:
        run = (await session.exec(select(Run))).one()
    assert run.audio_seconds == 4.0  # Telegram's own figure


async def test_the_transcription_service_down_is_one_line_and_kept(
    rig, library, fake_anthropic, speech
):
    app = await rig.open(library, sections={"media": listening(speech), **UNLIMITED})
    speech.status = 503
    voice_id = rig.telegram.add_file(VOICE)
    await rig.deliver(
        private(
            None,
            voice={
                "file_id": voice_id,
                "file_unique_id": "v2",
                "duration": 4,
                "mime_type": "audio/ogg",
                "file_size": len(VOICE),
            },
        )
    )
    assert [c.visible_text for c in rig.telegram.sent()] == [
        "I couldn't transcribe your voice message: the transcription service is not working "
        "right now. Your message is kept, and an operator can see it."
    ]
    assert fake_anthropic.request_count == 0 and len(speech.uploads) == 2
    async with app.store.read() as session:
        item = (await session.exec(select(InboxItem))).one()
    assert item.state == "failed" and "HTTP 503" in (item.error or "")
