"""/healthz's database check: one ping at a time, cached briefly, and a slow
database under load is `busy`, not dead."""

from __future__ import annotations

import asyncio

import pytest

from bot.app.health import DatabaseHealth


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Database:
    def __init__(self) -> None:
        self.pings = 0
        self.release = asyncio.Event()
        self.release.set()
        self.error: Exception | None = None

    async def ping(self) -> None:
        self.pings += 1
        await self.release.wait()
        if self.error is not None:
            raise self.error


async def test_a_fresh_success_is_reused_and_pings_do_not_pile_up() -> None:
    db, clock = Database(), Clock()
    health = DatabaseHealth(db.ping, timeout=0.05, fresh=1.0, grace=10.0, clock=clock)
    assert await health.check() == "ok"
    assert await health.check() == "ok"
    assert db.pings == 1  # the second answer came from the first ping
    clock.now += 2
    db.release.clear()  # the database is now slow
    results = await asyncio.gather(*(health.check() for _ in range(5)))
    assert results == ["busy"] * 5  # answered in time, with the database still alive
    assert db.pings == 2  # five checks, one ping in flight
    db.release.set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert await health.check() == "ok"
    assert db.pings == 2  # the slow ping's success counts


async def test_a_failed_ping_is_unhealthy_at_once() -> None:
    db, clock = Database(), Clock()
    health = DatabaseHealth(db.ping, timeout=0.05, clock=clock)
    db.error = OSError("database went away")
    with pytest.raises(OSError):
        await health.check()
    db.error = None
    assert await health.check() == "ok"  # a new ping, not the failed one


async def test_no_answer_for_longer_than_the_grace_is_unhealthy() -> None:
    db, clock = Database(), Clock()
    health = DatabaseHealth(db.ping, timeout=0.05, fresh=1.0, grace=10.0, clock=clock)
    assert await health.check() == "ok"
    db.release.clear()
    clock.now += 11
    with pytest.raises(TimeoutError):
        await health.check()
    db.release.set()
