"""The order in which a conversation's messages reach its run control.

Between intake and the run, a message's way has steps of different lengths: its
files downloaded, its sender looked up (or found cached), its conversation
created, its lease taken with it or not. A later message of the same
conversation must not overtake an earlier one on that way, or it reaches the
model first (and the earlier one is answered as an afterthought). Each message
takes its place at intake (`arrive`, before anything it awaits) and, just
before it queues for the run (`RunControl.submit`), waits for the messages
ahead of it to have queued or ended (`turn`). The line is in the order the
messages were received, so one taken over from a dead process (received
earlier) goes ahead of newer ones still on their way. Only messages of the
same conversation wait for each other.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Place:
    """One message's place in its conversation's line."""

    __slots__ = ("done", "key", "order")

    def __init__(self, key: str, order: float) -> None:
        self.key = key
        self.order = order
        self.done = asyncio.get_running_loop().create_future()


class Arrivals:
    def __init__(self) -> None:
        self._lines: dict[str, deque[Place]] = {}

    def arrive(self, key: str, order: float = 0.0) -> Place:
        """Take a place in `key`'s line: after those of an `order` (when the
        message was received) up to its own, before later ones (a message
        taken over from a dead process goes ahead of newer ones still on their
        way). `leave` it whatever happens."""
        place = Place(key, order)
        line = self._lines.setdefault(key, deque())
        index = len(line)
        while index > 0 and line[index - 1].order > order:
            index -= 1
        line.insert(index, place)
        return place

    async def turn(self, place: Place) -> None:
        """Wait until every message ahead of `place` has left the line."""
        line = self._lines.get(place.key)
        while line and line[0] is not place:
            await asyncio.shield(line[0].done)  # it leaves the line as it finishes

    def leave(self, place: Place) -> None:
        """`place` queued for its run, or ended before: the next may go on.
        Call it right before queueing (nothing awaited in between), so the
        next message queues after it."""
        if place.done.done():  # left already
            return
        place.done.set_result(None)
        line = self._lines[place.key]
        line.remove(place)
        if not line:
            del self._lines[place.key]
