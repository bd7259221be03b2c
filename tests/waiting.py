"""Waiting for conditions and events in tests (never asserting on elapsed time)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from bot.agent.events import Event, Subscription

PATIENCE_S = 30.0
"""Upper bound for a wait that should end almost at once: it tells a hang, never a
slow machine (a shared 2-core machine under load takes seconds for a step)."""


async def wait_until(condition: Callable[[], bool], seconds: float = PATIENCE_S) -> None:
    async with asyncio.timeout(seconds):
        while not condition():  # noqa: ASYNC110 (a plain condition, nothing to await)
            await asyncio.sleep(0.005)


async def next_event(events: Subscription, type_: str, seconds: float = PATIENCE_S) -> Event:
    """The next event of `type_` (earlier events of other types are skipped)."""
    async with asyncio.timeout(seconds):
        while True:
            event = await events.next()
            if event.type == type_:
                return event
