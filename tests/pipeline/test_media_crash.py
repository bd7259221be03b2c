"""Killing the real service while a voice message is being transcribed loses
nothing and doubles nothing: after a SIGKILL and a restart the message is
taken over, its file fetched and transcribed again, and answered once, on
SQLite and PostgreSQL. `switchboard run` is a subprocess (Slack in HTTP mode
against the fake Slack, the fake Messages API, the fake transcription
endpoint holding the first upload)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from sqlmodel import select

from bot.store.models import InboxItem, Run
from tests.conftest import TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic, last_user_text, text_reply
from tests.fakes.slack import FakeSlack, event_body
from tests.fakes.transcription import KEY, FakeTranscription
from tests.media.fixtures import KEY_ENV, SAID, VOICE
from tests.pipeline.test_crash_recovery import replies_in, wait_for
from tests.service_rig import Service, SlackSender, free_port, service_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


async def test_sigkill_mid_transcription_answers_the_voice_message_once(
    database: Database, tmp_path: Path
) -> None:
    async with (
        FakeAnthropic(api_key=TEST_API_KEY) as model,
        FakeSlack() as slack,
        FakeTranscription(transcripts={VOICE: SAID}) as speech,
    ):
        model.responder = lambda body: text_reply(f"re: {last_user_text(body)[-20:]}")
        speech.hold = held = asyncio.Event()
        env = service_env(
            database,
            model,
            slack,
            port := free_port(),
            SWITCHBOARD__MEDIA__TRANSCRIPTION__BASE_URL=speech.base_url,
            SWITCHBOARD__MEDIA__TRANSCRIPTION__API_KEY_ENV=KEY_ENV,
            SWITCHBOARD__STREAMING__SLACK__ENABLED="false",
            **{KEY_ENV: KEY},
        )
        service = Service(env, tmp_path, port)
        await service.start()
        clip = slack.add_file(
            "audio_message.webm", VOICE, "audio/webm", subtype="slack_audio", duration_ms=4200
        )
        event = event_body(
            {
                "type": "message",
                "subtype": "file_share",
                "channel": "D1",
                "channel_type": "im",
                "user": "U1",
                "text": "",
                "files": [clip],
                "ts": "1700000001.000001",
                "event_ts": "1700000001.000001",
            }
        )
        async with aiohttp.ClientSession() as http:
            await SlackSender(http, [service.url]).deliver(event)
            await wait_for(lambda: len(speech.uploads) == 1, "the first upload", service)
            service.kill()  # the message is accepted; its transcription is in flight
            await service.stop()
            speech.hold = None
            held.set()  # the first request ends with nobody waiting for it
            await service.start()
            await wait_for(lambda: replies_in(slack, "D1") != [], "the answer", service)
            await asyncio.sleep(1.5)  # anything doubled late would show up now
            code = await service.stop()

    assert code == 0, service.log_text
    assert replies_in(slack, "D1") == [f"> 🎤 {SAID}\n\nre: {SAID[-20:]}"], service.log_text
    assert [u.audio for u in speech.uploads] == [VOICE, VOICE]
    assert model.request_count == 1
    store = database.store()
    try:
        async with store.read() as session:
            runs = (await session.exec(select(Run))).all()
            items = (await session.exec(select(InboxItem))).all()
    finally:
        await store.dispose()
    assert [r.audio_seconds for r in runs] == [4.2]
    assert [i.state for i in items] == ["answered"]
    assert any("inbox.recovered" in line for line in service.logs), service.log_text
