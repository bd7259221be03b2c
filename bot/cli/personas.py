"""`switchboard personas list`: validate and list the persona files."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the command uses is imported when it runs (`bot.cli`)
    from bot.config import Secrets, Settings


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    personas = sub.add_parser("personas", parents=[common], help="persona files")
    p_sub = personas.add_subparsers(dest="personas_command", required=True, metavar="ACTION")
    p_sub.add_parser("list", parents=[common], help="validate and list personas").set_defaults(
        func=cmd_personas_list
    )


async def cmd_personas_list(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.personas import load_persona_dir

    for record, path in load_persona_dir(settings.personas.dir):
        scope = record.platform or "any platform"
        if record.server_id:
            scope += f" / server {record.server_id}"
        default = " (default)" if record.is_default else ""
        print(f"{record.name}{default}: {scope} — {path.name}")
    return 0
