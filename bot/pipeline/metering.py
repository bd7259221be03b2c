"""The budget meter of one run (`bot.ports.Meter`): reserve before each LLM
call, settle after it, and a cap on what one run may spend. A run that began
with an unlimited budget reserves nothing, unless a limit is set while it
goes on: from its next call it reserves as any other. The user's role is
looked at again before each call after the first (`role_now`, cached: no read
unless a change dropped it), so a role changed while the run goes on counts
from its next call too: an owner made a user reserves from their allowance,
with that role's.

The estimate of a call is its input (counted from the request) plus the
output it may write (`max_tokens`). When the allowance left is smaller than
that but still covers the input and a useful answer, the call is made with a
smaller `max_tokens` that fits; below that, the call is refused. A settlement
that cannot be written (database down) stays owed, and the turn's commit
charges it (`take_owed`), so spent tokens are always charged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bot.accounts.budgets import Budgets, Hold
from bot.errors import BudgetExceeded
from bot.llm.tokens import messages_tokens, system_tokens, tool_tokens
from bot.llm.types import LLMRequest
from bot.pipeline.admission import current_slot
from bot.types import Role, Usage

log = logging.getLogger("switchboard.budget")

MIN_OUTPUT_TOKENS = 256
"""A call that cannot write at least this much is not worth making."""


class RunCapReached(BudgetExceeded):
    """One run would spend more than `[budgets] run_share`/`run_tokens` allow."""


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
    role_now: Callable[[], Awaitable[Role]] | None = None
    """The user's role now (`Identity.role_now`); None: the run keeps `role`."""
    spent: int = 0
    """Tokens this run's calls used so far."""
    calls: int = 0
    owed: list[tuple[Hold | None, int]] = field(default_factory=list)
    _hold: Hold | None = None

    async def before_call(self, request: LLMRequest) -> int:
        # (what the request needs is estimated only when a cap or a limit asks)
        needed = estimate_input(request) if self.run_cap is not None or self.limited else 0
        max_tokens = request.max_tokens
        if self.run_cap is not None:
            room = self.run_cap - self.spent - needed
            if room < MIN_OUTPUT_TOKENS:
                raise RunCapReached(
                    f"this answer needs more than the {self.run_cap} tokens one run may use"
                )
            max_tokens = min(max_tokens, room)
        self.calls += 1
        if self.calls > 1:  # the first: checked as the run began
            await self._recheck()
        if not self.limited:
            return self._waiting(max_tokens)
        if not needed:  # limited since the recheck above
            needed = estimate_input(request)
        hold = await self.budgets.reserve(self.user_id, self.role, needed + max_tokens)
        if hold is None:  # not all of it: what is left, if it covers a useful answer
            left = await self.budgets.available(self.user_id, self.role) or 0
            if left - needed >= MIN_OUTPUT_TOKENS:
                hold = await self.budgets.reserve(self.user_id, self.role, left)
                max_tokens = left - needed
        if hold is None:
            raise BudgetExceeded(
                f"not enough tokens left this month for another step (about {needed} needed)"
            )
        self._hold = hold
        return self._waiting(max_tokens)

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

    def _waiting(self, max_tokens: int) -> int:
        """The call is about to go out: the message's slot is free while it waits."""
        if (slot := current_slot.get()) is not None:
            slot.give_up()
        return max_tokens

    async def after_call(self, usage: Usage | None) -> None:
        if (slot := current_slot.get()) is not None:
            await slot.take()
        hold, self._hold = self._hold, None
        tokens = usage.total if usage is not None else 0
        self.spent += tokens
        if hold is None:  # unlimited: charged with the turn, in its transaction
            if tokens:
                self.owed.append((None, tokens))
            return
        try:
            await self.budgets.settle(hold, tokens)
        except Exception:
            log.warning(
                "budget.settle_deferred user=%s tokens=%s (charged with the turn)",
                self.user_id,
                tokens,
                exc_info=True,
            )
            self.owed.append((hold, tokens))

    def take_owed(self) -> list[tuple[Hold | None, int]]:
        owed, self.owed = self.owed, []
        return owed
