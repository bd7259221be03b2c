"""The commands every deployment has: /help and /new. (/budget, /usage and the
admin commands are in `bot.commands.admin`; /stop in `bot.pipeline.control`.)"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bot.commands.registry import CommandCall, CommandSpec, help_text
from bot.conversations import Conversations


def core_commands(
    conversations: Conversations, specs: Callable[[], Sequence[CommandSpec]]
) -> list[CommandSpec]:
    """/help and /new."""

    async def help_(call: CommandCall) -> str:
        return help_text(specs(), call.user.role)

    async def new(call: CommandCall) -> str:
        conversation = await conversations.resolve(call.msg)
        await conversations.start_fresh(conversation.id)
        return "Started a fresh conversation: earlier messages here are forgotten."

    return [
        CommandSpec("help", "Show the commands you can use", help_, aliases=("start",)),
        CommandSpec("new", "Start a fresh conversation in this channel", new),
    ]
