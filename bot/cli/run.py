"""`switchboard run`: every enabled platform adapter, until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import signal
import sys
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
    # Until everything is up, log records wait: a failed start is one line.
    verbose = getattr(args, "debug", False) or log.isEnabledFor(logging.DEBUG)
    with HeldLogs(verbose=verbose):
        try:
            await app.open()
            settle_heap(collect=True)
            if platforms:
                await app.start_adapters(platforms)
                await app.start_scheduler()
                app.start_recovery()
            settle_heap(collect=False)
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
        await _wait_for_stop()
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


async def _wait_for_stop() -> None:
    import asyncio

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Event loops without signal handlers (Windows) raise NotImplementedError:
        # there, Ctrl-C still ends the process through KeyboardInterrupt.
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutdown requested; draining")
