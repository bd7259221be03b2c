"""`switchboard run`: every enabled platform adapter, until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import sys
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from bot.cli.startup_logs import HeldLogs

if TYPE_CHECKING:  # the app is imported when the command runs (`bot.cli`)
    from bot.config import Secrets, Settings

log = logging.getLogger("switchboard.cli")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    run = sub.add_parser("run", parents=[common], help="start every enabled platform adapter")
    run.set_defaults(func=cmd_run)


async def cmd_run(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.app import App
    from bot.cli.chat import chat_in_terminal

    platforms = settings.enabled_platforms()
    if not platforms and sys.stdin.isatty() and not getattr(args, "debug", False):
        logs = logging.getLogger("switchboard")  # a chat's screen: warnings only
        logs.setLevel(max(logs.getEffectiveLevel(), logging.WARNING))
    app = App(settings, secrets)
    # SIGTERM/SIGINT are ours before anything serves (/healthz answers as soon
    # as the web server listens): one arriving while the service starts ends
    # the start and drains what was taken, never the process as it stands.
    stop = _stop_on_signals() if platforms else None
    # Until everything is up, log records wait: a failed start is one line.
    verbose = getattr(args, "debug", False) or log.isEnabledFor(logging.DEBUG)
    with HeldLogs(verbose=verbose):
        try:
            if not await _unless_stopped(_start(app, platforms), stop):
                log.info("shutdown requested while starting; draining")
                await app.close(settings.inbox.drain_seconds)
                return 0
        except BaseException:
            await app.close(settings.inbox.drain_seconds)
            raise
    try:
        if not platforms:
            print(
                "switchboard: no chat platform is enabled ([telegram], [slack] or [discord] "
                "enabled = true in config).",
                file=sys.stderr,
            )
            if sys.stdin.isatty():
                return await chat_in_terminal(app, settings, None)
            return 1
        assert stop is not None
        await stop.wait()
        log.info("shutdown requested; draining")
        return 0
    finally:
        await app.close(settings.inbox.drain_seconds)


YOUNG_OBJECTS = 20_000
"""Allocations between two passes over the youngest generation (Python's
default: 700), and `OLDER_EVERY` of those passes between two over the next.
With the defaults, a burst of 1,000 messages (each holding its prompt, history
and task while its model call is out) ran ~50 middle and 4-5 full passes
(60-95 ms each, every one a stall of the event loop); with these, none of
either during the burst: the loop's longest stall 65-80 -> 17-20 ms, the
collector's CPU in the burst ~300 -> ~70 ms. A sequential message costs the
same either way, and memory grows by at most the young objects awaiting a
pass."""

OLDER_EVERY = 20


def settle_heap(*, collect: bool) -> None:
    """What startup loaded (modules, settings, the app) lives as long as the
    process: take it out of the garbage collector's full passes, whose pauses
    stall the event loop longer the bigger the heap they scan (hundreds of ms
    under a burst of messages), and collect the young generations less often
    (`YOUNG_OBJECTS`). `collect`: free startup garbage first, before anything
    is served."""
    if collect:
        gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_OBJECTS, OLDER_EVERY, gc.get_threshold()[2])


async def _start(app: Any, platforms: Any) -> None:
    await app.open()
    settle_heap(collect=True)
    if platforms:
        await app.start_adapters(platforms)
        await app.start_scheduler()
        app.start_recovery()
    settle_heap(collect=False)


def _stop_on_signals() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM (their handlers installed now)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Event loops without signal handlers (Windows) raise NotImplementedError:
        # there, Ctrl-C still ends the process through KeyboardInterrupt.
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    return stop


async def _unless_stopped(work: Coroutine[Any, Any, None], stop: asyncio.Event | None) -> bool:
    """Run `work` unless `stop` is set first (then it is cancelled): whether it
    finished."""
    task = asyncio.ensure_future(work)
    if stop is None:
        await task
        return True
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False
