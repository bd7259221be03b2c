"""Who may read what a run left behind (stored tool results, error details):
the user whose run produced it, and admins and owners. Nobody else, not even
in the same shared conversation."""

from __future__ import annotations

from sqlmodel import select
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.ports import ToolContext
from bot.store.models import Run
from bot.types import Role


async def may_read(session: AsyncSession, run_id: str | None, ctx: ToolContext) -> bool:
    """Whether the requester of `ctx` may read what run `run_id` stored."""
    if ctx.role.at_least(Role.ADMIN):
        return True
    if run_id is None:
        return False
    if run_id == ctx.run_id:  # this run (its row is written when it ends)
        return True
    owner = (await session.exec(select(Run.user_id).where(Run.id == run_id))).first()
    return owner is not None and owner == ctx.user_id


def refusal(what: str) -> str:
    return f"{what} belongs to another person's run: only they (or an admin) can read it."
