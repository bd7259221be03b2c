"""What people send on Slack: an audio clip recorded in Slack (subtype
"slack_audio", its length in duration_ms) transcribed by the fake endpoint
and answered under its quote, and a PDF and a workbook read, through the
slack_sdk client against the fake Web API and its file downloads."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image
from sqlmodel import select

from bot.store.models import Run
from tests.adapters.slack.support import dm
from tests.fakes.anthropic import text_reply
from tests.media import samples
from tests.media.fixtures import SAID, VOICE, listening, speech

pytestmark = pytest.mark.slow  # seconds a test (tests/tiers.py)

__all__ = ["speech"]  # a fixture

pytest_plugins = ("tests.adapters.slack.fixtures",)
UNLIMITED = {"budgets": {"guest": "unlimited"}}


async def test_an_audio_clip_is_transcribed_and_answered(rig_factory, fake_anthropic, speech):
    rig = await rig_factory(sections={"media": listening(speech), **UNLIMITED})
    clip = rig.slack.add_file(
        "audio_message.webm", VOICE, "audio/webm", subtype="slack_audio", duration_ms=4200
    )
    fake_anthropic.script(text_reply("Booked."))
    await rig.event(dm("", subtype="file_share", files=[clip]))
    await rig.adapter.idle()

    [upload] = speech.uploads
    assert upload.audio == VOICE and upload.content_type == "audio/webm"
    assert upload.filename == "audio_message.webm"
    assert [m["text"] for m in rig.slack.messages] == [f"> 🎤 {SAID}\n\nBooked."]
    async with rig.app.store.read() as session:
        run = (await session.exec(select(Run))).one()
    assert run.audio_seconds == 4.2  # Slack's duration_ms


async def test_a_pdf_and_a_workbook_are_read(rig_factory, fake_anthropic):
    rig = await rig_factory(sections=UNLIMITED)
    report = samples.pdf(3)
    pdf = rig.slack.add_file("report.pdf", report, "application/pdf")
    book = rig.slack.add_file(
        "team.xlsx",
        samples.workbook_with_two_sheets(),
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    )
    fake_anthropic.script(text_reply("Read both."))
    await rig.event(dm("compare", subtype="file_share", files=[pdf, book]))
    await rig.adapter.idle()

    blocks = fake_anthropic.last_request.messages[-1]["content"]
    [document] = [b for b in blocks if b["type"] == "document"]
    assert base64.b64decode(document["source"]["data"]) == report
    assert "## Sheet: Staff\\n\\n| Name | Team |" in json.dumps(blocks)
    assert [m["text"] for m in rig.slack.messages] == ["Read both."]


async def test_a_phone_photo_arrives_upright_and_shrunk(rig_factory, fake_anthropic):
    rig = await rig_factory(sections=UNLIMITED)
    original = samples.photo(4000, 3000, orientation=6)  # stored landscape, shown portrait
    photo = rig.slack.add_file("IMG_0057.jpg", original, "image/jpeg")
    fake_anthropic.script(text_reply("A red wall."))
    await rig.event(dm("what is it?", subtype="file_share", files=[photo]))
    await rig.adapter.idle()

    [image] = [
        b for b in fake_anthropic.last_request.messages[-1]["content"] if b["type"] == "image"
    ]
    assert len(image["source"]["data"]) < 5 * 1024 * 1024
    copy = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"])))
    assert copy.size == (1176, 1568) and 0x0112 not in copy.getexif()
    r, _, b = copy.convert("RGB").getpixel((copy.width - 5, copy.height // 2))
    assert b > 200 and r < 60  # the band along the stored top edge, now on the right
    assert [m["text"] for m in rig.slack.messages] == ["A red wall."]
