"""/confirm, /cancel and /pending: a human decides what the agent was not
allowed to do on its own (`bot.tools.actions`)."""

from __future__ import annotations

from datetime import datetime

from bot.commands.registry import CommandCall, CommandSpec
from bot.errors import CommandError
from bot.tools.actions import PendingActions
from bot.types import utcnow


def action_commands(actions: PendingActions) -> list[CommandSpec]:
    async def decide(call: CommandCall, confirm: bool) -> str:
        if len(call.args) != 1:
            raise CommandError("Give the code from the confirmation prompt.")
        return await actions.decide(call.args[0], call.user.id, call.user.role, confirm=confirm)

    async def confirm(call: CommandCall) -> str:
        return await decide(call, True)

    async def cancel(call: CommandCall) -> str:
        return await decide(call, False)

    async def pending(call: CommandCall) -> str:
        rows = await actions.pending_for(call.user.id)
        if not rows:
            return "You have no actions waiting for your confirmation."
        lines = ["**Waiting for your confirmation**"]
        for row in rows:
            lines.append(
                f"- `{row.code}` {row.summary} (expires in {_minutes_left(row.expires_at)}) — "
                f"`/confirm {row.code}` or `/cancel {row.code}`"
            )
        return "\n".join(lines)

    return [
        CommandSpec("confirm", "Confirm an action the agent asked you about", confirm, "CODE"),
        CommandSpec("cancel", "Cancel an action the agent asked you about", cancel, "CODE"),
        CommandSpec("pending", "Actions waiting for your confirmation", pending, private=True),
    ]


def _minutes_left(expires_at: datetime) -> str:
    minutes = max(0, round((expires_at - utcnow()).total_seconds() / 60))
    return "1 minute" if minutes == 1 else f"{minutes} minutes"
