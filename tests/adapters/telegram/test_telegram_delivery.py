"""Telegram delivery (adapters.telegram.delivery) through both libraries against the fake
Bot API server: order, per-chat and global rate limits, flood waits, retries, the
plain-text fallback, and failures that must surface as DeliveryFailed. Time is a
controllable clock shared by the sender and the fake (call timestamps are virtual)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import pytest

from adapters.telegram.delivery import Limits, Sender
from adapters.telegram.factory import make_transport
from adapters.telegram.render import to_plain_text
from adapters.telegram.transport import Transport
from bot.errors import DeliveryFailed
from bot.types import Target
from tests.fakes.telegram import TOKEN, FakeTelegram, bad_request, flood, server_error
from tests.fakes.telegram_updates import FakeClock

LIBRARIES = ["aiogram", "python-telegram-bot"]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def fake(clock: FakeClock) -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram(clock=clock.now) as server:
        yield server


@pytest.fixture(params=LIBRARIES)
async def transport(request: pytest.FixtureRequest, fake: FakeTelegram) -> AsyncIterator[Transport]:
    made = make_transport(request.param, TOKEN, fake.base_url)
    yield made
    await made.close()


def target(chat: int, **fields: str) -> Target:
    return Target("telegram", str(chat), **fields)


async def test_chunks_go_in_order_into_the_thread_the_first_as_reply(fake, transport, clock):
    sender = Sender(transport, clock, Limits())
    ids = await sender.send(
        target(-100, thread_id="7", reply_to_message_id="55"), ["<b>one</b>", "two", "three"]
    )
    sent = fake.sent()
    assert [c.visible_text for c in sent] == ["one", "two", "three"]
    assert ids == [str(c.result["message_id"]) for c in sent]
    assert [c.params.get("message_thread_id") for c in sent] == [7, 7, 7]
    assert sent[0].params["reply_parameters"]["message_id"] == 55
    assert "reply_parameters" not in sent[1].params and "reply_parameters" not in sent[2].params
    assert all(c.params["parse_mode"] == "HTML" for c in sent)
    gaps = [b.at - a.at for a, b in itertools.pairwise(sent)]
    assert all(gap >= 1.0 for gap in gaps)  # at most one message per second in a chat


async def test_flood_wait_holds_that_chat_only_then_delivers_once_in_order(fake, transport):
    clock = FakeClock(hold_from=5)  # the 5 s flood wait blocks until released
    fake.clock = clock.now
    sender = Sender(transport, clock, Limits())
    fake.fail_next("sendMessage", flood(5), chat_id=1)

    first = asyncio.create_task(sender.send(target(1), ["a1", "a2"]))
    await fake.wait_for(lambda: clock.holding == 1)
    await sender.send(target(2), ["b1"])  # another chat is not held up
    assert sender.blocked("1") and not sender.blocked("2")
    assert [(c.chat_id, c.status) for c in fake.calls_to("sendMessage")] == [
        ("1", 429),
        ("2", 200),
    ]
    clock.release()
    await first
    calls = fake.calls_to("sendMessage")
    assert [(c.chat_id, c.visible_text or c.params["text"], c.status) for c in calls] == [
        ("1", "a1", 429),
        ("2", "b1", 200),
        ("1", "a1", 200),
        ("1", "a2", 200),
    ]
    assert calls[2].at - calls[0].at >= 5


async def test_network_errors_are_retried_with_backoff(fake, transport, clock):
    sender = Sender(transport, clock, Limits())
    fake.fail_next("sendMessage", server_error(), server_error())
    assert len(await sender.send(target(3), ["hello"])) == 1
    assert [c.status for c in fake.calls_to("sendMessage")] == [500, 500, 200]
    assert clock.sleeps[:2] == [1.0, 2.0]


async def test_a_chunk_that_keeps_failing_raises_delivery_failed(fake, transport, clock):
    sender = Sender(transport, clock, Limits(network_attempts=3))
    fake.fail_next("sendMessage", server_error(), server_error(), server_error())
    with pytest.raises(DeliveryFailed, match=r"chat 3: .*gave up after 3 attempts"):
        await sender.send(target(3), ["hello"])
    fake.fail_next("sendMessage", bad_request("chat not found"), chat_id=4)
    with pytest.raises(DeliveryFailed, match=r"(?i)chat 4: .*chat not found"):
        await sender.send(target(4), ["first", "second"])
    assert len(fake.calls_to("sendMessage")) == 4  # not retried, nor the next part tried
    with pytest.raises(DeliveryFailed, match=r"(?i)text is empty after 1 of 2 parts"):
        await sender.send(target(4), ["first", " "])
    assert [c.status for c in fake.calls_to("sendMessage")[-2:]] == [200, 400]


async def test_unparsable_html_is_resent_once_as_plain_text(fake, transport, clock):
    sender = Sender(transport, clock, Limits())
    chunk = "<b>bold</b> &lt;tag&gt; &amp; more"
    fake.fail_next("sendMessage", bad_request("can't parse entities: Unsupported start tag"))
    await sender.send(target(5), [chunk])
    first, second = fake.calls_to("sendMessage")
    assert first.status == 400 and first.params["parse_mode"] == "HTML"
    assert second.ok and "parse_mode" not in second.params
    assert second.params["text"] == to_plain_text(chunk) == "bold <tag> & more"

    fake.fail_next(
        "sendMessage",
        bad_request("can't parse entities: x"),
        bad_request("can't parse entities: x"),
    )
    with pytest.raises(DeliveryFailed, match=r"(?i)can.t parse entities"):
        await sender.send(target(5), [chunk])
    assert len(fake.calls_to("sendMessage")) == 4  # never the same bad payload again


async def test_a_too_long_flood_wait_fails_instead_of_waiting(fake, transport, clock):
    sender = Sender(transport, clock, Limits(max_flood_wait=60))
    fake.fail_next("sendMessage", flood(3600))
    with pytest.raises(DeliveryFailed, match=r"wait 3600 s \(429\), longer than .* = 60"):
        await sender.send(target(6), ["x"])


async def test_at_most_thirty_messages_a_second_overall(fake, transport, clock):
    issued: list[float] = []
    send_message = transport.send_message

    async def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
        issued.append(clock.now())  # when the sender lets it go (server times lag behind)
        return await send_message(*args, **kwargs)

    transport.send_message = timed  # type: ignore[method-assign]
    sender = Sender(transport, clock, Limits())
    await asyncio.gather(*(sender.send(target(100 + n), [f"m{n}"]) for n in range(45)))
    assert len(fake.sent()) == 45 and len(issued) == 45
    for start in issued:
        assert sum(1 for t in issued if start <= t < start + 1.0) <= 30
    assert max(issued) - min(issued) >= 1.0  # the last 15 waited for the window
