"""Cost estimates from the price table in config (USD per million tokens)."""

from __future__ import annotations

from collections.abc import Mapping

from bot.config import Price
from bot.types import Usage

CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.1


def estimate_cost(model: str, usage: Usage, prices: Mapping[str, Price]) -> float:
    """Estimated USD for `usage` on `model`; 0.0 when the model has no price."""
    price = prices.get(model) or _by_prefix(model, prices)
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


def _by_prefix(model: str, prices: Mapping[str, Price]) -> Price | None:
    """Dated snapshots ("claude-x-5-5-20261001") use their family's price."""
    matches = [name for name in prices if model.startswith(name)]
    return prices[max(matches, key=len)] if matches else None
