"""Budget and role administration, shared by the slash commands and the
operator CLI (`switchboard admin …`). Every change is audited; refusals raise
`CommandDenied` (audited by the caller), bad input `CommandError`.

Role rules: owners come only from `[admin] owners` and cannot be changed here;
making someone an admin, or changing an admin's role, needs an owner (the CLI
operator counts as one); admins manage guests and users.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from bot.accounts.audit import Audit
from bot.accounts.budgets import Budgets, BudgetStatus, LimitMode
from bot.accounts.directory import Directory, Person
from bot.accounts.usage import UsageBook, UsageReport, UserUsage
from bot.errors import CommandDenied, CommandError
from bot.store.models import AuditEntry
from bot.types import Role

_TOKENS = re.compile(r"^(\d+(?:\.\d+)?)([km]?)$")
ASSIGNABLE = (Role.GUEST, Role.USER, Role.ADMIN)


@dataclass(frozen=True, slots=True)
class Actor:
    """Who asks: a chat user, or the operator at the command line."""

    handle: str
    role: Role
    user_id: int | None = None
    where: str | None = None


def operator(os_user: str | None = None) -> Actor:
    return Actor("cli" if not os_user else f"cli:{os_user}", Role.OWNER, None, "cli")


def parse_tokens(text: str) -> int:
    """ "200000", "200,000", "50k", "1.5m" → tokens."""
    cleaned = text.strip().lower().replace(",", "").replace("_", "")
    match = _TOKENS.match(cleaned)
    if not match:
        raise CommandError(f"{text!r} is not a token count (e.g. 50000, 50k or 1.5m)")
    value = float(match[1]) * {"": 1, "k": 1_000, "m": 1_000_000}[match[2]]
    return int(value)


class AdminOps:
    def __init__(
        self, budgets: Budgets, directory: Directory, usage: UsageBook, audit: Audit
    ) -> None:
        self.budgets = budgets
        self.directory = directory
        self.usage = usage
        self.audit = audit

    # -- reading -------------------------------------------------------------

    async def budget_text(self, person: Person, *, own: bool = False) -> str:
        status = await self.budgets.status(person.id, person.role)
        return budget_text(status, None if own else person)

    async def usage_text(self, person: Person, *, own: bool = False) -> str:
        return usage_text(await self.usage.for_user(person.id), None if own else person)

    async def report_text(self, top: int = 10) -> str:
        report = await self.usage.report(top)
        people: dict[str, str] = {}
        for line in report.top_users:
            found = await self.directory.get(int(line.key))
            people[line.key] = found.label if found else f"#{line.key} (deleted)"
        return report_text(report, people)

    async def audit_entries(self, limit: int = 50) -> Sequence[AuditEntry]:
        return await self.audit.recent(limit)

    # -- changing ------------------------------------------------------------

    async def set_budget(self, actor: Actor, person: Person, value: str) -> str:
        word = value.strip().lower()
        mode: LimitMode
        tokens: int | None = None
        if word == "unlimited":
            mode = "unlimited"
        elif word in ("default", "role"):
            mode = "role"
        else:
            mode, tokens = "fixed", parse_tokens(value)
        await self.budgets.set_limit(person.id, mode, tokens)
        await self._audit(actor, "setbudget", person, {"mode": mode, "tokens": tokens})
        status = await self.budgets.status(person.id, person.role)
        return f"Budget of {person.label} set.\n{budget_text(status, None)}"

    async def grant(self, actor: Actor, person: Person, value: str) -> str:
        tokens = parse_tokens(value)
        if tokens <= 0:
            raise CommandError("grant a positive number of tokens")
        await self.budgets.grant(person.id, tokens)
        await self._audit(actor, "grant", person, {"tokens": tokens})
        status = await self.budgets.status(person.id, person.role)
        return f"Granted {tokens:,} tokens to {person.label}.\n{budget_text(status, None)}"

    async def reset(self, actor: Actor, person: Person) -> str:
        await self.budgets.reset(person.id)
        await self._audit(actor, "resetbudget", person, None)
        status = await self.budgets.status(person.id, person.role)
        return f"Usage of {person.label} reset.\n{budget_text(status, None)}"

    async def set_role(self, actor: Actor, person: Person, value: str) -> str:
        try:
            role = Role(value.strip().lower())
        except ValueError:
            raise CommandError(f"{value!r} is not a role: guest, user or admin") from None
        if role is Role.OWNER:
            raise CommandError("owners are set in the config file ([admin] owners)")
        if person.role is Role.OWNER:
            raise CommandError(f"{person.label} is an owner (set in [admin] owners)")
        if role is Role.ADMIN and actor.role is not Role.OWNER:
            raise CommandDenied("Only an owner can make admins.")
        if person.role is Role.ADMIN and actor.role is not Role.OWNER:
            raise CommandDenied("Only an owner can change an admin's role.")
        previous = person.role
        await self.directory.set_role(person.id, role)
        await self._audit(actor, "role", person, {"from": previous.value, "to": role.value})
        return f"{person.label} is now {role.value} (was {previous.value})."

    async def _audit(
        self, actor: Actor, action: str, person: Person, details: dict[str, object] | None
    ) -> None:
        await self.audit.record(
            actor=actor.handle,
            actor_user_id=actor.user_id,
            action=f"/{action}",
            target=person.handle,
            where=actor.where,
            details={"user_id": person.id, **(details or {})},
        )


def budget_text(status: BudgetStatus, person: Person | None) -> str:
    head = "" if person is None else f"**{person.label}**, role {person.role.value}\n"
    if status.limit is None:
        body = f"Budget: unlimited. Used this month: {status.used:,} tokens."
    else:
        body = (
            f"Used {status.used:,} of {status.limit:,} tokens this month "
            f"({status.remaining:,} left). Resets {status.resets_at:%Y-%m-%d}."
        )
    extra = []
    if status.granted:
        extra.append(f"includes {status.granted:,} granted")
    if status.overage:
        extra.append(f"{status.overage:,} tokens over the limit")
    if person is not None:
        extra.append(
            {"role": "limit: role default", "fixed": "limit: fixed", "unlimited": "limit: none"}[
                status.limit_mode
            ]
        )
    return head + body + (f" ({'; '.join(extra)})" if extra else "")


def usage_text(usage: UserUsage, person: Person | None) -> str:
    whose = "Your usage" if person is None else f"Usage of {person.label}"
    return (
        f"{whose} in {usage.period}: {usage.tokens:,} tokens "
        f"({usage.input_tokens:,} in, {usage.output_tokens:,} out, "
        f"{usage.cache_tokens:,} cache), about ${usage.cost_usd:.4f}, "
        f"{usage.runs} run{'s' if usage.runs != 1 else ''}."
    )


def report_text(report: UsageReport, people: dict[str, str]) -> str:
    lines = [
        f"**Usage in {report.period}**: {report.total_tokens:,} tokens, "
        f"about ${report.total_cost:.4f}"
    ]
    if not report.top_users:
        lines.append("No usage yet.")
        return "\n".join(lines)
    lines.append("Top users:")
    for n, line in enumerate(report.top_users, 1):
        lines.append(
            f"{n}. {people.get(line.key, line.key)}: {line.tokens:,} tokens, "
            f"${line.cost_usd:.4f}, {line.runs} runs"
        )
    lines.append("By platform:")
    lines.extend(f"- {x.key}: {x.tokens:,} tokens, ${x.cost_usd:.4f}" for x in report.by_platform)
    lines.append("By model:")
    lines.extend(f"- {x.key}: {x.tokens:,} tokens, ${x.cost_usd:.4f}" for x in report.by_model)
    return "\n".join(lines)
