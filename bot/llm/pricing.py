"""Cost estimates from the price table in config (USD per million tokens).

A model without a price is charged at the most expensive configured price,
never as free (`App.open` warns about each such model it knows of at start).
Names are as config writes them: "openrouter/x" for a provider's model, bare
(or "anthropic/…") for the built-in provider's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from bot.config import Price, plain_model
from bot.types import Usage

CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.1


def estimate_cost(model: str, usage: Usage, prices: Mapping[str, Price]) -> float:
    """Estimated USD for `usage` on `model` (the highest price when it has none)."""
    price = price_of(model, prices) or highest(prices)
    if price is None:
        return 0.0
    write = price.cache_write if price.cache_write is not None else price.input * CACHE_WRITE_FACTOR
    read = price.cache_read if price.cache_read is not None else price.input * CACHE_READ_FACTOR
    return (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_write_tokens * write
        + usage.cache_read_tokens * read
    ) / 1_000_000


def price_of(model: str, prices: Mapping[str, Price]) -> Price | None:
    """The model's own price; dated snapshots ("claude-x-5-5-20261001") use
    their family's. None: not priced."""
    name = plain_model(model)
    return prices.get(name) or _by_prefix(name, prices)


def highest(prices: Mapping[str, Price]) -> Price | None:
    """The most expensive configured price (output, then input)."""
    return max(prices.values(), key=lambda p: (p.output, p.input), default=None)


def unpriced(models: Iterable[str], prices: Mapping[str, Price]) -> list[str]:
    """Those of `models` without a price."""
    return [m for m in dict.fromkeys(models) if price_of(m, prices) is None]


def _by_prefix(model: str, prices: Mapping[str, Price]) -> Price | None:
    matches = [name for name in prices if model.startswith(name)]
    return prices[max(matches, key=len)] if matches else None
