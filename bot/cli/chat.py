"""`switchboard chat`: the terminal chat with the agent."""

from __future__ import annotations

import argparse
from typing import Any

from bot.app import App, load_adapter
from bot.config import Secrets, Settings
from bot.errors import StartupError
from bot.ports import Interactive


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    chat = sub.add_parser("chat", parents=[common], help="chat with the agent in this terminal")
    chat.add_argument("--user", help="your console user id (default: config or $USER)")
    chat.set_defaults(func=cmd_chat)


async def cmd_chat(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    app = App(settings, secrets)
    try:
        await app.open()
        return await chat_in_terminal(app, settings, args.user)
    finally:
        await app.close()


async def chat_in_terminal(app: App, settings: Settings, user: str | None) -> int:
    """Attach the console adapter to an opened app and chat until the user is done."""
    if user:
        settings = settings.model_copy(
            update={"console": settings.console.model_copy(update={"user": user})}
        )
    console = load_adapter("console", settings, app.secrets)
    if not isinstance(console, Interactive):
        raise StartupError("the console adapter cannot run interactively")
    app.attach(console)
    await console.start(app.pipeline)
    await app.start_scheduler([console.platform])
    app.start_recovery([console.platform])
    await console.run()
    return 0
