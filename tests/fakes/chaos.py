"""Fault injection shared by the platform fakes (Slack, Telegram, Discord).

A fake with a `chaos` hook asks it, for each API call it is about to answer,
whether to misbehave: `chaos(name)` gets the call's name (Slack's method,
Telegram's method, Discord's ``"POST /channels/{id}/messages"`` route) and
returns None (answer normally) or a `Fault`:

- ``Fault.status(429)``: the platform's rate-limit answer, with a Retry-After;
- ``Fault.status(500)`` / 502 / 503: the platform's error page;
- ``Fault.hang(seconds)``: the request stays open that long, or until the
  client gives up. A request whose client went away meanwhile is dropped,
  unapplied (as one that never reached the platform); one whose client waited
  is then answered normally.

Without a hook (the default) the fakes behave as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from aiohttp import web

RETRY_AFTER_S = 1


@dataclass(frozen=True, slots=True)
class Fault:
    kind: Literal["status", "hang"]
    code: int = 0
    seconds: float = 0.0

    @staticmethod
    def status(code: int) -> Fault:
        return Fault("status", code=code)

    @staticmethod
    def hang(seconds: float) -> Fault:
        return Fault("hang", seconds=seconds)


Chaos = Callable[[str], Fault | None]


async def hang(request: web.Request, seconds: float) -> bool:
    """Keep `request` open up to `seconds`; True when its client is still there."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        transport = request.transport
        if transport is None or transport.is_closing():
            return False
        await asyncio.sleep(0.05)
    transport = request.transport
    return transport is not None and not transport.is_closing()


DROPPED = 499
"""The status recorded for a hung request whose client gave up (nothing was applied)."""
