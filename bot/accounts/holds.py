"""Budget holds: tokens held for LLM calls in flight, one row per call.

Before each LLM call of a limited user, the run reserves what the call may
spend (`Budgets.reserve`): a row of `budget_holds`, owned by the run and the
instance making the call. What the user may spend is the allowance less the
settled `used` and the live holds; after the call the hold is released and
what the call used is charged, in one transaction (`Budgets.settle`; when that
cannot be written, the run's turn charges it and releases the run's holds in
its own write). A hold dies with its holder: the recovery that takes over a
dead instance's run releases that run's holds in the takeover's transaction
(`Budgets.release_dead`). `expires_at` is only a backstop (a hold past it
counts for nothing) and is never extended.

The decision, for a call whose request reads `input` tokens and may write
`max_tokens` (`decide`):

- the estimate is `input + min(MIN_OUTPUT_TOKENS, max_tokens)`: what the call
  is likely to need, not all it may write;
- refused when settled usage and the estimate pass the allowance (nothing in
  flight can change that);
- otherwise, when what the live holds leave covers the estimate, the call is
  made with `max_tokens` lowered to what is left (so it cannot pass the
  allowance), and the hold covers `input` and that `max_tokens`;
- otherwise the shortfall comes only from the user's other calls in flight:
  the message waits for them to settle (`Releases`, bounded by the caller),
  then is decided again.

Concurrency: a reservation locks the user's budget row first (`SELECT … FOR
UPDATE` on PostgreSQL; SQLite's write transactions are serialized), and
inserts the hold with a statement run after the lock is held, which counts
the live holds itself: two instances reserving for one user at once take
turns, and the second sees the first's hold.

A refusal carries the figures it was decided on (`Figures`); the run records
them (`Figures.record`: `used=… held=… estimate=… allowance=…`) and the user
reads them (`refusal_text`, the one place of that wording).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from bot.errors import BudgetExceeded
from bot.types import Role

log = logging.getLogger("switchboard.budget")

MIN_OUTPUT_TOKENS = 256
"""A call that cannot write at least this much is not worth making; also the
output a call's estimate counts on."""
AWAITED_S = 600.0
"""How long after a message began to wait settlements tell the other
instances (`Budget.awaited_until`): longer than it may wait."""
WAIT_POLL_S = 1.0
"""How often a message waiting for the user's holds decides again, when no
settlement woke it (another process's, SQLite; a lost notice; an expiry)."""


def period_end(period: str) -> datetime:
    """The first instant of the month after `period` ("YYYY-MM"), UTC."""
    year, month = (int(part) for part in period.split("-"))
    return datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Figures:
    """What a budget decision was made on."""

    used: int
    """Settled usage this period."""
    held: int
    """Tokens the user's live holds (other calls in flight) hold."""
    estimate: int
    """What the call is likely to need: its input and `MIN_OUTPUT_TOKENS`."""
    allowance: int
    """This period's allowance, with what was granted."""
    period: str

    def record(self) -> str:
        """The figures as recorded on a refused run (operators count them)."""
        return (
            f"used={self.used} held={self.held} estimate={self.estimate} allowance={self.allowance}"
        )

    @property
    def resets_at(self) -> datetime:
        return period_end(self.period)


def refusal_text(figures: Figures) -> str:
    """What a user refused by their allowance is told."""
    resets = figures.resets_at
    short = "" if figures.used >= figures.allowance else ", not enough for this message"
    return (
        f"You've used {figures.used:,} of your {figures.allowance:,} tokens this month"
        f"{short}; the allowance resets on {resets.day} {resets:%B}. "
        "Ask an admin if you need more."
    )


def run_cap_text(cap: int) -> str:
    """What a user is told when one run would spend more than a run may."""
    return f"This answer would need more than the {cap:,} tokens one run may use, so I stopped."


class BudgetRefused(BudgetExceeded):
    """A call (or a message) the budget refuses, with the figures decided on:
    `str()` is what the run records, `reply` what the user reads."""

    def __init__(self, figures: Figures, reply: str | None = None, kind: str = "budget") -> None:
        super().__init__(f"{kind}: {figures.record()}")
        self.figures = figures
        self.reply = reply if reply is not None else refusal_text(figures)


@dataclass(frozen=True, slots=True)
class HoldOwner:
    """Who holds a reservation: one run, in one conversation (on this instance)."""

    run_id: str
    conversation_key: str


@dataclass(frozen=True, slots=True)
class Hold:
    """Tokens reserved for one LLM call (a row of `budget_holds`)."""

    id: int
    user_id: int
    role: Role
    tokens: int


@dataclass(frozen=True, slots=True)
class Decision:
    """How a reservation ended: a `hold` (the call may write `max_tokens`),
    a wait for the user's other calls (`waits`), or a refusal (neither);
    `figures` None: the budget is unlimited (nothing held)."""

    hold: Hold | None
    max_tokens: int
    figures: Figures | None
    waits: bool = False

    @property
    def unlimited(self) -> bool:
        return self.figures is None


def estimate(input_tokens: int, max_tokens: int) -> int:
    """What a call is likely to need: its input and a useful answer."""
    return input_tokens + min(MIN_OUTPUT_TOKENS, max_tokens)


def decide(used: int, held: int, allowance: int, input_tokens: int, max_tokens: int) -> int | None:
    """The `max_tokens` a call may write (None: it does not fit now), by the
    rule of the module doc; whether a call that does not fit is refused or
    waits is `refused`."""
    room = allowance - used - held - input_tokens
    if room < min(MIN_OUTPUT_TOKENS, max_tokens):
        return None
    return min(max_tokens, room)


def refused(used: int, allowance: int, input_tokens: int, max_tokens: int) -> bool:
    """Whether settled usage and the call's estimate pass the allowance."""
    return used + estimate(input_tokens, max_tokens) > allowance


class Releases:
    """This process's messages waiting for a user's holds to be released:
    woken by a settlement here, a notice from another instance, or the
    poll (`WAIT_POLL_S`)."""

    def __init__(self) -> None:
        self._events: dict[int, asyncio.Event] = {}

    def wake(self, user_id: int) -> None:
        event = self._events.pop(user_id, None)
        if event is not None:
            event.set()

    def wake_all(self) -> None:
        events, self._events = self._events, {}
        for event in events.values():
            event.set()

    async def wait(self, user_id: int, within: float) -> None:
        """Return at the next release of `user_id`'s holds, or after `within`
        seconds (at most `WAIT_POLL_S`)."""
        event = self._events.setdefault(user_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), max(0.0, min(within, WAIT_POLL_S)))
