"""Consequential actions need the right human.

A tool with an `external` effect (schedules today; anything later that sends,
deletes or spends) runs at once only for a direct request: the run's context
holds nothing untrusted (`ToolContext.untrusted` is empty: no other person's
message, no tool output from elsewhere, no recalled memory, not a wakeup).
Otherwise the call is held as a pending action: nothing happens, the model is
told that the requester has been asked, and the requester gets a prompt with
Confirm / Cancel buttons (and `/confirm CODE`, `/cancel CODE` to type). Only
the requester or an admin may decide; an action not decided within
`[agent] confirm_minutes` expires. Every step is audited.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import update
from sqlmodel import col, select

from bot.accounts.audit import Audit
from bot.ports import Effect, Tool, ToolContext
from bot.store import Store
from bot.store.actions import PendingAction
from bot.store.models import TraceSpan
from bot.types import Button, ChatType, Role, utcnow

log = logging.getLogger("switchboard.actions")

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 6
SOURCE_NAMES = {
    "history": "other people's messages or earlier tool output in this conversation",
    "memory": "recalled memories",
    "wakeup": "a scheduled wakeup",
    "tool_result": "tool output",
    "others": "another person's message",
}


def effect_of(tool: Tool) -> Effect:
    effect: Effect = getattr(tool, "effect", "external")
    return effect


def output_trusted(tool: Tool) -> bool:
    """Whether a tool's result is text we generate (not content from elsewhere)."""
    return bool(getattr(tool, "trusted_output", False))


def note_held(tool: Tool) -> None:
    """Tell a tool that counts its own calls (an MCP tool, per server) that one
    was held for confirmation."""
    held: Callable[[], None] | None = getattr(tool, "held", None)
    if held is not None:
        held()


def describe_call(tool: Tool, args: Mapping[str, Any]) -> str:
    describe: Callable[[Mapping[str, Any]], str] | None = getattr(tool, "describe", None)
    if describe is not None:
        try:
            return describe(args)
        except Exception:  # a description must never break the hold
            log.exception("actions.describe_failed tool=%s", tool.name)
    shown = json.dumps(dict(args), ensure_ascii=False)
    return f"Run {tool.name} with {shown[:300]}"


@dataclass(frozen=True, slots=True)
class Held:
    """A call held for confirmation, as the run reports it."""

    code: str
    summary: str
    user_id: int
    conversation_key: str
    minutes: int

    @property
    def prompt(self) -> str:
        return (
            f"**Confirm?** {self.summary}\n"
            f"Confirm with `/confirm {self.code}` or cancel with `/cancel {self.code}` "
            f"(expires in {self.minutes} minutes)."
        )

    @property
    def buttons(self) -> tuple[Button, ...]:
        return (
            Button("Confirm", f"/confirm {self.code}"),
            Button("Cancel", f"/cancel {self.code}"),
        )


