"""The budget meter of one run (`bot.ports.Meter`): reserve before each LLM
call, settle after it, and a cap on what one run may spend. A run that began
with an unlimited budget reserves nothing, unless a limit is set while it
goes on: from its next call it reserves as any other. The user's role is
looked at again before each call after the first (`role_now`, cached: no read
unless a change dropped it), so a role changed while the run goes on counts
from its next call too: an owner made a user reserves from their allowance,
with that role's.

Each call is decided by the rule of `bot.accounts.holds`: refused only when
settled usage and the call's estimate (its input and `MIN_OUTPUT_TOKENS`, not
its `max_tokens`) pass the allowance; made with a `max_tokens` lowered to what
is left; and when only the user's other calls in flight hold what is missing,
it waits for them (`wait_limit` seconds in all per run; the run's timeout
stops meanwhile: `Paused`) and is decided again. A settlement that cannot be
written (database down) stays owed, and the turn's commit charges it (and
releases the run's holds), so spent tokens are always charged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from bot.accounts.budgets import Budgets
from bot.accounts.holds import (
    MIN_OUTPUT_TOKENS,
    BudgetRefused,
    Decision,
    Figures,
    Hold,
    HoldOwner,
    run_cap_text,
)
from bot.accounts.identity import current_period
from bot.llm.tokens import messages_tokens, system_tokens, tool_tokens
from bot.llm.types import LLMRequest
from bot.pipeline.admission import current_slot
from bot.store.budget_rows import TokenLogRow
from bot.types import Role, Usage

log = logging.getLogger("switchboard.budget")

__all__ = ["MIN_OUTPUT_TOKENS", "Paused", "RunCapReached", "RunMeter", "estimate_input"]


class RunCapReached(BudgetRefused):
    """One run would spend more than `[budgets] run_share`/`run_tokens` allow."""

    def __init__(self, spent: int, estimate: int, cap: int) -> None:
        figures = Figures(spent, 0, estimate, cap, current_period())
        super().__init__(figures, run_cap_text(cap), kind="run cap")


class Paused(Protocol):
    """The run's clock (its timeout), stopped while the run waits for the
    user's other calls (`bot.pipeline.control.Batch`)."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...


