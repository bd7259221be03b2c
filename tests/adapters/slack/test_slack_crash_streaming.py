"""Killing the real service while a streamed Slack reply is being finished:
after the restart the reply is edited into the streamed message once more
(an edit is idempotent), never posted a second time, never answered again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from adapters.slack import render
from bot.pipeline.live import INTERRUPTED_NOTE
from tests.conftest import TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic, text_reply
from tests.fakes.slack import FakeSlack, event_body
from tests.pipeline.test_crash_recovery import wait_for
from tests.service_rig import Service, SlackSender, free_port, service_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

ANSWER = "A streamed answer, **finished** before the kill. " * 4
THREAD = "1700000001.000001"
NOTE = render(INTERRUPTED_NOTE)[0]


def thread_dm(text: str, ts: str) -> dict[str, Any]:
    return event_body(
        {
            "type": "message",
            "channel": "D1",
            "channel_type": "im",
            "user": "U1",
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "thread_ts": THREAD,
        }
    )


async def test_a_kill_during_the_final_edit_edits_once_more_after_the_restart(
    database: Database, tmp_path: Path
) -> None:
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        model.script(text_reply(ANSWER.strip(), chunk_size=8, chunk_delay=0.05))
        env = service_env(
            database,
            model,
            slack,
            port := free_port(),
            SWITCHBOARD__STREAMING__INTERVAL_SECONDS="0.05",
        )
        service = Service(env, tmp_path, port)
        await service.start()
        released = slack.hold("chat.update")  # the final edit of the streamed message
        async with aiohttp.ClientSession() as http:
            await SlackSender(http, [service.url]).deliver(thread_dm("hello", "1700000001.000002"))
            await wait_for(lambda: bool(slack.held), "the final edit", service)
            assert slack.calls_to("chat.startStream") and slack.calls_to("chat.stopStream")
            service.kill()  # the reply and its drafts are in the outbox; the edit is in flight
            await service.stop()
            released.set()  # the edit in flight never reached Slack
            await wait_for(lambda: bool(slack.dropped), "the dropped edit", service)
            await service.start()
            final = render(ANSWER.strip())[0]
            await wait_for(
                lambda: [m["text"] for m in slack.messages] == [final], "the edit", service
            )
            await service.stop()

    (message,) = slack.messages
    assert message["thread_ts"] == THREAD and message["streaming"] is False
    assert slack.calls_to("chat.postMessage") == []  # edited, never posted again
    assert len(slack.calls_to("chat.startStream")) == 1
    assert model.request_count == 1  # sent from the outbox, not answered again
    assert any("outbox.recovered" in line for line in service.logs)


async def test_a_kill_mid_stream_ends_the_stream_with_a_note_and_answers_again(
    database: Database, tmp_path: Path
) -> None:
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        model.script(
            text_reply(ANSWER.strip(), chunk_size=4, chunk_delay=0.1),  # dies while writing
            text_reply("The answer, written again."),
        )
        env = service_env(
            database,
            model,
            slack,
            port := free_port(),
            SWITCHBOARD__STREAMING__INTERVAL_SECONDS="0.05",
        )
        service = Service(env, tmp_path, port)
        await service.start()
        async with aiohttp.ClientSession() as http:
            await SlackSender(http, [service.url]).deliver(thread_dm("hello", "1700000001.000002"))
            await wait_for(
                lambda: len(slack.calls_to("chat.appendStream")) >= 2, "a growing stream", service
            )
            service.kill()
            await service.stop()
            (streamed,) = slack.messages
            assert streamed["streaming"] is True  # left open by the dead process
            await service.start()
            await wait_for(lambda: len(slack.messages) == 2, "the answer again", service)
            await wait_for(lambda: slack.messages[0]["text"] == NOTE, "the note", service)
            await service.stop()

    note, answer = slack.messages
    assert note["ts"] == streamed["ts"] and note["streaming"] is False
    assert answer["text"] == "The answer, written again." and answer["thread_ts"] == THREAD
    assert model.request_count == 2
