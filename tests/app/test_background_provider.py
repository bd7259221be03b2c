"""`BackgroundProvider`: the SDK loads once, off the event loop, begun by
`start()` or by the first call; calls made meanwhile wait for it; a loading
that fails makes each call fail (none waits forever); closing while it loads
returns at once."""

from __future__ import annotations

import asyncio
import threading

import pytest

from bot.app.provider import BackgroundProvider
from bot.llm.types import ChatMessage, LLMRequest, LLMResponse, TextBlock, TextCallback
from bot.ports import Provider
from bot.types import Usage
from tests.waiting import wait_until

REQUEST = LLMRequest(model="m", messages=(ChatMessage("user", (TextBlock("hi"),)),))


class Answering:
    def __init__(self) -> None:
        self.calls = 0
        self.closed = False

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse:
        self.calls += 1
        answer = (TextBlock(f"answer {self.calls}"),)
        return LLMResponse(answer, "end_turn", Usage(), request.model)

    async def aclose(self) -> None:
        self.closed = True


class Loading:
    """A loading that runs in a worker thread until `done` is set."""

    def __init__(self, error: Exception | None = None) -> None:
        self.done = threading.Event()
        self.started = 0
        self.threads: list[threading.Thread] = []
        self.error = error

    async def __call__(self) -> None:
        self.started += 1

        def load() -> None:
            self.threads.append(threading.current_thread())
            self.done.wait(10)
            if self.error is not None:
                raise self.error

        await asyncio.to_thread(load)


def provider(loading: Loading, built: list[Answering]) -> BackgroundProvider:
    def build() -> Provider:
        built.append(Answering())
        return built[-1]

    return BackgroundProvider(build, loading)


async def test_calls_made_while_it_loads_wait_and_share_one_loading() -> None:
    loading, built = Loading(), []
    background = provider(loading, built)
    background.start()
    background.start()  # once
    calls = [asyncio.create_task(background.complete(REQUEST)) for _ in range(3)]
    await wait_until(lambda: bool(loading.threads))
    await asyncio.sleep(0.05)
    assert not any(call.done() for call in calls)  # waiting for the loading
    loading.done.set()
    answers = sorted(response.text for response in await asyncio.gather(*calls))
    assert answers == ["answer 1", "answer 2", "answer 3"]
    assert loading.started == 1 and len(built) == 1 and background.loaded
    assert loading.threads[0] is not threading.main_thread()
    await background.aclose()
    assert built[0].closed


async def test_the_first_call_begins_the_loading() -> None:
    loading, built = Loading(), []
    loading.done.set()
    background = provider(loading, built)
    assert loading.started == 0 and not background.loaded
    assert (await background.complete(REQUEST)).text == "answer 1"
    assert loading.started == 1


async def test_a_failed_loading_fails_every_call() -> None:
    loading, built = Loading(ImportError("No module named 'anthropic'")), []
    loading.done.set()
    background = provider(loading, built)
    for _ in range(2):
        with pytest.raises(ImportError, match="anthropic"):
            await asyncio.wait_for(background.complete(REQUEST), 10)
    assert loading.started == 1 and not built
    await background.aclose()


async def test_a_caller_giving_up_stops_no_other_and_closing_does_not_wait() -> None:
    loading, built = Loading(), []
    background = provider(loading, built)
    impatient = asyncio.create_task(background.complete(REQUEST))
    patient = asyncio.create_task(background.complete(REQUEST))
    await wait_until(lambda: bool(loading.threads))
    impatient.cancel()
    loading.done.set()
    assert (await patient).text == "answer 1"
    assert impatient.cancelled()

    slow, built2 = Loading(), []
    closing = provider(slow, built2)
    closing.start()
    await wait_until(lambda: bool(slow.threads))
    await asyncio.wait_for(closing.aclose(), 5)  # returns while the thread still loads
    assert not built2
    slow.done.set()
