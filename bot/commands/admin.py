"""Slash commands for budgets, usage, roles, personas and account linking.

`@user` arguments accept a platform mention, `platform:platform_user_id` or
the internal user id (see `bot.accounts.directory`). Commands whose minimum role is
guest but that need more for some uses (`/budget @user`, `/usage all`,
`/persona NAME`) raise `CommandDenied`, which `Commands.dispatch` audits.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.accounts.directory import Person, UnknownUser
from bot.accounts.linking import LinkError, Linking
from bot.accounts.ops import Actor, AdminOps
from bot.commands.registry import CommandCall, CommandResult, CommandSpec
from bot.conversations import Conversations
from bot.errors import CommandDenied, CommandError
from bot.personas import PersonaBook
from bot.store import Store
from bot.store.models import Conversation
from bot.types import Role


@dataclass(frozen=True, slots=True)
class AdminServices:
    store: Store
    ops: AdminOps
    conversations: Conversations
    personas: PersonaBook
    linking: Linking


def actor_of(call: CommandCall) -> Actor:
    return Actor(call.user.handle, call.user.role, call.user.id, call.msg.conversation_key)


def require(call: CommandCall, role: Role, what: str) -> None:
    if not call.user.role.at_least(role):
        raise denied(call, role, what)


def denied(call: CommandCall, role: Role, what: str) -> CommandDenied:
    return CommandDenied(f"{what} needs the {role.value} role (you are {call.user.role.value}).")


async def target(
    services: AdminServices, call: CommandCall, trailing: int = 0
) -> tuple[Person, tuple[str, ...]]:
    """The `@user` of a command and the arguments after it.

    A Telegram text mention is plain text (the person's name, maybe several
    words) with the id in `mentioned_user_ids`: when the first argument is not
    a recognisable target but the message mentions someone, that person is the
    target and the last `trailing` arguments are the rest."""
    args = call.args
    if not args and not call.msg.mentioned_user_ids:
        raise CommandError("Say who: a mention, platform:user_id or the internal user id.")
    directory = services.ops.directory
    msg = call.msg
    try:
        if args:
            try:
                person = await directory.lookup(
                    args[0], platform=msg.platform, mentioned=msg.mentioned_user_ids
                )
                return person, args[1:]
            except UnknownUser:
                if not msg.mentioned_user_ids or _explicit(args[0]):
                    raise
        first = msg.mentioned_user_ids[0]
        person = await directory.lookup(
            f"<@{first}>", platform=msg.platform, mentioned=msg.mentioned_user_ids
        )
    except UnknownUser as exc:
        raise CommandError(f"{exc}.") from None
    rest = args[len(args) - trailing :] if trailing and len(args) > trailing else ()
    return person, tuple(rest)


async def own_or_admin(services: AdminServices, call: CommandCall, what: str) -> Person | None:
    """Whose budget or usage `/budget [@user]` and `/usage [@user]` show: None
    for the caller's own (no target, or one naming the caller: anyone may see
    their own), else the person named, which needs the admin role (`what` is
    refused otherwise, before any lookup could create an account)."""
    msg = call.msg
    if not call.args and not msg.mentioned_user_ids:
        return None
    if call.user.role.at_least(Role.ADMIN):
        person, _ = await target(services, call)
        return None if person.id == call.user.id else person
    if await _names_caller(services, call):
        return None
    raise denied(call, Role.ADMIN, what)


async def _names_caller(services: AdminServices, call: CommandCall) -> bool:
    """Whether the `@user` of the command is the caller (through any of their
    linked accounts), resolved without creating anyone."""
    msg = call.msg
    if call.args:
        try:
            person = await services.ops.directory.lookup(call.args[0], platform=msg.platform)
            return person.id == call.user.id
        except UnknownUser:
            if not msg.mentioned_user_ids or _explicit(call.args[0]):
                return False
    return msg.mentioned_user_ids[:1] == (msg.platform_user_id,)


async def caller(services: AdminServices, call: CommandCall) -> Person:
    """The caller as a `Person`, with the role they were resolved with."""
    me = await services.ops.directory.get(call.user.id)
    assert me is not None
    return _with_role(me, call)


def _explicit(token: str) -> bool:
    return token.startswith(("<@", "@", "#")) or ":" in token or token.isdigit()


def admin_commands(services: AdminServices) -> list[CommandSpec]:
    ops = services.ops

    async def budget(call: CommandCall) -> CommandResult:
        person = await own_or_admin(services, call, "/budget for someone else")
        if person is None:
            me = await caller(services, call)
            return CommandResult(await ops.budget_text(me, own=True), True)
        return CommandResult(await ops.budget_text(person), True)

    async def usage(call: CommandCall) -> CommandResult:
        if call.args[:1] == ("all",):
            require(call, Role.ADMIN, "/usage all")
            return CommandResult(await ops.report_text(), True)
        person = await own_or_admin(services, call, "/usage for someone else")
        if person is None:
            me = await caller(services, call)
            return CommandResult(await ops.usage_text(me, own=True), True)
        return CommandResult(await ops.usage_text(person), True)

    async def setbudget(call: CommandCall) -> str:
        person, rest = await target(services, call, trailing=1)
        if len(rest) != 1:
            raise CommandError("Give one limit: a token count, unlimited or default.")
        return await ops.set_budget(actor_of(call), person, rest[0])

    async def grant(call: CommandCall) -> str:
        person, rest = await target(services, call, trailing=1)
        if len(rest) != 1:
            raise CommandError("Give the number of tokens to grant.")
        return await ops.grant(actor_of(call), person, rest[0])

    async def resetbudget(call: CommandCall) -> str:
        person, _ = await target(services, call)
        return await ops.reset(actor_of(call), person)

    async def role(call: CommandCall) -> str:
        person, rest = await target(services, call, trailing=1)
        if len(rest) != 1:
            raise CommandError("Give the new role: guest, user or admin.")
        return await ops.set_role(actor_of(call), person, rest[0])

    async def persona(call: CommandCall) -> str:
        return await _persona(services, call)

    async def link(call: CommandCall) -> CommandResult:
        if not call.args:
            code, expires = await services.linking.issue(call.user)
            return CommandResult(
                f"Your link code is `{code}`. Within 10 minutes (until {expires:%H:%M} UTC), "
                f"send `/link {code}` from your account on another platform: both accounts "
                "then share one budget and role. Don't share the code with anyone else.",
                private=True,
            )
        try:
            linked = await services.linking.redeem(
                call.user, "".join(call.args), call.msg.conversation_key
            )
        except LinkError as exc:
            raise CommandError(str(exc)) from None
        person = await ops.directory.get(linked.user_id)
        assert person is not None
        return CommandResult(
            f"Linked: {person.label} is one user now, role {linked.role.value}, "
            "with one shared budget.",
            private=True,
        )

    return [
        CommandSpec(
            "budget",
            "Show your token budget (admins: anyone's)",
            budget,
            usage="[@user]",
            private=True,
        ),
        CommandSpec(
            "usage",
            "Your tokens, cost and runs this month (admins: all, or anyone's)",
            usage,
            usage="[all | @user]",
            private=True,
        ),
        CommandSpec(
            "persona",
            "Show the persona here, or set it for this channel (admins)",
            persona,
            usage="[name | default]",
        ),
        CommandSpec(
            "link",
            "Link your accounts on several platforms (one budget and role)",
            link,
            usage="[code]",
            private=True,
        ),
        CommandSpec(
            "setbudget",
            "Set someone's monthly token limit",
            setbudget,
            usage="@user <tokens | unlimited | default>",
            min_role=Role.ADMIN,
        ),
        CommandSpec(
            "grant",
            "Give someone extra tokens for this month",
            grant,
            usage="@user <tokens>",
            min_role=Role.ADMIN,
        ),
        CommandSpec(
            "resetbudget",
            "Reset someone's usage this month to zero",
            resetbudget,
            usage="@user",
            min_role=Role.ADMIN,
        ),
        CommandSpec(
            "role",
            "Set someone's role (only owners make admins)",
            role,
            usage="@user <guest | user | admin>",
            min_role=Role.ADMIN,
        ),
    ]


def _with_role(person: Person, call: CommandCall) -> Person:
    """The caller with the role they were resolved with (owners from config)."""
    return Person(person.id, call.user.role, person.display_name, person.accounts)


async def _persona(services: AdminServices, call: CommandCall) -> str:
    book = services.personas
    conversation = await services.conversations.resolve(call.msg)
    if not call.args:
        async with services.store.read() as session:
            row = await session.get(Conversation, conversation.id)
            chosen = row.persona_name if row else None
        current = book.resolve(conversation.platform, conversation.server_id, chosen)
        how = "chosen for this channel" if chosen == current.name else "the default here"
        about = f" — {current.description}" if current.description else ""
        others = ", ".join(book.names())
        return f"Persona: **{current.name}**{about} ({how}).\nAvailable: {others}."
    require(call, Role.ADMIN, "Setting the persona")
    name = call.args[0]
    if name.lower() in ("default", "reset", "none"):
        await services.conversations.set_persona(conversation.id, None)
        chosen_name = None
    elif book.get(name) is None:
        raise CommandError(f"No persona named {name!r}. Available: {', '.join(book.names())}.")
    else:
        await services.conversations.set_persona(conversation.id, name)
        chosen_name = name
    await services.ops.audit.record(
        actor=call.user.handle,
        actor_user_id=call.user.id,
        action="/persona",
        target=conversation.key,
        where=conversation.key,
        details={"persona": chosen_name},
    )
    if chosen_name is None:
        current = book.resolve(conversation.platform, conversation.server_id, None)
        return f"This channel uses the default persona again: **{current.name}**."
    return f"This channel now uses the persona **{chosen_name}**."
