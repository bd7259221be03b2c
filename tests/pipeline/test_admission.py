"""Admission: a new message waits while the event loop runs late, so that
intake keeps up; runs already holding a slot are not held back."""

from __future__ import annotations

import asyncio
import time

from bot.pipeline.admission import Admission, LoopLag


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def test_a_new_message_waits_while_the_loop_is_late() -> None:
    admission = Admission(4, max_loop_lag=0.02)
    admission.lag.interval = 0.01
    order: list[str] = []
    loop = asyncio.get_running_loop()

    def hog(times: int) -> None:  # ready callbacks that keep the loop late
        busy(0.05)
        order.append("hog")
        if times > 1:
            loop.call_soon(hog, times - 1)

    async def message() -> None:
        async with admission.slot():
            order.append("message")

    loop.call_soon(hog, 3)
    await message()
    assert admission.lag.waits >= 1
    assert order.index("message") > order.index("hog")  # let the late loop catch up first


async def test_no_wait_on_a_calm_loop_or_when_turned_off() -> None:
    calm = Admission(4, max_loop_lag=0.5)
    async with calm.slot():
        pass
    assert calm.lag.waits == 0
    off = LoopLag(0)
    asyncio.get_running_loop().call_soon(busy, 0.05)
    await off.calm()  # returns without measuring
    assert off.waits == 0 and off.last == 0.0


async def test_a_pass_on_time_stands_for_the_next_messages_for_a_moment() -> None:
    """Measuring costs every message a pass through the loop: one found on
    time lets the messages right after it go on unmeasured; once that moment
    is over, the next is measured again and waits for a late loop."""
    loop = asyncio.get_running_loop()
    lag = LoopLag(0.02, interval=0.01, fresh=60.0)
    await lag.calm()  # measured: on time
    first = lag.last
    loop.call_soon(busy, 0.05)
    await lag.calm()  # within the moment: not measured, no wait
    assert lag.waits == 0 and lag.last == first
    await asyncio.sleep(0)  # (the busy callback runs)
    lag.fresh = 0.0
    loop.call_soon(busy, 0.05)
    await lag.calm()
    assert lag.waits >= 1 and lag.last <= 0.02


async def test_a_message_taking_its_slot_back_goes_before_new_ones() -> None:
    """Under a burst, a run coming back from the model (or from its turn) is
    not queued behind every message not yet started."""
    admission = Admission(1)
    order: list[str] = []
    back = asyncio.Event()

    async def running() -> None:
        async with admission.slot() as slot:
            slot.give_up()  # waiting for the model
            await back.wait()
            await slot.take()  # the model answered
            order.append("running")

    async def new(name: str) -> None:
        async with admission.slot():
            order.append(name)

    first = asyncio.create_task(running())
    await asyncio.sleep(0)
    # The slot is free while `running` waits: a new message takes it.
    blocker_done = asyncio.Event()

    async def blocker() -> None:
        async with admission.slot():
            order.append("blocker")
            await blocker_done.wait()

    b = asyncio.create_task(blocker())
    for _ in range(3):
        await asyncio.sleep(0)
    others = [asyncio.create_task(new(f"new{i}")) for i in range(3)]
    for _ in range(3):
        await asyncio.sleep(0)
    back.set()
    for _ in range(3):
        await asyncio.sleep(0)
    blocker_done.set()
    await asyncio.gather(first, b, *others)
    assert order == ["blocker", "running", "new0", "new1", "new2"]
    assert not admission.waiting


async def test_runs_coming_back_do_not_starve_new_messages() -> None:
    """Under a burst where runs keep coming back from the model while new
    messages wait, the two take turns: the new ones still reach the model
    (before, every run coming back went first, and the last messages of a
    burst reached the model only once the first ones had all been answered)."""
    admission = Admission(1)
    order: list[str] = []
    back = [asyncio.Event() for _ in range(4)]

    async def running(i: int) -> None:
        async with admission.slot() as slot:
            slot.give_up()  # waiting for the model
            await back[i].wait()
            await slot.take()  # the model answered
            order.append(f"back{i}")

    async def new(i: int) -> None:
        async with admission.slot():
            order.append(f"new{i}")

    runs = [asyncio.create_task(running(i)) for i in range(4)]
    for _ in range(3):
        await asyncio.sleep(0)
    gate = asyncio.Event()

    async def blocker() -> None:
        async with admission.slot():
            await gate.wait()

    held = asyncio.create_task(blocker())
    for _ in range(3):
        await asyncio.sleep(0)
    news = [asyncio.create_task(new(i)) for i in range(2)]
    for event in back:  # all four answered while the slot is taken
        event.set()
    for _ in range(3):
        await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(held, *runs, *news)
    assert order == ["back0", "new0", "back1", "new1", "back2", "back3"]
