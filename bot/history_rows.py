"""The history rows of recent conversations, kept between runs.

A conversation's history is read for every message: the rows after its
boundary (the last `/new` or compaction), up to a cap. Stored messages are
never changed or deleted, only added, so the rows read for one run are still
right for the next one, which needs only the rows added since. What is kept
for a conversation is checked against the database on every read, by the
statement that reads the conversation's head and its rows (so the rows it
returns are only the new ones when the check holds): the boundary must be the
same, and the number of rows in (boundary, last id kept] must still be the
number kept. A row that appeared below the last id kept (PostgreSQL hands out
ids before commits, so a concurrent one can commit later with a smaller id)
or any other difference makes the read a full one again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

KEPT_CONVERSATIONS = 256
"""Conversations whose rows are kept (the most recently read)."""
KEPT_CHARS = 16_000_000
"""At most this much message text is kept, all conversations together (the
least recently read go first)."""


@dataclass(frozen=True, slots=True)
class Kept:
    boundary: int
    last_id: int
    """the largest id read; rows above it are new"""
    count: int
    """rows in (boundary, last_id]: all of them read, `rows` the newest"""
    rows: tuple[Any, ...]
    """the newest rows, at most the cap, oldest first"""
    chars: int
    """the length of their texts"""


class KeptRows:
    """Per conversation id, what its last full or incremental read gave."""

    def __init__(self, size: int = KEPT_CONVERSATIONS, max_chars: int = KEPT_CHARS) -> None:
        self._size = size
        self._max_chars = max_chars
        self._chars = 0
        self._kept: OrderedDict[int, Kept] = OrderedDict()

    def get(self, conversation_id: int) -> Kept | None:
        kept = self._kept.get(conversation_id)
        if kept is not None:
            self._kept.move_to_end(conversation_id)
        return kept

    def forget(self, conversation_id: int) -> None:
        gone = self._kept.pop(conversation_id, None)
        if gone is not None:
            self._chars -= gone.chars

    def merge(
        self,
        conversation_id: int,
        kept: Kept | None,
        boundary: int,
        new: list[Any],
        limit: int,
    ) -> list[Any]:
        """The history after adding `new` (rows with an `id`, oldest first, read
        after `kept.last_id`, or after `boundary` when nothing was kept) to what
        was kept; remembered for the next read. A read that came back full
        (`limit` rows) may have left older rows out: nothing is kept then."""
        added = sum(len(row.text) for row in new)
        if kept is None:
            rows, count, last_id = new, len(new), new[-1].id if new else boundary
            chars = added
        else:
            merged = [*kept.rows, *new]
            rows, dropped = merged[-limit:], merged[:-limit]
            count = kept.count + len(new)
            last_id = new[-1].id if new else kept.last_id
            chars = kept.chars + added - sum(len(row.text) for row in dropped)
        self.forget(conversation_id)
        if len(new) >= limit or chars > self._max_chars:
            return rows  # older rows may be missing, or too much to keep
        self._kept[conversation_id] = Kept(boundary, last_id, count, tuple(rows), chars)
        self._chars += chars
        while len(self._kept) > self._size or self._chars > self._max_chars:
            _, oldest = self._kept.popitem(last=False)
            self._chars -= oldest.chars
        return rows
