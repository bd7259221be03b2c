"""Concurrency by conversation, through the real pipeline and SDK: the threads
of one busy channel run at once; `[llm] max_in_flight` caps the LLM calls of
all conversations, oldest message first; a run stopped while it waits for a
place leaves nothing behind; the SDK's connection pool is sized to the cap."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import col, select

from bot.llm.anthropic import AnthropicProvider
from bot.llm.types import ChatMessage, LLMRequest, TextBlock
from bot.store.models import InboxItem, Message, TokenLog
from bot.types import utcnow
from tests.conftest import TEST_API_KEY
from tests.fakes.anthropic import FakeAnthropic, last_user_text, text_reply
from tests.harness import RecordingAdapter, message
from tests.waiting import wait_until

THREADS = 8
GROUP = {"chat_type": "group", "mentions_bot": True}


@pytest.fixture(autouse=True)
async def roomy_executor() -> AsyncIterator[None]:
    """The fake holds each reply in a worker thread: give it enough of them."""
    executor = ThreadPoolExecutor(64)
    asyncio.get_running_loop().set_default_executor(executor)
    yield
    executor.shutdown(wait=False, cancel_futures=True)


@pytest.fixture
def holds() -> Iterator[dict[str, threading.Event]]:
    events: dict[str, threading.Event] = {}
    yield events
    for event in events.values():  # never leave the fake's threads waiting
        event.set()


def held_replies(fake: FakeAnthropic, holds: dict[str, threading.Event]) -> list[str]:
    """Every reply waits for its question's event; returns the questions in the
    order they reached the model."""
    order: list[str] = []

    def responder(body: dict[str, Any]) -> Any:
        text = last_user_text(body).split("] ", 1)[-1]
        order.append(text)
        return text_reply(f"answer to {text}", hold=holds.setdefault(text, threading.Event()))

    fake.responder = responder
    return order


async def start(make_app: Any, **sections: Any) -> tuple[Any, RecordingAdapter]:
    sections.setdefault("budgets", {"guest": "unlimited"})
    app = await make_app(**sections)
    adapter = RecordingAdapter()
    app.attach(adapter)
    return app, adapter


def thread_message(i: int, **fields: Any) -> Any:
    return message(
        f"q{i}", platform_thread_id=f"t{i}", platform_message_id=f"m{i}", **GROUP, **fields
    )


async def test_the_threads_of_one_busy_channel_run_at_once(make_app, fake_anthropic, holds):
    app, adapter = await start(make_app)  # the defaults: no per-channel cap
    held_replies(fake_anthropic, holds)
    tasks = [asyncio.create_task(app.pipeline.handle(thread_message(i))) for i in range(THREADS)]
    await fake_anthropic.wait_for_requests(THREADS)  # all with the model at once
    assert app.llm_gate.held == THREADS
    for event in holds.values():
        event.set()
    outcomes = await asyncio.gather(*tasks)
    assert [o.status for o in outcomes] == ["answered"] * THREADS
    assert sorted(adapter.texts) == sorted(f"answer to q{i}" for i in range(THREADS))


async def test_the_global_cap_holds_and_the_oldest_message_goes_first(
    make_app, fake_anthropic, holds
):
    app, adapter = await start(make_app, llm={"max_in_flight": 2})
    order = held_replies(fake_anthropic, holds)
    first = [asyncio.create_task(app.pipeline.handle(thread_message(i))) for i in (100, 101)]
    await fake_anthropic.wait_for_requests(2)  # the cap is full
    now = utcnow()
    # They arrive q0 … q5 (received_at), but their tasks start in reverse order.
    rest = [
        asyncio.create_task(
            app.pipeline.handle(thread_message(i, received_at=now + timedelta(seconds=i)))
        )
        for i in reversed(range(THREADS - 2))
    ]
    await wait_until(lambda: app.llm_gate.waiting == THREADS - 2)
    assert fake_anthropic.request_count == 2
    for i in range(THREADS):  # answer whatever is with the model, one at a time
        await wait_until(lambda i=i: len(order) > i)  # type: ignore[misc]
        assert fake_anthropic.request_count <= i + 2  # never more than 2 in flight
        holds[order[i]].set()
    outcomes = await asyncio.gather(*first, *rest)
    assert [o.status for o in outcomes] == ["answered"] * THREADS
    assert sorted(order[:2]) == ["q100", "q101"]
    assert order[2:] == [f"q{i}" for i in range(THREADS - 2)]  # by arrival, oldest first
    assert app.llm_gate.peak == 2 and app.llm_gate.held == 0
    assert len(adapter.texts) == THREADS


async def test_a_run_stopped_while_waiting_for_a_place_leaves_nothing_behind(
    make_app, fake_anthropic, holds
):
    app, _ = await start(make_app, llm={"max_in_flight": 1})
    held_replies(fake_anthropic, holds)
    first = asyncio.create_task(app.pipeline.handle(thread_message(0)))
    await fake_anthropic.wait_for_requests(1)
    second = asyncio.create_task(app.pipeline.handle(thread_message(1)))
    await wait_until(lambda: app.llm_gate.waiting == 1)
    stop = await app.pipeline.handle(
        message("/stop", platform_thread_id="t1", platform_message_id="s1", **GROUP)
    )
    assert stop.status == "command"
    stopped = await second
    assert app.llm_gate.waiting == 0  # its place in the queue is gone
    holds["q0"].set()
    answered = await first
    assert (answered.status, stopped.status) == ("answered", "cancelled")
    assert fake_anthropic.request_count == 1  # the stopped run never reached the model
    third = asyncio.create_task(app.pipeline.handle(thread_message(2)))
    await fake_anthropic.wait_for_requests(2)  # the place was not lost
    holds["q2"].set()
    assert (await third).status == "answered"
    assert app.llm_gate.held == 0
    async with app.store.read() as s:
        items = (await s.exec(select(InboxItem).order_by(col(InboxItem.id)))).all()
        rows = (await s.exec(select(Message).where(col(Message.role) == "user"))).all()
    assert [(i.event_id, i.state) for i in items] == [
        ("m0", "answered"), ("m1", "cancelled"), ("s1", "command"), ("m2", "answered")
    ]  # fmt: skip
    assert sorted(r.text for r in rows) == [f"[Alice] q{i}" for i in range(3)]  # once each


async def test_the_connection_pool_is_sized_by_max_connections(fake_anthropic, holds):
    held_replies(fake_anthropic, holds)

    async def in_flight(pool: int, calls: int) -> int:
        provider = AnthropicProvider(
            api_key=TEST_API_KEY, base_url=fake_anthropic.base_url, max_retries=0,
            max_connections=pool,
        )  # fmt: skip
        before = fake_anthropic.request_count
        request = lambda i: LLMRequest(  # noqa: E731
            model="claude-sonnet-5-5",
            messages=(ChatMessage("user", (TextBlock(f"p{pool}-{i}"),)),),
            max_tokens=50,
        )
        tasks = [asyncio.create_task(provider.complete(request(i))) for i in range(calls)]
        await fake_anthropic.wait_for_requests(before + min(pool, calls))
        for _ in range(20):
            await asyncio.sleep(0.01)  # a chance for more to get through, if they could
        reached = fake_anthropic.request_count - before
        for i in range(calls):
            holds.setdefault(f"p{pool}-{i}", threading.Event()).set()
        await asyncio.gather(*tasks)
        await provider.aclose()
        return reached

    assert await in_flight(2, 6) == 2  # the rest queue for a connection
    assert await in_flight(12, 12) == 12


async def test_two_conversations_share_the_cached_system_block(make_app, fake_anthropic):
    """Through the SDK: two users' first messages, at different times, send the
    same bytes up to the persona block's breakpoint, and the second reads it
    from the (simulated) prompt cache."""
    fake_anthropic.simulate_cache = True
    fake_anthropic.responder = lambda body: text_reply("Hello!")
    app, _ = await start(make_app)
    await app.pipeline.handle(message("hi"))
    later = utcnow() + timedelta(hours=5)
    await app.pipeline.handle(
        message("hi", platform_user_id="bob", user_display_name="Bob",
                platform_channel_id="other", received_at=later)
    )  # fmt: skip
    first, second = (r.body for r in fake_anthropic.requests[-2:])
    assert first["tools"] == second["tools"]
    assert first["system"][0] == second["system"][0]  # byte for byte, with its breakpoint
    assert first["system"][0].get("cache_control") == {"type": "ephemeral"}
    assert first["system"][1] != second["system"][1]  # who and where: after the breakpoint
    assert "Alice" in first["system"][1]["text"] and "Alice" not in first["system"][0]["text"]
    async with app.store.read() as s:
        logs = (await s.exec(select(TokenLog).order_by(col(TokenLog.id)))).all()
    assert logs[-1].cache_read_tokens > 0 and logs[0].cache_read_tokens == 0
