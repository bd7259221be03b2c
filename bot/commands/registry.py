"""Slash commands: one spec each (name, minimum role, usage, help). Commands
never reach the LLM and are not charged. Every platform exposes the same specs."""

from __future__ import annotations

import logging
import shlex
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from bot.accounts.audit import Audit
from bot.accounts.identity import UserRecord
from bot.errors import CommandDenied, CommandError
from bot.ports import CommandInfo
from bot.types import IncomingMessage, Role

log = logging.getLogger("switchboard.commands")


@dataclass(frozen=True, slots=True)
class CommandCall:
    msg: IncomingMessage
    user: UserRecord
    name: str
    args: tuple[str, ...]
    raw_args: str


@dataclass(frozen=True, slots=True)
class CommandResult:
    text: str
    private: bool = False


Handler = Callable[[CommandCall], Awaitable[CommandResult | str]]


@dataclass(frozen=True, slots=True)
class CommandSpec:
    name: str
    help: str
    handler: Handler
    usage: str = ""
    min_role: Role = Role.GUEST
    private: bool = False
    """Answer only the requester where the platform allows (ephemeral)."""
    aliases: tuple[str, ...] = ()

    def info(self) -> CommandInfo:
        return CommandInfo(self.name, self.help, self.usage, self.min_role)


def parse_command(text: str) -> tuple[str, str] | None:
    """ "/name args" → ("name", "args"); a `/name@bot` suffix is dropped."""
    if not text.startswith("/") or len(text) < 2:
        return None
    head, _, rest = text[1:].partition(" ")
    name = head.split("@", 1)[0].strip().lower()
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        return None
    return name, rest.strip()


class Commands:
    def __init__(self, specs: Iterable[CommandSpec], audit: Audit) -> None:
        self._specs: dict[str, CommandSpec] = {}
        self._audit = audit
        for spec in specs:
            self.add(spec)

    def add(self, spec: CommandSpec) -> None:
        for name in (spec.name, *spec.aliases):
            if name in self._specs:
                raise ValueError(f"command /{name} defined twice")
            self._specs[name] = spec

    def specs(self) -> list[CommandSpec]:
        seen: dict[str, CommandSpec] = {}
        for spec in self._specs.values():
            seen.setdefault(spec.name, spec)
        return list(seen.values())

    def infos(self) -> list[CommandInfo]:
        return [spec.info() for spec in self.specs()]

    def is_command(self, text: str) -> bool:
        return parse_command(text) is not None

    async def dispatch(self, msg: IncomingMessage, user: UserRecord) -> CommandResult:
        parsed = parse_command(msg.text)
        if parsed is None:
            raise CommandError("not a command")
        name, raw_args = parsed
        spec = self._specs.get(name)
        if spec is None:
            return CommandResult(f"Unknown command /{name}. Try /help.", private=True)
        if not user.role.at_least(spec.min_role):
            return await self._deny(
                msg,
                user,
                spec,
                raw_args,
                f"/{spec.name} needs the {spec.min_role.value} role (you are {user.role.value}).",
            )
        try:
            args = tuple(shlex.split(raw_args))
        except ValueError:
            args = tuple(raw_args.split())
        call = CommandCall(msg, user, spec.name, args, raw_args)
        try:
            result = await spec.handler(call)
        except CommandDenied as exc:
            return await self._deny(msg, user, spec, raw_args, str(exc))
        except CommandError as exc:
            usage = f"\nUsage: /{spec.name} {spec.usage}".rstrip() if spec.usage else ""
            return CommandResult(f"{exc}{usage}", private=True)
        if isinstance(result, str):
            result = CommandResult(result, private=spec.private)
        return result

    async def _deny(
        self, msg: IncomingMessage, user: UserRecord, spec: CommandSpec, raw_args: str, text: str
    ) -> CommandResult:
        """Refuse (a role too low for the command, or for this use of it), audited."""
        await self._audit.record(
            actor=user.handle,
            actor_user_id=user.id,
            action=f"/{spec.name}",
            outcome="denied",
            where=msg.conversation_key,
            details={"args": raw_args, "role": user.role.value, "reason": text},
        )
        return CommandResult(text, private=True)


def help_text(specs: Sequence[CommandSpec], role: Role) -> str:
    lines = ["**Commands**"]
    for spec in specs:
        if role.at_least(spec.min_role):
            usage = f" {spec.usage}" if spec.usage else ""
            lines.append(f"- `/{spec.name}{usage}` — {spec.help}")
    return "\n".join(lines)
