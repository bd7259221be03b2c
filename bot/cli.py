"""`switchboard run | chat | db … | trace show | personas …`.

Exit status: 0 ok, 1 startup/runtime failure, 2 bad configuration or usage.
Errors are one line on stderr; `--debug` adds the traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot import __version__, cli_admin
from bot.app import App, load_adapter
from bot.cli_trace import register as register_trace
from bot.config import Secrets, Settings, load_settings
from bot.errors import BotError, ConfigError, StartupError
from bot.logs import setup_logging
from bot.ports import Interactive

if TYPE_CHECKING:
    from bot.store import Store

log = logging.getLogger("switchboard.cli")

Command = Callable[[argparse.Namespace, Settings, Secrets], Coroutine[Any, Any, int]]


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        help="settings file (default ./config.toml, else built-in defaults)",
    )
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="debug logging and tracebacks on errors",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="switchboard", parents=[common], description="One AI agent on every chat platform."
    )
    parser.add_argument("--version", action="version", version=f"switchboard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", parents=[common], help="start every enabled platform adapter")
    run.set_defaults(func=cmd_run)

    chat = sub.add_parser("chat", parents=[common], help="chat with the agent in this terminal")
    chat.add_argument("--user", help="your console user id (default: config or $USER)")
    chat.set_defaults(func=cmd_chat)

    db = sub.add_parser("db", parents=[common], help="database schema")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    db_sub.add_parser("upgrade", parents=[common], help="apply migrations").set_defaults(
        func=cmd_db_upgrade
    )
    db_sub.add_parser(
        "check", parents=[common], help="fail if the models and migrations differ"
    ).set_defaults(func=cmd_db_check)

    register_trace(sub, common)

    personas = sub.add_parser("personas", parents=[common], help="persona files")
    p_sub = personas.add_subparsers(dest="personas_command", required=True, metavar="ACTION")
    p_sub.add_parser("list", parents=[common], help="validate and list personas").set_defaults(
        func=cmd_personas_list
    )
    cli_admin.register(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    debug = getattr(args, "debug", False)
    try:
        settings = load_settings(getattr(args, "config", None))
    except ConfigError as exc:
        print(f"switchboard: config error: {exc}", file=sys.stderr)
        return 2
    secrets = Secrets.from_env()
    setup_logging(
        "DEBUG" if debug else settings.logging.level, settings.logging.format, secrets.values()
    )
    func: Command = args.func
    try:
        return asyncio.run(func(args, settings, secrets))
    except KeyboardInterrupt:
        return 130
    except ConfigError as exc:
        _fail(f"config error: {exc}", debug)
        return 2
    except BotError as exc:
        _fail(str(exc), debug)
        return 1
    except Exception as exc:
        _fail(f"unexpected error: {type(exc).__name__}: {exc}", debug)
        return 1


def _fail(message: str, debug: bool) -> None:
    if debug:
        log.exception("fatal")
    print(f"switchboard: {message}", file=sys.stderr)


async def cmd_run(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    platforms = settings.enabled_platforms()
    app = App(settings, secrets)
    try:
        await app.open()
        if not platforms:
            print(
                "switchboard: no chat platform is enabled ([telegram], [slack] or [discord] "
                "enabled = true in config).",
                file=sys.stderr,
            )
            if sys.stdin.isatty():
                return await _chat(app, settings, None)
            return 1
        await app.start_adapters(platforms)
        await app.start_scheduler()
        await _wait_for_stop()
        return 0
    finally:
        await app.close()


async def cmd_chat(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    app = App(settings, secrets)
    try:
        await app.open()
        return await _chat(app, settings, args.user)
    finally:
        await app.close()


async def _chat(app: App, settings: Settings, user: str | None) -> int:
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
    await console.run()
    return 0


async def _wait_for_stop() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutdown requested; draining")


async def cmd_db_upgrade(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.store.migrate import current

    store = _store(settings)
    try:
        await store.upgrade()
        print(f"database at revision {await current(store.engine)}")
    finally:
        await store.dispose()
    return 0


async def cmd_db_check(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.store.migrate import drift

    store = _store(settings)
    try:
        await store.upgrade()
        diff = await drift(store.engine)
    finally:
        await store.dispose()
    if diff:
        print("models and migrations differ:", file=sys.stderr)
        for item in diff:
            print(f"  {item}", file=sys.stderr)
        return 1
    print("models and migrations match")
    return 0


async def cmd_personas_list(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.personas import load_persona_dir

    for record, path in load_persona_dir(settings.personas.dir):
        scope = record.platform or "any platform"
        if record.server_id:
            scope += f" / server {record.server_id}"
        default = " (default)" if record.is_default else ""
        print(f"{record.name}{default}: {scope} — {path.name}")
    return 0


def _store(settings: Settings) -> Store:
    from bot.store import Store

    db = settings.database
    return Store(db.url, busy_timeout_ms=db.busy_timeout_ms, schema=db.schema_name)
