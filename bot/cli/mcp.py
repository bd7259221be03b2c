"""`switchboard mcp list` and `switchboard mcp call SERVER TOOL '{json}'`.

Both connect to the configured servers themselves (a running service is not
needed, nor asked): `list` prints each server's transport, whether it is up
or down, the tools it offers (the names the model sees, their effect and
description) and what it left out, or the error that kept it down; it exits 1
when a server is down. `call` tries one tool by hand (the server's own name or
the model's) and prints the result as the model would get it; a result the
server flags as an error is printed on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

from bot.errors import CommandError, ToolFailed

if TYPE_CHECKING:  # imported when the command runs (`bot.cli`: --version loads no config)
    from bot.config import McpServerSettings, Secrets, Settings


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    mcp = sub.add_parser("mcp", parents=[common], help="MCP servers ([mcp] in config)")
    actions = mcp.add_subparsers(dest="mcp_command", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list", parents=[common], help="connect to each server and show what it offers"
    )
    listing.add_argument("server", nargs="?", help="only this server")
    listing.set_defaults(func=cmd_mcp_list)
    call = actions.add_parser("call", parents=[common], help="call one tool by hand")
    call.add_argument("server", help="the server's name in [mcp.servers]")
    call.add_argument("tool", help="the tool (the server's name for it, or mcp__SERVER__TOOL)")
    call.add_argument("arguments", nargs="?", default="{}", help="a JSON object (default {})")
    call.set_defaults(func=cmd_mcp_call)


def _server(settings: Settings, name: str) -> McpServerSettings:
    servers = settings.mcp.servers
    if name not in servers:
        known = ", ".join(servers) or "none is configured"
        raise CommandError(f"no MCP server named {name!r} ({known})")
    return servers[name]


async def cmd_mcp_list(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.formatting.text import columns, plural
    from bot.mcp.probe import probe

    names = [args.server] if args.server else list(settings.mcp.servers)
    if not names:
        print("No MCP servers are configured ([mcp.servers.NAME] or [mcp] config_file).")
        return 0
    configs = [(name, _server(settings, name)) for name in names]
    found = await asyncio.gather(*(probe(name, config) for name, config in configs))
    down = 0
    for result in found:
        if result.state == "up":
            offered = plural(len(result.offered), "tool")
            print(f"{result.name} ({result.transport}): up, {offered} offered")
            rows = [[tool.name, tool.effect, _short(tool.description)] for tool in result.offered]
            for line in columns(rows):
                print(f"  {line}")
            for problem in result.left_out:
                print(f"  {problem}")
        else:
            down += 1
            print(f"{result.name} ({result.transport}): down, {result.error}")
    return 1 if down else 0


async def cmd_mcp_call(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.mcp.probe import call

    config = _server(settings, args.server)
    try:
        arguments = json.loads(args.arguments)
    except json.JSONDecodeError as exc:
        raise CommandError(f"the arguments are not JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise CommandError('the arguments must be a JSON object, e.g. \'{"title": "x"}\'')
    try:
        output = await call(args.server, config, args.tool, arguments)
    except ToolFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(output.text)
    return 0


def _short(text: str, width: int = 70) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"
