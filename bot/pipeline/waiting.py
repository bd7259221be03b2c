"""Whether messages wait in the inbox for a conversation, asked by the very
statement that takes or frees the conversation's lease.

Messages wait (`pending`) only when another instance held the conversation
when they came, or its holder died: rare. So instead of a claim statement
every time a lease is taken or handed back, the lease's upsert or DELETE
returns, beside its own columns, whether any message waits (an EXISTS on the
inbox's index of waiting messages), and the claim runs only then: one
statement fewer at intake and one fewer after every run. On SQLite the check
and the claim are in one transaction with the lease's change, and one writer
at a time: nothing starts waiting in between. On PostgreSQL a message another
instance leaves waiting just after the check (it found the lease held) is
claimed when the lease is handed back, as one left just after a claim was.
"""

from __future__ import annotations

from sqlalchemy import bindparam, exists, literal_column
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.pipeline.intake import CONVERSATION_LEASE, Inbox, Taken
from bot.store.leases import Held, Leases
from bot.store.models import InboxItem
from bot.store.rows import execute

_WAITING = (
    exists()
    .where(
        col(InboxItem.conversation_key) == bindparam("w_key"),
        col(InboxItem.state) == literal_column("'pending'"),  # as the partial index says
    )
    .label("waiting")
)


async def take_with_waiting(
    session: AsyncSession, leases: Leases, inbox: Inbox, key: str, user_id: int | None
) -> tuple[Held | None, list[Taken]]:
    """In `session`'s transaction: take conversation `key`'s lease and, when
    taken and messages wait for it, claim them. (None, []) when a live
    instance holds it."""
    (statement, params), held = leases.acquiring(
        CONVERSATION_LEASE + key, user_id=user_id, also=_WAITING
    )
    row = (await execute(session, statement, {**params, "w_key": key})).first()
    if row is None:
        return None, []
    return held, (await inbox.claim_pending(key, session=session) if row[-1] else [])


async def free_with_waiting(
    session: AsyncSession, leases: Leases, inbox: Inbox, key: str, held: Held
) -> list[Taken]:
    """In `session`'s transaction: free `held` and claim the messages waiting
    for conversation `key` (they run next, here), if any. When the lease was
    no longer ours (its token changed), they are claimed all the same, as
    before this check existed: the caller runs what it claims."""
    statement, params = leases.releasing(held, also=_WAITING)
    row = (await execute(session, statement, {**params, "w_key": key})).first()
    if row is not None and not row[-1]:
        return []
    return await inbox.claim_pending(key, session=session)
