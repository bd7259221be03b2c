"""The soak's faults, on a seeded schedule.

- Processes: a SIGKILL of a random instance every 30-60 s (restarted at once),
  one SIGTERM while the model has work in flight (restarted once it exited);
- PostgreSQL: once, every backend of this soak's service terminated
  (``pg_terminate_backend`` of the connections named
  ``switchboard:<schema>`` only, never another session's);
- platforms: `PlatformChaos` answers ~5 % of the message calls with a 429 or
  a 5xx and keeps ~1 % hanging (tests/fakes/chaos.py);
- the model: tests/soak/model.py (`ModelFaults`).

`stop()` ends the injection (the drain runs without faults). Every fault
injected is counted in `counts`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.conftest import Database
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.chaos import Chaos, Fault
from tests.service_rig import Service

log = logging.getLogger("tests.soak.faults")

MESSAGE_CALLS = {
    "slack": frozenset(
        {
            "chat.postMessage",
            "chat.update",
            "chat.delete",
            "chat.startStream",
            "chat.appendStream",
            "chat.stopStream",
            "assistant.threads.setStatus",
        }
    ),
    "telegram": frozenset(
        {"sendMessage", "editMessageText", "deleteMessage", "sendMessageDraft", "sendChatAction"}
    ),
    "discord": frozenset(
        {
            "POST /channels/{channel}/messages",
            "PATCH /channels/{channel}/messages/{message}",
            "DELETE /channels/{channel}/messages/{message}",
            "POST /channels/{channel}/typing",
        }
    ),
}
"""The calls the platform faults hit: sending, editing, deleting, typing (not the
start-up calls, so that a restart is not refused)."""

RESTART_TRIES = 5
SETTLED_S = 10.0
"""The SIGTERM waits until its instance has been serving this long."""
TERM_GRACE_S = 60.0
"""A SIGTERMed instance still running after this is SIGKILLed (and counted)."""


@dataclass
class PlatformChaos:
    rng: random.Random
    error_rate: float = 0.05
    hang_rate: float = 0.01
    hang_seconds: float = 15.0
    on: bool = True
    counts: Counter[str] = field(default_factory=Counter)

    def for_platform(self, platform: str) -> Chaos:
        calls = MESSAGE_CALLS[platform]

        def chaos(name: str) -> Fault | None:
            if not self.on or name not in calls:
                return None
            roll = self.rng.random()
            if roll < self.hang_rate:
                self.counts[f"{platform}_hang"] += 1
                return Fault.hang(self.hang_seconds)
            if roll < self.hang_rate + self.error_rate:
                code = self.rng.choice((429, 429, 500, 502, 503))
                self.counts[f"{platform}_{code}"] += 1
                return Fault.status(code)
            return None

        return chaos


FaultKind = Literal["kill", "term", "db_cut"]


@dataclass(frozen=True, slots=True)
class FaultEvent:
    at: float
    kind: FaultKind
    target: int
    """The instance (index), for kill and term."""


def schedule(
    rng: random.Random, seconds: float, instances: int, *, postgres: bool
) -> list[FaultEvent]:
    """Kills every 30-60 s, one SIGTERM, one database cut (PostgreSQL)."""
    events: list[FaultEvent] = []
    at = rng.uniform(30.0, 60.0)
    while at < seconds - 5.0:
        events.append(FaultEvent(at, "kill", rng.randrange(instances)))
        at += rng.uniform(30.0, 60.0)
    # The SIGTERM on another instance than the first kill's (which may still be
    # restarting then), so that it happens.
    first = events[0].target if events else 0
    term = (first + 1) % instances
    events.append(FaultEvent(rng.uniform(0.3, 0.45) * seconds, "term", term))
    if postgres:
        events.append(FaultEvent(rng.uniform(0.55, 0.75) * seconds, "db_cut", 0))
    return sorted(events, key=lambda e: e.at)


@dataclass
class ProcessFaults:
    services: list[Service]
    database: Database
    model: FakeAnthropic
    counts: Counter[str] = field(default_factory=Counter)
    journal: list[str] = field(default_factory=list)
    """What was done when (seconds after the start), for the report."""
    on_restart: Callable[[], None] | None = None
    _stopped: bool = False
    _busy: dict[int, asyncio.Lock] = field(default_factory=dict)
    _serving_since: dict[int, float] = field(default_factory=dict)
    """id(service) → loop.time() its last (re)start was healthy"""

    def stop(self) -> None:
        self._stopped = True

    async def run(self, events: list[FaultEvent], started: float) -> None:
        """Each event at its time, whatever the others do (a slow shutdown does
        not delay the next kill); one at a time per instance."""
        await asyncio.gather(*(self._at(event, started) for event in events))

    async def _at(self, event: FaultEvent, started: float) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, started + event.at - loop.time()))
        if event.kind == "db_cut":
            if not self._stopped:
                cut = await self._cut_database()
                self.journal.append(f"{loop.time() - started:6.1f}s db_cut: {cut} connections")
            return
        async with self._busy.setdefault(event.target, asyncio.Lock()):
            if self._stopped:
                return
            begun = loop.time() - started
            service = self.services[event.target]
            detail = await (self._kill(service) if event.kind == "kill" else self._term(service))
            self.journal.append(
                f"{begun:6.1f}s {event.kind} instance {event.target}: {detail}; "
                f"serving again at {loop.time() - started:.1f}s"
            )

    async def _kill(self, service: Service) -> str:
        await self._work_in_flight(2)
        in_flight = sum(self.model.in_flight.values())
        service.kill()
        await service.stop()
        self.counts["sigkill"] += 1
        await self.restart(service)
        return f"{in_flight} model calls in flight"

    async def _term(self, service: Service) -> str:
        loop = asyncio.get_running_loop()
        # A SIGTERM just as /healthz answers ends a process still starting (its
        # handlers are not installed yet: exit -15, no drain); that one is
        # reported, but the SIGTERM meant here is the one of a serving process.
        since = self._serving_since.get(id(service), 0.0)
        await asyncio.sleep(max(0.0, since + SETTLED_S - loop.time()))
        await self._work_in_flight(1)
        in_flight = sum(self.model.in_flight.values())
        sent = loop.time()
        code = await service.stop(signal.SIGTERM, grace=TERM_GRACE_S)
        took = loop.time() - sent
        self.counts["sigterm"] += 1
        if code == -signal.SIGKILL:
            self.counts["sigterm_not_exited"] += 1
        elif code == -signal.SIGTERM:  # killed by the signal itself: no drain, no hand-back
            self.counts["sigterm_undrained"] += 1
        await self.restart(service)
        return f"{in_flight} model calls in flight, exited {code} after {took:.1f}s"

    async def _work_in_flight(self, calls: int, within: float = 10.0) -> None:
        """Wait (a little) for `calls` model calls in flight: faults in production
        come under load, and a crash between a reservation and its settlement is
        the one that matters most."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                while sum(self.model.in_flight.values()) < calls:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)

    async def restart(self, service: Service) -> None:
        for attempt in range(RESTART_TRIES):
            try:
                await service.start()
            except AssertionError:
                log.warning("restart failed (attempt %d)", attempt + 1)
                await service.stop()
                self.counts["restart_failed"] += 1
                await asyncio.sleep(1.0)
                continue
            self._serving_since[id(service)] = asyncio.get_running_loop().time()
            if self.on_restart is not None:
                self.on_restart()
            return
        raise RuntimeError("an instance could not be restarted:\n" + service.log_text)

    async def _cut_database(self) -> int:
        schema = self.database.schema
        assert schema is not None
        engine = create_async_engine(self.database.url)
        try:
            async with engine.begin() as conn:
                found = await conn.execute(
                    text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE application_name = :name AND pid <> pg_backend_pid()"
                    ),
                    {"name": f"switchboard:{schema}"},
                )
                cut = int(found.scalar_one())
        finally:
            await engine.dispose()
        self.counts["pg_cuts"] += 1
        self.counts["pg_backends_terminated"] += cut
        return cut