class PendingActions:
    def __init__(
        self,
        store: Store,
        audit: Audit,
        lookup: Callable[[str], Tool | None],
        *,
        expiry: timedelta = timedelta(minutes=10),
    ) -> None:
        self._store = store
        self._audit = audit
        self._lookup = lookup
        self._expiry = expiry
        self._held: dict[str, list[Held]] = {}

    # -- during a run ---------------------------------------------------------

    def needs_confirmation(self, tool: Tool, ctx: ToolContext) -> bool:
        return effect_of(tool) == "external" and bool(ctx.untrusted)

    async def hold(self, tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Store the call as pending; returns the tool result the model gets."""
        summary = describe_call(tool, args)
        sources = ",".join(sorted(ctx.untrusted.sources))
        code = await self._insert(tool, args, ctx, summary, sources)
        minutes = max(1, round(self._expiry.total_seconds() / 60))
        held = Held(code, summary, ctx.user_id, ctx.conversation_key, minutes)
        self._held.setdefault(ctx.run_id, []).append(held)
        log.warning(
            "action.pending code=%s tool=%s user=%s run=%s conversation=%s because=%s",
            code,
            tool.name,
            ctx.user_id,
            ctx.run_id,
            ctx.conversation_key,
            sources,
        )
        await self._audit.record(
            actor=f"user:{ctx.user_id}",
            actor_user_id=ctx.user_id,
            action=f"action:{tool.name}",
            outcome="pending",
            target=code,
            where=ctx.conversation_key,
            details={"summary": summary, "because": sources, "run": ctx.run_id},
        )
        why = ", ".join(SOURCE_NAMES.get(s, s) for s in sorted(ctx.untrusted.sources))
        return (
            f"Not done yet: this needs the user's confirmation first (code {code}, expires in "
            f"{minutes} minutes), because this turn's context holds text that is not the "
            f"user's own request ({why}). They have been shown a Confirm / Cancel prompt; "
            f"tell them in one sentence what you proposed. Do not call {tool.name} again "
            "for it."
        )

    def take_held(self, run_id: str) -> list[Held]:
        """The calls a run held (once; the runner posts their prompts)."""
        return self._held.pop(run_id, [])

    async def _insert(
        self, tool: Tool, args: Mapping[str, Any], ctx: ToolContext, summary: str, sources: str
    ) -> str:
        for _ in range(5):
            code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
            async with self._store.write() as session:
                exists = (
                    await session.exec(select(PendingAction.id).where(PendingAction.code == code))
                ).first()
                if exists is not None:
                    continue
                session.add(
                    PendingAction(
                        code=code,
                        user_id=ctx.user_id,
                        role=ctx.role.value,
                        conversation_id=ctx.conversation_id,
                        conversation_key=ctx.conversation_key,
                        platform=ctx.platform,
                        chat_type=ctx.chat_type,
                        run_id=ctx.run_id,
                        tool_name=tool.name,
                        args=dict(args),
                        summary=summary,
                        sources=sources,
                        expires_at=utcnow() + self._expiry,
                    )
                )
            return code
        raise RuntimeError("could not find a free confirmation code")

    # -- deciding ---------------------------------------------------------------

    async def decide(self, code: str, user_id: int, role: Role, *, confirm: bool) -> str:
        """/confirm or /cancel by `user_id`: the text to answer them with."""
        code = code.strip().upper()
        async with self._store.read() as session:
            row = (
                await session.exec(select(PendingAction).where(PendingAction.code == code))
            ).first()
        if row is None:
            return f"There is no pending action with code {code}."
        if row.user_id != user_id and not role.at_least(Role.ADMIN):
            await self._record(row, user_id, "denied")
            return "Only the person who asked for this (or an admin) can decide it."
        if row.status == "pending" and row.expires_at <= utcnow():
            await self.expire()
        status = "confirmed" if confirm else "cancelled"
        taken = await self._settle(code, status, user_id)
        if taken is None:
            current = await self._status(code)
            return f"That action was already {current}; nothing was done."
        if not confirm:
            await self._record(taken, user_id, "cancelled")
            return f"Cancelled: {taken.summary}"
        return await self._run(taken, user_id)

    async def _run(self, row: PendingAction, user_id: int) -> str:
        tool = self._lookup(row.tool_name)
        if tool is None:
            await self._finish(row, f"the tool {row.tool_name} is no longer available", "failed")
            return f"I can't do that any more: the tool {row.tool_name} is no longer available."
        ctx = ToolContext(
            user_id=row.user_id,
            role=Role(row.role),
            conversation_id=row.conversation_id,
            conversation_key=row.conversation_key,
            platform=row.platform,
            run_id=row.run_id,
            chat_type=_chat_type(row.chat_type),
        )
        try:
            output = str(await tool.run(row.args or {}, ctx))
        except Exception as exc:  # the tool refused (limits) or failed: say so
            await self._finish(row, str(exc)[:2000], "failed")
            await self._record(row, user_id, "failed", error=str(exc)[:300])
            return f"Confirmed, but it did not work: {exc}"
        await self._finish(row, output[:4000], "confirmed")
        await self._record(row, user_id, "confirmed")
        return f"Confirmed: {row.summary}\n{output}"

    async def pending_for(self, user_id: int) -> list[PendingAction]:
        await self.expire()
        async with self._store.read() as session:
            rows = await session.exec(
                select(PendingAction)
                .where(PendingAction.user_id == user_id, PendingAction.status == "pending")
                .order_by(col(PendingAction.id))
            )
            return list(rows.all())

    async def expire(self) -> int:
        """Mark what is past its time expired (audited); returns how many."""
        now = utcnow()
        async with self._store.write() as session:
            due = (
                await session.exec(
                    select(PendingAction).where(
                        PendingAction.status == "pending", col(PendingAction.expires_at) <= now
                    )
                )
            ).all()
            for row in due:
                row.status, row.decided_at = "expired", now
                session.add(row)
        for row in due:
            log.info("action.expired code=%s tool=%s user=%s", row.code, row.tool_name, row.user_id)
            await self._record(row, None, "expired")
        return len(due)

    async def _settle(self, code: str, status: str, user_id: int) -> PendingAction | None:
        """pending → status, once (a second press finds it decided)."""
        async with self._store.write() as session:
            result = await session.exec(
                update(PendingAction)
                .where(
                    col(PendingAction.code) == code,
                    col(PendingAction.status) == "pending",
                    col(PendingAction.expires_at) > utcnow(),
                )
                .values(status=status, decided_by=user_id, decided_at=utcnow())
            )
            if result.rowcount != 1:
                return None
            row = (
                await session.exec(select(PendingAction).where(PendingAction.code == code))
            ).one()
            session.expunge(row)
            return row

    async def _status(self, code: str) -> str:
        async with self._store.read() as session:
            row = (
                await session.exec(select(PendingAction.status).where(PendingAction.code == code))
            ).first()
        return str(row or "gone")

    async def _finish(self, row: PendingAction, result: str, status: str) -> None:
        async with self._store.write() as session:
            await session.exec(
                update(PendingAction)
                .where(col(PendingAction.id) == row.id)
                .values(status=status, result=result)
            )

    async def _record(
        self, row: PendingAction, actor: int | None, outcome: str, **extra: str
    ) -> None:
        """Into the audit log, and into the trace of the run that proposed it."""
        async with self._store.write() as session:
            session.add(
                TraceSpan(
                    run_id=row.run_id,
                    kind="action",
                    name=row.tool_name,
                    is_error=outcome in ("denied", "failed"),
                    detail=f"{outcome} {row.code}"
                    + (f" by user {actor}" if actor is not None else ""),
                )
            )
        await self._audit.record(
            actor=f"user:{actor}" if actor is not None else "system",
            actor_user_id=actor,
            action=f"action:{row.tool_name}",
            outcome=outcome,
            target=row.code,
            where=row.conversation_key,
            details={"summary": row.summary, "requester": row.user_id, **extra},
        )


def _chat_type(value: str) -> ChatType:
    return "group" if value == "group" else "direct"
