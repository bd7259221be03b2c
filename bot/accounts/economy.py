"""The economy model: a user whose allowance is nearly spent is answered by a
cheaper model (`[budgets] economy_model`, below `economy_below` of a limited
allowance left) instead of being cut off sooner than necessary. Holds and the
run cap work the same with it; its calls are charged at its own price."""

from __future__ import annotations

from bot.accounts.budgets import BudgetStatus
from bot.config import BudgetSettings


def share_left(status: BudgetStatus) -> float | None:
    """What is left of a limited allowance, as a share of it (None: unlimited)."""
    limit = status.limit
    if limit is None:
        return None
    return (status.remaining or 0) / limit if limit > 0 else 0.0


def economy_model(settings: BudgetSettings, status: BudgetStatus) -> str | None:
    """The model that answers this user now instead of the usual one, or None."""
    share = share_left(status)
    if settings.economy_model is None or share is None or share >= settings.economy_below:
        return None
    return settings.economy_model
