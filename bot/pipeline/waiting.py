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

The lease's statement also says whether an earlier message of the
conversation is unfinished elsewhere (`UNFINISHED`): a run must not start
then (order per conversation), and asking it here saves a read of its own
before every run.
"""

from __future__ import annotations

from sqlalchemy import ColumnClause, bindparam, exists, func, literal_column, or_
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.pipeline.intake import CONVERSATION_LEASE, Inbox, Taken
from bot.store.leases import Held, Leases
from bot.store.models import InboxItem, OutboxItem
from bot.store.rows import execute

_WAITING = (
    exists()
    .where(
        col(InboxItem.conversation_key) == bindparam("w_key"),
        col(InboxItem.state) == literal_column("'pending'"),  # as the partial index says
    )
    .label("waiting")
)


_COLON: ColumnClause[str] = literal_column("':'")
_EMPTY: ColumnClause[str] = literal_column("''")
_NONE: ColumnClause[str] = literal_column("'-'")
_UNSENT_TO = (
    col(OutboxItem.platform)
    + _COLON
    + col(OutboxItem.channel_id)
    + _COLON
    + func.coalesce(func.nullif(col(OutboxItem.thread_id), _EMPTY), _NONE)
)
"""An outbox row's conversation key (`bot.types.conversation_key` of its
target), with no bind parameter of its own: on PostgreSQL it is a part of
one statement with others (`lease_then_claim`), whose anonymous parameters'
names would clash."""

UNFINISHED = or_(
    exists().where(
        col(InboxItem.conversation_key) == bindparam("u_key"),
        col(InboxItem.state) == literal_column("'running'"),
        col(InboxItem.lease_owner) != bindparam("u_owner"),
    ),
    exists().where(
        col(OutboxItem.state) == literal_column("'pending'"),
        bindparam("u_key") == _UNSENT_TO,
    ),
).label("unfinished")
"""Whether a message of the conversation is being worked on by another instance
(running there, or left by a process that died, its lease not over or handed
back at shutdown), or a reply to it is still unsent (a process died between
a turn and its delivery; recovery sends it), asked with the lease, by the
transaction (or the statement) that takes it and the messages waiting, which
are then this instance's: the message taking the lease must not run first.
At intake every other message it sees is older (the one taking the lease is
the newest). For a message that waited, a newer one running elsewhere while
the lease is free here was left by a process that died: it waits too, and
the recovery sweep runs them oldest first. (A message accepted elsewhere at
the same moment, not yet committed, is not seen: its instance finds the
lease held and leaves it waiting for this run's end.)"""


def unfinished_params(inbox: Inbox, key: str) -> dict[str, str]:
    """`UNFINISHED`'s parameters."""
    return {"u_key": key, "u_owner": inbox.owner}


_ASKED = (_WAITING, UNFINISHED)


async def take_with_waiting(
    session: AsyncSession, leases: Leases, inbox: Inbox, key: str, user_id: int | None
) -> tuple[Held | None, list[Taken], bool]:
    """In `session`'s transaction: take conversation `key`'s lease and, when
    taken and messages wait for it, claim them. (None, [], False) when a
    live instance holds it. Last: whether a message of the conversation is
    unfinished on another instance (`UNFINISHED`)."""
    (statement, params), held = leases.acquiring(
        CONVERSATION_LEASE + key, user_id=user_id, also=_ASKED
    )
    params = {**params, "w_key": key, **unfinished_params(inbox, key)}
    row = (await execute(session, statement, params)).first()
    if row is None:
        return None, [], False
    waiting, unfinished = row[-2], row[-1]
    claimed = await inbox.claim_pending(key, session=session) if waiting else []
    return held, claimed, bool(unfinished)


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
