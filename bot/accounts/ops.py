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
from bot.accounts.economy import economy_model
from bot.accounts.usage import UsageBook, UsageReport, UserUsage
from bot.errors import CommandDenied, CommandError
from bot.formatting.text import columns, counted, plural
from bot.store.models import AuditEntry
from bot.types import Role

_TOKENS = re.compile(r"^(\d+(?:\.\d+)?)([km]?)$")
ASSIGNABLE = (Role.GUEST, Role.USER, Role.ADMIN)
MAX_TOKENS = 10**15
"""More than any budget could mean (and beyond what a BIGINT column holds safely)."""


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
    if value > MAX_TOKENS:
        raise CommandError(f"{text!r} is more tokens than any budget needs")
    return int(value)


class AdminOps:
    def __init__(
        self,
        budgets: Budgets,
        directory: Directory,
        usage: UsageBook,
        audit: Audit,
        *,
        plain: bool = False,
    ) -> None:
        self.budgets = budgets
        self.directory = directory
        self.usage = usage
        self.audit = audit
        self.plain = plain
        """Plain aligned text for a terminal (the CLI) instead of Markdown for chat."""

    # -- reading -------------------------------------------------------------

    async def budget_text(self, person: Person, *, own: bool = False) -> str:
        status = await self.budgets.status(person.id, person.role)
        return budget_text(status, None if own else person, plain=self.plain)

    async def usage_text(self, person: Person, *, own: bool = False) -> str:
        text = usage_text(await self.usage.for_user(person.id), None if own else person)
        status = await self.budgets.status(person.id, person.role)
        economy = economy_model(self.budgets.settings, status)
        if economy is None:
            return text
        share = self.budgets.settings.economy_below
        who = "you are" if own else "they are"
        return (
            f"{text}\nWith less than {share:.0%} of the allowance left, {who} answered by "
            f"the economy model ({economy}) until it renews on {status.resets_at:%Y-%m-%d}."
        )

    async def report_text(self, top: int = 10) -> str:
        report = await self.usage.report(top)
        people: dict[str, str] = {}
        for line in report.top_users:
            found = await self.directory.get(int(line.key))
            people[line.key] = found.label if found else f"#{line.key} (deleted)"
        return report_text(report, people, plain=self.plain)

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
        return f"Budget of {person.label} set.\n{self._budget(status)}"

    async def grant(self, actor: Actor, person: Person, value: str) -> str:
        tokens = parse_tokens(value)
        if tokens <= 0:
            raise CommandError("grant a positive number of tokens")
        await self.budgets.grant(person.id, tokens)
        await self._audit(actor, "grant", person, {"tokens": tokens})
        status = await self.budgets.status(person.id, person.role)
        granted = plural(tokens, "token")
        return f"Granted {granted} to {person.label}.\n{self._budget(status)}"

    async def reset(self, actor: Actor, person: Person) -> str:
        await self.budgets.reset(person.id)
        await self._audit(actor, "resetbudget", person, None)
        status = await self.budgets.status(person.id, person.role)
        return f"Usage of {person.label} reset.\n{self._budget(status)}"

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

    def _budget(self, status: BudgetStatus) -> str:
        return budget_text(status, None, plain=self.plain)

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


_MODES = {"role": "role default", "fixed": "fixed", "unlimited": "none"}


def budget_text(status: BudgetStatus, person: Person | None, *, plain: bool = False) -> str:
    """A budget for chat (Markdown, `person` None: the reader's own) or, `plain`,
    as aligned lines for a terminal. An unlimited budget shows what was used,
    never a limit, what is left or an overage."""
    if plain:
        return "\n".join(columns(_budget_rows(status, person)))
    head = "" if person is None else f"**{person.label}**, role {person.role.value}\n"
    extra = []
    if status.limit is None:
        body = f"Budget: unlimited. Used this month: {plural(_consumed(status), 'token')}."
    else:
        body = (
            f"Used {status.used:,} of {plural(status.limit, 'token')} this month "
            f"({status.remaining:,} left). Resets {status.resets_at:%Y-%m-%d}."
        )
        if status.granted:
            extra.append(f"includes {status.granted:,} granted")
        if status.overage:
            extra.append(f"{plural(status.overage, 'token')} over the limit")
    if person is not None:
        extra.append(f"limit: {_MODES.get(status.limit_mode, status.limit_mode)}")
    return head + body + (f" ({'; '.join(extra)})" if extra else "")