def estimate_input(request: LLMRequest) -> int:
    return (
        system_tokens(request.system)
        + messages_tokens(request.messages)
        + sum(tool_tokens(t) for t in request.tools)
        + (len(request.volatile) // 4 if request.volatile else 0)
    )


@dataclass
class RunMeter:
    budgets: Budgets
    user_id: int
    role: Role
    limited: bool
    """False for unlimited budgets: nothing to reserve, only the run cap
    applies (until a limit is set while the run goes on)."""
    run_cap: int | None
    owner: HoldOwner
    """The run, on whose behalf tokens are held."""
    role_now: Callable[[], Awaitable[Role]] | None = None
    """The user's role now (`Identity.role_now`); None: the run keeps `role`."""
    wait_limit: float = 0.0
    """Seconds the run may wait, in all, for the user's other calls to settle."""
    clock: Paused | None = None
    token_log: Callable[[str, str, Usage], TokenLogRow] | None = None
    """A call's token log from its (kind, model, usage), written with its
    settlement (`after_call`); None: the turn writes every log."""
    spent: int = 0
    """Tokens this run's calls used so far."""
    calls: int = 0
    waited: float = 0.0
    """Seconds the run waited for the user's other calls."""
    reserved: bool = False
    """A hold was taken: the run's turn releases its holds (any a lost answer left)."""
    owed: list[int] = field(default_factory=list)
    """Tokens used and not charged yet (unlimited; a settlement that failed)."""
    _holds: dict[int, Hold] = field(default_factory=dict)
    """Each call in flight's hold, by its task: a run's sub-agents
    (`bot.agent.delegate`) call at once, through this one meter."""
    _promised: dict[int, int] = field(default_factory=dict)
    """What each call in flight may use at most (input and output), by its
    task: the run cap counts them, so calls at once never pass it together."""

    async def before_call(self, request: LLMRequest) -> int:
        # (what the request needs is estimated only when a cap or a limit asks)
        needed = estimate_input(request) if self.run_cap is not None or self.limited else 0
        max_tokens = request.max_tokens
        if self.run_cap is not None:
            room = self.run_cap - self.spent - sum(self._promised.values()) - needed
            if room < MIN_OUTPUT_TOKENS:
                raise RunCapReached(self.spent, needed + MIN_OUTPUT_TOKENS, self.run_cap)
            max_tokens = min(max_tokens, room)
        self.calls += 1
        if self.calls > 1:  # the first: checked as the run began
            await self._recheck()
        if not self.limited:
            return self._waiting(needed, max_tokens)
        if not needed:  # limited since the recheck above
            needed = estimate_input(request)
        decision = await self._decide(needed, max_tokens)
        if decision.unlimited:  # the limit was lifted meanwhile
            self.limited = False
            return self._waiting(needed, max_tokens)
        if decision.hold is not None:
            self._holds[_call()] = decision.hold
        self.reserved = True
        return self._waiting(needed, decision.max_tokens)

    async def _decide(self, needed: int, max_tokens: int) -> Decision:
        """A hold for the call, waiting while only the user's other calls in
        flight hold what is missing; raises `BudgetRefused`."""
        while True:
            decision = await self.budgets.reserve(
                self.user_id, self.role, self.owner, needed, max_tokens
            )
            if decision.hold is not None or decision.figures is None:
                return decision
            left = self.wait_limit - self.waited
            if not decision.waits or left <= 0:
                if decision.waits:
                    log.warning(
                        "budget.wait_over user=%s run=%s after %.1fs: %s",
                        self.user_id,
                        self.owner.run_id,
                        self.waited,
                        decision.figures.record(),
                    )
                raise BudgetRefused(decision.figures)
            await self._wait(left, decision.figures)

    async def _wait(self, left: float, figures: Figures) -> None:
        log.info(
            "budget.waiting user=%s run=%s for the user's calls in flight: %s",
            self.user_id,
            self.owner.run_id,
            figures.record(),
        )
        slot = current_slot.get()
        if slot is not None:  # waiting is free: the message's slot is too
            slot.give_up()
        if self.clock is not None:
            self.clock.pause()
        started = time.monotonic()
        try:
            await self.budgets.wait_for_release(self.user_id, left)
        finally:
            self.waited += time.monotonic() - started
            if self.clock is not None:
                self.clock.resume()
            if slot is not None:
                await slot.take()

    async def _recheck(self) -> None:
        """Whether a limit was set or the role changed since the run began (an
        operator may have): an unlimited budget and a known role cost no read,
        a change drops what is cached. Not known (the database failing): the
        run goes on as it began."""
        try:
            await self.budgets.look_elsewhere()
            role = self.role if self.role_now is None else await self.role_now()
            if role is self.role and self.limited:
                return  # each call's reservation reads the limit anyway
            unlimited = await self.budgets.unlimited_now(self.user_id, role)
        except Exception as exc:
            log.warning("budget.recheck_failed user=%s: %s", self.user_id, exc)
            return
        if role is not self.role:
            log.info(
                "budget.role_changed user=%s %s -> %s: counts from this call",
                self.user_id,
                self.role.value,
                role.value,
            )
        self.role, self.limited = role, not unlimited

    def _waiting(self, needed: int, max_tokens: int) -> int:
        """The call is about to go out: the message's slot is free while it waits."""
        if self.run_cap is not None:
            self._promised[_call()] = needed + max_tokens
        if (slot := current_slot.get()) is not None:
            slot.give_up()
        return max_tokens

    async def after_call(self, usage: Usage | None, model: str = "", kind: str = "llm") -> bool:
        """Settle the call; True when its token log was written with the charge."""
        if (slot := current_slot.get()) is not None:
            await slot.take()
        self._promised.pop(_call(), None)
        hold = self._holds.pop(_call(), None)
        tokens = usage.total if usage is not None else 0
        self.spent += tokens
        if hold is None:  # unlimited: charged with the turn, in its transaction
            if tokens:
                self.owed.append(tokens)
            return False
        logs = self.token_log
        row = None if usage is None or logs is None else logs(kind, model, usage)
        try:
            await self.budgets.settle(hold, tokens, row)
        except Exception:
            log.warning(
                "budget.settle_deferred user=%s tokens=%s (charged with the turn)",
                self.user_id,
                tokens,
                exc_info=True,
            )
            if tokens:
                self.owed.append(tokens)
            return False
        return row is not None

    def take_owed(self) -> list[int]:
        owed, self.owed = self.owed, []
        return owed


def _call() -> int:
    """The call in flight of the current task (a run's, or one of its sub-agents')."""
    return id(asyncio.current_task())
