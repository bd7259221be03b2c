"""What people send on Discord: a voice message (an Ogg Opus attachment on a
message flagged IS_VOICE_MESSAGE) transcribed by the fake endpoint and
answered under its quote, and a 4,000-pixel photo shrunk, through discord.py
against the fake REST API, gateway and CDN."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image
from sqlmodel import select

from bot.store.models import Run
from tests.fakes.anthropic import FakeAnthropic, text_reply
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import DM_CHANNEL_ID
from tests.media import samples
from tests.media.fixtures import SAID, VOICE, listening, speech

pytestmark = pytest.mark.slow  # seconds a test (tests/tiers.py)

__all__ = ["speech"]  # a fixture

UNLIMITED = {"budgets": {"guest": "unlimited"}}


async def test_a_voice_message_is_transcribed_and_answered(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic, speech
):
    app, _ = await start_discord(sections={"media": listening(speech), **UNLIMITED})
    voice = fake_discord.add_voice_message(VOICE, 4.2)
    message = fake_discord.user_message(
        "", channel_id=DM_CHANNEL_ID, guild=False, attachments=[voice], voice=True
    )
    fake_anthropic.script(text_reply("Booked for Friday."))
    await fake_discord.dispatch("MESSAGE_CREATE", message)

    [reply] = await fake_discord.wait_for_message(DM_CHANNEL_ID)
    assert reply.content == f"> 🎤 {SAID}\n\nBooked for Friday."
    [upload] = speech.uploads
    assert upload.audio == VOICE and upload.model == "whisper-large-v3-turbo"
    assert upload.filename == "voice-message.ogg"
    said = fake_anthropic.last_request.messages[-1]["content"][0]["text"]
    assert said == f"[Voice message voice-message.ogg, 0:04, transcribed]: {SAID}"
    async with app.store.read() as session:
        run = (await session.exec(select(Run))).one()
    assert run.audio_seconds == 4.2  # Discord's duration_secs


async def test_a_large_photo_arrives_shrunk(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    await start_discord(sections=UNLIMITED)
    photo = fake_discord.add_file("PXL_2026.jpg", samples.photo(4000, 3000), "image/jpeg")
    message = fake_discord.user_message(
        "what is it?", channel_id=DM_CHANNEL_ID, guild=False, attachments=[photo]
    )
    fake_anthropic.script(text_reply("A red wall."))
    await fake_discord.dispatch("MESSAGE_CREATE", message)
    await fake_discord.wait_for_message(DM_CHANNEL_ID)
    [image] = [
        b for b in fake_anthropic.last_request.messages[-1]["content"] if b["type"] == "image"
    ]
    copy = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"])))
    assert copy.size == (1568, 1176)


async def test_a_word_document_arrives_as_markdown(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    await start_discord(sections=UNLIMITED)
    doc = fake_discord.add_file(
        "figures.docx",
        samples.word_with_table(),
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    )
    message = fake_discord.user_message(
        "totals?", channel_id=DM_CHANNEL_ID, guild=False, attachments=[doc]
    )
    fake_anthropic.script(text_reply("255 in the North."))
    await fake_discord.dispatch("MESSAGE_CREATE", message)
    [reply] = await fake_discord.wait_for_message(DM_CHANNEL_ID)
    assert reply.content == "255 in the North."
    texts = "\n".join(
        b.get("text", "") for b in fake_anthropic.last_request.messages[-1]["content"]
    )
    assert "| Region | Q1 | Q2 |\n| --- | --- | --- |\n| North | 120 | 135 |" in texts
