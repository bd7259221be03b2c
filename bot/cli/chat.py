"""`switchboard chat`: the terminal chat with the agent.

The operator at the machine chats as the console user (`$USER`, or
`[console] user`); on a database without any owner yet, that user becomes the
owner (audited, said once on stderr). `--as USER` chats as another console
user and grants nothing. Logs go to stderr (or the configured file) at WARNING
unless `-v`; stdout carries the chat only. On a terminal, runs are followed
live: the bus's events for the console conversation become `Progress` for the
adapter, text passing through `StreamFilter` first; log lines meant for that
terminal go through its live view (`LiveView.above`), never over it.

Ready for input before the model's SDK has loaded: it loads in the background
from then on (`BackgroundProvider`), and the first reply waits for the rest.
With input from a pipe, the exit status is 1 when a reply failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the app is imported when the command runs (`bot.cli`)
    from bot.agent.events import Event, EventBus
    from bot.agent.streaming import RunView
    from bot.app import App
    from bot.config import Secrets, Settings
    from bot.ports import Interactive, LiveView, Progress

log = logging.getLogger("switchboard.cli.chat")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    chat = sub.add_parser("chat", parents=[common], help="chat with the agent in this terminal")
    chat.add_argument(
        "--as",
        "--user",
        dest="as_user",
        metavar="USER",
        help="chat as this console user id instead of yours (grants nothing)",
    )
    chat.add_argument(
        "-v",
        "--verbose",
        dest="log_level",
        action="store_const",
        const="INFO",
        default="WARNING",
        help="log INFO lines too (to stderr, or the configured file)",
    )
    chat.set_defaults(func=cmd_chat)


async def cmd_chat(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.app import App

    app = App(settings, secrets, provider_in_background=True)
    try:
        await app.open()
        return await chat_in_terminal(app, settings, args.as_user)
    finally:
        await app.close()


async def chat_in_terminal(app: App, settings: Settings, user: str | None) -> int:
    """Attach the console adapter to an opened app and chat until the user is
    done. The exit status: 0, or 1 when input came from a pipe and a reply
    failed (a script learns that its question was not answered)."""
    import asyncio
    import contextlib

    from bot.app import load_adapter
    from bot.app.provider import BackgroundProvider
    from bot.errors import StartupError
    from bot.logs import logs_through
    from bot.ports import Interactive, LiveView

    if user:
        settings = settings.model_copy(
            update={"console": settings.console.model_copy(update={"user": user})}
        )
    console = load_adapter("console", settings, app.secrets)
    if not isinstance(console, Interactive):
        raise StartupError("the console adapter cannot run interactively")
    if not user:
        await claim_owner(app, console)
    app.attach(console)
    await console.start(app.pipeline)
    await app.start_scheduler([console.platform])
    app.start_recovery([console.platform])
    view = console if isinstance(console, LiveView) and console.live else None
    follower: asyncio.Task[None] | None = None
    live = settings.streaming.enabled_for(console.platform)  # else each reply comes whole
    if live and view is not None:
        follower = asyncio.create_task(follow_runs(app.pipeline.s.bus, view))
    if isinstance(app.provider, BackgroundProvider):
        app.provider.start()  # ready for input: the SDK loads while the person types
    try:
        with logs_through(view.above if view is not None else lambda _stream: None):
            await console.run()
    finally:
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
    return 1 if console.failed_replies and not sys.stdin.isatty() else 0


async def claim_owner(app: App, console: Interactive) -> None:
    """On a database with no owner yet, the operator's console user becomes one."""
    from bot.accounts.audit import Audit
    from bot.cli.common import actor

    account = getattr(console, "user", None)
    if not isinstance(account, str):
        return
    identity = app.pipeline.s.identity
    record = await identity.claim_first_owner(console.platform, account, display_name=account)
    if record is None:
        return
    who = actor()
    await Audit(app.pipeline.s.store).record(
        actor=who.handle,
        action="first-owner",
        target=record.handle,
        where=who.where,
        details={"user_id": record.id, "to": "owner"},
    )
    print(
        f"No owner yet: {record.handle} (you, at this terminal) is now the owner.",
        file=sys.stderr,
        flush=True,
    )


async def follow_runs(bus: EventBus, view: LiveView) -> None:
    """Show the view's conversations' runs as they go, until cancelled."""
    keys = set(view.conversation_keys())
    runs: dict[str, RunView] = {}
    async with bus.subscribe() as events:
        async for event in events:
            if event.conversation_key in keys:
                view.show(_progress(event, runs))


def _progress(event: Event, runs: dict[str, RunView]) -> Progress:
    from bot.agent.streaming import RunView
    from bot.pipeline.live import stopped_text
    from bot.ports import Progress

    if event.type in ("run.completed", "run.failed", "run.cancelled"):
        run = runs.pop(event.run_id, None)
        stopped = event.type == "run.cancelled" and event.data.get("reason") == "stop"
        left = run.text if run is not None and stopped else ""  # a stopped run's text stays
        return Progress(event.run_id, stopped_text(left) if left.strip() else "", ended=True)
    run = runs.get(event.run_id)
    if run is None or event.type == "run.started":
        run = runs[event.run_id] = RunView()
    run.observe(event)
    return Progress(event.run_id, run.text, run.activity)
