"""Messages of one conversation reach the model in the order they arrived, however
long each takes to get ready (its files downloaded, its sender looked up):
a later message never overtakes an earlier one. Other conversations do not
wait. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field

import pytest

from bot.types import Attachment, IncomingMessage
from tests.fakes.anthropic import FakeAnthropic, last_user_text, text_reply
from tests.harness import RecordingAdapter, message
from tests.waiting import wait_until


@dataclass
class SlowFiles(RecordingAdapter):
    """An adapter that downloads files after intake (`FileFetcher`), and holds
    each download until the test lets it go (or fails it)."""

    asked: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    fail: bool = False

    async def fetch_files(self, msg: IncomingMessage) -> IncomingMessage:
        self.asked.set()
        await self.release.wait()
        if self.fail:
            raise OSError("download failed")
        files = tuple(dataclasses.replace(a, data=b"some notes") for a in msg.attachments)
        return dataclasses.replace(msg, attachments=files)


NOTES = Attachment("document", "f1", "notes.txt", "text/plain", 10)


SAID = ("hi", "the file", "and then this", "over here")


def asked_texts(fake: FakeAnthropic) -> list[list[str]]:
    """For each model request, the messages it answers, in the order given."""
    return [
        [b["text"] for b in r.messages[-1]["content"] if b.get("text") in SAID]
        for r in fake.requests
    ]


async def start(make_app, fake_anthropic):  # type: ignore[no-untyped-def]
    fake_anthropic.responder = lambda body: text_reply(
        "re: " + last_user_text(body).splitlines()[-1]
    )
    app = await make_app(budgets={"guest": "unlimited"})
    adapter = SlowFiles()
    app.attach(adapter)
    assert (await app.pipeline.handle(message("hi", event_id="e0"))).status == "answered"
    return app, adapter


async def accepted(app, msg: IncomingMessage) -> asyncio.Task:  # type: ignore[no-untyped-def, type-arg]
    """Hand `msg` to the pipeline in the background; return once it is stored."""
    stored = asyncio.Event()
    task = asyncio.create_task(app.pipeline.handle(msg, on_accepted=stored.set))
    await asyncio.wait({task, asyncio.create_task(stored.wait())}, return_when="FIRST_COMPLETED")
    assert stored.is_set()
    return task


async def test_a_later_message_does_not_overtake_one_still_getting_ready(make_app, fake_anthropic):
    app, adapter = await start(make_app, fake_anthropic)
    first = await accepted(app, message("the file", event_id="e1", attachments=(NOTES,)))
    await adapter.asked.wait()  # its file is downloading
    second = await accepted(app, message("and then this", event_id="e2"))
    # Had the second gone ahead, it would reach the model while the first waits.
    await asyncio.sleep(0.3)
    assert fake_anthropic.request_count == 1
    adapter.release.set()
    outcomes = await asyncio.gather(first, second)

    assert outcomes[0].status == "answered" and outcomes[1].status in ("answered", "merged")
    asked = asked_texts(fake_anthropic)[1:]
    assert asked[0][0] == "the file"  # the first request is the first message's
    assert asked[-1][-1] == "and then this"  # alone after it, or joined to its run
    assert adapter.texts[-1] == "re: and then this"


async def test_a_message_that_fails_before_its_run_does_not_hold_up_the_next(
    make_app, fake_anthropic
):
    app, adapter = await start(make_app, fake_anthropic)
    adapter.fail = True
    first = await accepted(app, message("the file", event_id="e1", attachments=(NOTES,)))
    await adapter.asked.wait()
    second = await accepted(app, message("and then this", event_id="e2"))
    adapter.release.set()
    outcomes = await asyncio.gather(first, second)

    assert [o.status for o in outcomes] == ["failed", "answered"]
    assert asked_texts(fake_anthropic)[1:] == [["and then this"]]


async def test_other_conversations_do_not_wait(make_app, fake_anthropic):
    app, adapter = await start(make_app, fake_anthropic)
    first = await accepted(app, message("the file", event_id="e1", attachments=(NOTES,)))
    await adapter.asked.wait()
    elsewhere = await accepted(app, message("over here", event_id="e2", platform_channel_id="b"))
    assert (await elsewhere).status == "answered"
    assert not first.done()
    adapter.release.set()
    assert (await first).status == "answered"
    assert asked_texts(fake_anthropic)[1:] == [["over here"], ["the file"]]


async def test_in_order_when_the_sender_is_not_yet_known_here(make_app, fake_anthropic):
    """After a restart nobody is cached: the first message looks its sender up
    while the second, arriving just after, finds them known."""
    app, adapter = await start(make_app, fake_anthropic)
    await app.close()
    app = await make_app(budgets={"guest": "unlimited"})
    adapter = RecordingAdapter()
    app.attach(adapter)
    first = await accepted(app, message("two", event_id="e1"))
    await wait_until(lambda: app.pipeline.s.identity.known(message("x")) is not None)
    second = await accepted(app, message("three", event_id="e2"))
    await asyncio.gather(first, second)

    assert adapter.texts[-1] == "re: three"  # "two" first, or both together


async def test_a_message_cancelled_before_its_run_does_not_hold_up_the_next(
    make_app, fake_anthropic
):
    """Shutdown's drain cancels what is in flight: the line moves on."""
    app, adapter = await start(make_app, fake_anthropic)
    first = await accepted(app, message("the file", event_id="e1", attachments=(NOTES,)))
    await adapter.asked.wait()
    second = await accepted(app, message("and then this", event_id="e2"))
    first.cancel()
    assert (await second).status == "answered"
    with pytest.raises(asyncio.CancelledError):
        await first  # cancelled, once its shielded hand-back has ended (maybe after the second)
    assert asked_texts(fake_anthropic)[1:] == [["and then this"]]
