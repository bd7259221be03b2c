"""The fast path's speed mechanisms, by name: `SWITCHBOARD_FAST_PATH_OFF`
(comma-separated names, read once) turns some off, for measuring what each
saves (`tests.benchmarks.mechanisms`); `[database] fast_path = false` turns off
all of the store's at once."""

from __future__ import annotations

import functools
import os

ENV = "SWITCHBOARD_FAST_PATH_OFF"

MECHANISMS = {
    "early_lease": "the conversation's lease taken with the message at intake",
    "caches": "the accounts', budgets', memories' and conversations' caches",
    "sqlite_driver": "SQLite: aiosqlite with one thread hop a statement, on the loop",
    "plans": "prepared statement plans run straight on the driver (bot.store.direct)",
    "kept": "PostgreSQL: connections kept for single statements (bot.store.kept)",
    "keeping_pool": "PostgreSQL: the pool keeping its overflow (bot.store.pool)",
}


@functools.cache
def _off() -> frozenset[str]:
    names = frozenset(n.strip() for n in os.environ.get(ENV, "").split(",") if n.strip())
    unknown = names - MECHANISMS.keys()
    if unknown:
        raise ValueError(f"{ENV}: no such mechanism {sorted(unknown)}, known: {sorted(MECHANISMS)}")
    return names


def off(name: str) -> bool:
    """Whether mechanism `name` is turned off (`ENV`)."""
    assert name in MECHANISMS, name
    return name in _off()
