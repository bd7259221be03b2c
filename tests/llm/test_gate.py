"""The fair limiter behind `[llm] max_in_flight` and admission: the limit holds,
waiters go by key then in the order they asked, nobody barges in, and a
waiter cancelled at any point neither keeps nor loses a place."""

from __future__ import annotations

import asyncio

import pytest

from bot.llm.gate import FairLimiter, TakingTurns


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_limit_holds_and_waiters_go_in_order() -> None:
    limiter = FairLimiter(2)
    order: list[str] = []
    inside = 0
    peak = 0
    gates = {name: asyncio.Event() for name in "abcdef"}

    async def worker(name: str) -> None:
        nonlocal inside, peak
        async with limiter.hold():
            inside += 1
            peak = max(peak, inside)
            order.append(name)
            await gates[name].wait()
            inside -= 1

    tasks = []
    for name in "abcdef":
        tasks.append(asyncio.create_task(worker(name)))
        await settle()
    assert order == ["a", "b"] and limiter.waiting == 4
    for name in "abcdef":
        gates[name].set()
        await settle()
    await asyncio.gather(*tasks)
    assert order == list("abcdef")
    assert peak == 2 == limiter.peak
    assert limiter.held == 0 and limiter.waiting == 0


async def test_lower_keys_go_first_and_a_newcomer_never_barges_in() -> None:
    limiter = FairLimiter(1)
    await limiter.acquire()
    order: list[str] = []

    async def wait(name: str, key: float) -> None:
        await limiter.acquire(key)
        order.append(name)

    late = asyncio.create_task(wait("late", 5.0))
    early = asyncio.create_task(wait("early", 1.0))
    await settle()
    limiter.release()  # hands the place to "early" (lowest key) ...
    newcomer = asyncio.create_task(wait("newcomer", 0.0))  # ... before it even runs
    await settle()
    assert order == ["early"]
    limiter.release()
    await settle()
    limiter.release()
    await asyncio.gather(late, early, newcomer)
    assert order == ["early", "newcomer", "late"]


@pytest.mark.parametrize("kind", [FairLimiter, TakingTurns])
async def test_a_cancelled_waiter_gives_its_place_to_the_next(kind: type[FairLimiter]) -> None:
    limiter = kind(1)
    await limiter.acquire()
    doomed = asyncio.create_task(limiter.acquire())
    after = asyncio.create_task(limiter.acquire())
    await settle()
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert limiter.waiting == 1
    limiter.release()
    await after  # the place went past the cancelled waiter
    limiter.release()
    assert limiter.held == 0 and not limiter.locked()


@pytest.mark.parametrize("kind", [FairLimiter, TakingTurns])
async def test_a_waiter_cancelled_just_as_it_was_granted_passes_the_place_on(
    kind: type[FairLimiter],
) -> None:
    limiter = kind(1)
    await limiter.acquire()
    granted = asyncio.create_task(limiter.acquire())
    nxt = asyncio.create_task(limiter.acquire())
    await settle()
    limiter.release()  # grants `granted` (its future is done, the task not yet run)
    granted.cancel()  # ... and it is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await granted
    await nxt  # not lost: the next waiter has it
    assert limiter.held == 1
    limiter.release()
    assert limiter.held == 0


async def test_zero_means_no_limit_and_over_release_is_an_error() -> None:
    limiter = FairLimiter(0)
    for _ in range(50):
        await limiter.acquire()
    assert limiter.held == 50 and not limiter.locked()
    for _ in range(50):
        limiter.release()
    with pytest.raises(RuntimeError):
        limiter.release()


async def test_taking_turns_no_key_starves_however_many_of_another_keep_coming() -> None:
    """Admission's queue: messages coming back from the model (key 0) and
    new ones (key 1) take turns, a key-0 one first; each key in order. Every
    key-0 waiter served brings another (a run whose model answered while
    others waited): with lowest-key-first the new ones would never go."""
    limiter = TakingTurns(1)
    await limiter.acquire()
    order: list[str] = []
    tasks: list[asyncio.Task[None]] = []

    async def wait(name: str, key: float, more: int = 0) -> None:
        await limiter.acquire(key)
        order.append(name)
        if more:  # another one of its kind is waiting before this one leaves
            tasks.append(asyncio.create_task(wait(f"{name}+", key, more - 1)))
            await settle()
        limiter.release()

    for i in range(3):
        tasks.append(asyncio.create_task(wait(f"new{i}", 1.0)))
        await settle()
    tasks.append(asyncio.create_task(wait("back", 0.0, more=4)))
    await settle()
    assert limiter.waiting == 4
    limiter.release()
    while any(not t.done() for t in tasks):
        await asyncio.gather(*tasks)
    assert order == ["back", "new0", "back+", "new1", "back++", "new2", "back+++", "back++++"]
    assert limiter.held == 0 and limiter.waiting == 0


async def test_taking_turns_a_cancelled_waiter_takes_no_turn() -> None:
    limiter = TakingTurns(1)
    await limiter.acquire()
    order: list[str] = []

    async def wait(name: str, key: float) -> None:
        await limiter.acquire(key)
        order.append(name)
        limiter.release()

    doomed = asyncio.create_task(wait("doomed", 0.0))
    new = asyncio.create_task(wait("new", 1.0))
    back = asyncio.create_task(wait("back", 0.0))
    await settle()
    doomed.cancel()
    await settle()
    assert limiter.waiting == 2
    limiter.release()
    await asyncio.gather(new, back)
    assert order == ["back", "new"]  # key 0's turn went to its next waiter