def _budget_rows(status: BudgetStatus, person: Person | None) -> list[list[str]]:
    rows = []
    if person is not None:
        rows += [["user", person.label], ["role", person.role.value]]
    how = {"role": "role default", "fixed": "fixed", "unlimited": "set for this user"}.get(
        status.limit_mode, status.limit_mode
    )
    if status.limit is None:
        rows.append(["limit", f"unlimited ({how})"])
        rows.append(["used", f"{plural(_consumed(status), 'token')} this month"])
        return rows
    granted = f" + {status.granted:,} granted" if status.granted else ""
    rows.append(["limit", f"{plural(status.limit, 'token')} a month ({how}{granted})"])
    rows.append(["used", f"{plural(status.used, 'token')} this month"])
    rows.append(["left", plural(status.remaining or 0, "token")])
    if status.overage:
        rows.append(["over", f"{plural(status.overage, 'token')} beyond the limit"])
    rows.append(["resets", f"{status.resets_at:%Y-%m-%d}"])
    return rows


def _consumed(status: BudgetStatus) -> int:
    """Everything spent this month: what counted against a limit and beyond it."""
    return status.used + status.overage


def usage_text(usage: UserUsage, person: Person | None) -> str:
    """One line, the same in chat and in a terminal (no Markdown in it)."""
    whose = "Your usage" if person is None else f"Usage of {person.label}"
    return (
        f"{whose} in {usage.period}: {plural(usage.tokens, 'token')} "
        f"({usage.input_tokens:,} in, {usage.output_tokens:,} out, "
        f"{usage.cache_tokens:,} cache), about ${usage.cost_usd:.4f}, "
        f"{plural(usage.runs, 'run')}{_media_usage(usage)}."
    )


def _media_usage(usage: UserUsage) -> str:
    """What reading files cost beyond tokens, when there was any."""
    parts = []
    if usage.audio_seconds:
        minutes, seconds = divmod(round(usage.audio_seconds), 60)
        parts.append(f"{minutes}:{seconds:02d} of audio transcribed")
    if usage.document_chars:
        parts.append(f"{usage.document_chars:,} characters of documents read")
    return "; " + ", ".join(parts) if parts else ""


def report_text(report: UsageReport, people: dict[str, str], *, plain: bool = False) -> str:
    """Usage this month of everyone: totals, top users, platforms and models;
    Markdown for chat, aligned columns (`plain`) for a terminal."""
    total = f"{plural(report.total_tokens, 'token')}, about ${report.total_cost:.4f}"
    title = f"Usage in {report.period}"
    head = f"{title}: {total}" if plain else f"**{title}**: {total}"
    if not report.top_users:
        return f"{head}\nNo usage yet."
    if plain:
        return "\n".join([head, *_plain_report(report, people)])
    lines = [head, "Top users:"]
    for n, line in enumerate(report.top_users, 1):
        lines.append(
            f"{n}. {people.get(line.key, line.key)}: {plural(line.tokens, 'token')}, "
            f"${line.cost_usd:.4f}, {plural(line.runs, 'run')}"
        )
    lines.append("By platform:")
    lines.extend(
        f"- {x.key}: {plural(x.tokens, 'token')}, ${x.cost_usd:.4f}" for x in report.by_platform
    )
    lines.append("By model:")
    lines.extend(
        f"- {x.key}: {plural(x.tokens, 'token')}, ${x.cost_usd:.4f}" for x in report.by_model
    )
    return "\n".join(lines)


def _plain_report(report: UsageReport, people: dict[str, str]) -> list[str]:
    top = report.top_users
    tokens = counted([line.tokens for line in top], "token")
    runs = counted([line.runs for line in top], "run")
    users = [
        [
            f"{n}.",
            people.get(line.key, line.key),
            tokens[n - 1],
            f"${line.cost_usd:.4f}",
            runs[n - 1],
        ]
        for n, line in enumerate(top, 1)
    ]
    lines = ["", "Top users", *_indent(columns(users, ">"))]
    for title, group in (("By platform", report.by_platform), ("By model", report.by_model)):
        amounts = counted([x.tokens for x in group], "token")
        rows = [
            [x.key, amount, f"${x.cost_usd:.4f}"] for x, amount in zip(group, amounts, strict=True)
        ]
        lines += ["", title, *_indent(columns(rows))]
    return lines


def _indent(lines: list[str]) -> list[str]:
    return [f"  {line}" for line in lines]
