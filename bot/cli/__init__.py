"""`switchboard run | chat | db … | trace … | personas … | admin … | jobs … | mcp …`.

One module per command group, each adding its subcommands with `register`.
Exit status: 0 ok, 1 runtime failure, 2 bad configuration or usage, or a
service that cannot start (`StartupError`: database unreachable or without its
schema, a bot token rejected, ...). Errors are one line on stderr, saying what
is wrong and what to do; `--debug` adds the traceback.

A command imports what it needs when it runs: the group modules import
nothing heavy at their top, and `main` loads the settings only once the
arguments are parsed, so `switchboard --version` and `--help` start no more
than the interpreter and argparse (`tests/cli/test_startup_imports.py`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from bot import __version__
from bot.cli import admin, chat, db, jobs, mcp, models, personas, run, trace
from bot.errors import BotError, ConfigError, StartupError

if TYPE_CHECKING:
    from bot.cli.common import Command

log = logging.getLogger("switchboard.cli")

GROUPS = (run, chat, db, trace, personas, admin, jobs, mcp, models)


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
    for group in GROUPS:
        group.register(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # --version and --help end here
    import asyncio
    import os

    from bot.config import Secrets, load_settings
    from bot.logs import setup_logging

    debug = getattr(args, "debug", False)
    try:
        settings = load_settings(getattr(args, "config", None))
    except ConfigError as exc:
        print(f"switchboard: config error: {exc}", file=sys.stderr)
        return 2
    secrets = Secrets.from_env()
    level = "DEBUG" if debug else getattr(args, "log_level", None) or settings.logging.level
    try:
        log_file = open_log_file(settings.logging.file)
    except OSError as exc:
        print(f"switchboard: cannot open the log file: {exc}", file=sys.stderr)
        return 2
    hidden = [  # MCP servers' ${VAR}s and the model providers' keys too
        *secrets.values(),
        *settings.mcp.secret_values(),
        *settings.llm.secret_values(os.environ),
    ]
    setup_logging(level, settings.logging.format, hidden, stream=log_file)
    func: Command = args.func
    try:
        return asyncio.run(func(args, settings, secrets))
    except KeyboardInterrupt:
        return 130
    except ConfigError as exc:
        _fail(f"config error: {exc}", debug)
        return 2
    except StartupError as exc:
        _fail(str(exc), debug)
        return 2
    except BotError as exc:
        _fail(str(exc), debug)
        return 1
    except Exception as exc:
        _fail(f"unexpected error: {type(exc).__name__}: {exc}", debug)
        return 1


def open_log_file(path: str | None) -> TextIO | None:
    """The configured log file, opened for appending (None: log to stderr)."""
    if not path:
        return None
    file = Path(path).expanduser()
    file.parent.mkdir(parents=True, exist_ok=True)
    return file.open("a", encoding="utf-8", buffering=1)


def _fail(message: str, debug: bool) -> None:
    if debug:
        log.exception("fatal")
    print(f"switchboard: {message}", file=sys.stderr)
