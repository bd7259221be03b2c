"""Copying SQLite's WAL back into the database (a checkpoint) without the
writer waiting for it.

The Store's SQLite connections run their statements on the event loop's thread
with SQLite's automatic checkpoint off (`bot.store.sqlite_driver`): a
checkpoint syncs the files, milliseconds on a busy disk. `Checkpoints` counts
their commits and every `every` of them asks for a PASSIVE checkpoint on a
connection and a thread of its own. Run on the committing connection's worker
thread instead, each held up that connection's next statements, queued behind
it there: on SQLite about one message in twenty waited 5-10 ms for the sync.
A PASSIVE checkpoint takes no lock a writer or a reader waits for.

What it cannot do while writes go on: let the WAL restart. SQLite writes from
the WAL's start again only when a checkpoint copied all of it before the next
write began, and commits landing during a checkpoint on another connection
leave it short. So when a side checkpoint finds the WAL longer than
`MOST_FRAMES` (the writes never left it a quiet moment), one more is run at
once by the writer's connection between its writes (`committed` says so), as
every checkpoint was before: a short one (the side one just copied nearly
all), once every few hundred messages, and the WAL stays within about
`MOST_FRAMES` pages.

Requests coalesce: one side checkpoint runs at a time, and at most one more
is asked for meanwhile. A checkpoint that fails is logged; the next retries."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading

log = logging.getLogger("switchboard.store")

MOST_FRAMES = 8192
"""WAL pages (4 KiB each by default: 32 MiB) past which the writer's connection
runs the next checkpoint itself, so that the WAL restarts."""


class Checkpoints:
    """When and where a database's WAL is checkpointed: every `every` commits
    made with the automatic checkpoint off."""

    def __init__(self, database: str, every: int = 64) -> None:
        self.database = database
        self.every = every
        self.done = 0
        """side checkpoints run (they may have copied nothing)"""
        self._commits = 0
        self._long = False
        """the last side checkpoint found the WAL past `MOST_FRAMES`"""
        self._wanted = threading.Event()
        """set to wake the side thread (each thread has its own: one still
        finishing after `close` must not take a later thread's wake-up)"""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def committed(self) -> bool:
        """A commit went through; every `every` of them a side checkpoint is
        asked for. True: the caller's connection runs one now, between its
        writes (the last side checkpoint found the WAL too long)."""
        if self._long:  # right after the side one: little is left to copy
            self._long = False
            self._commits = 0
            return True
        self._commits += 1
        if self._commits < self.every:
            return False
        self._commits = 0
        self.request()
        return False

    def request(self) -> None:
        """Ask for a side checkpoint, without waiting for it (the thread starts
        with the first request, and again after `close`)."""
        if self._thread is None:
            self._wanted, self._stop = threading.Event(), threading.Event()
            self._thread = threading.Thread(
                target=self._run,
                args=(self._wanted, self._stop),
                name="sqlite-checkpoint",
                daemon=True,
            )
            self._thread.start()
        self._wanted.set()

    async def close(self) -> None:
        """Stop the side thread once the checkpoint it runs (if any) is done,
        and close its connection."""
        thread, wanted, stop = self._thread, self._wanted, self._stop
        if thread is None:
            return
        self._thread = None
        stop.set()
        wanted.set()
        await asyncio.to_thread(thread.join)

    def _run(self, wanted: threading.Event, stop: threading.Event) -> None:
        connection: sqlite3.Connection | None = None
        try:
            while not stop.is_set():
                wanted.wait()
                wanted.clear()
                if stop.is_set():
                    return
                try:
                    if connection is None:
                        connection = sqlite3.connect(
                            self.database,
                            uri=self.database.startswith("file:"),
                            check_same_thread=False,
                        )
                    _busy, frames, _copied = connection.execute(
                        "PRAGMA wal_checkpoint(PASSIVE)"
                    ).fetchone()
                    self._long = frames >= MOST_FRAMES
                    self.done += 1
                except sqlite3.Error as error:
                    log.warning("store.checkpoint_failed %s: %s", type(error).__name__, error)
        finally:
            if connection is not None:
                connection.close()
