"""A conversation's lease taken with the message that asks for it.

A message is stored in the inbox before anything else; its run then needs the
conversation's lease (one run per conversation across instances) and what other
instances left waiting for it. For a returning user's message to a conversation
this process is not working on, both go into the inbox's transaction instead of
one of their own: one write fewer on every such message. A new user's first
message takes them in the transaction that creates the account and the
conversation (`for_account`).

The lease is held here until the next run of that conversation in this process
takes it over (`take`), whichever message that run answers first. Only one is
taken at a time per conversation, and never while a run of it is under way
here: the lease upsert gives a lease already ours a new token, which would cut
the running one's release. A message that ends without a run (refused, failed)
hands what it took back (`leftover`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exists, select, true
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.accounts.identity import Also, Identity
from bot.conversations import RECORD_WIDTH, Conversations, created
from bot.pipeline.control import RunControl
from bot.pipeline.intake import (
    CONVERSATION_LEASE,
    Inbox,
    Joined,
    Taken,
    WithMessage,
    taken,
)
from bot.pipeline.waiting import UNFINISHED, take_with_waiting, unfinished_params
from bot.store import mechanisms
from bot.store.leases import Held, Leases
from bot.store.rows import Write, execute
from bot.types import IncomingMessage

log = logging.getLogger("switchboard.pipeline")

_OFF = mechanisms.off("early_lease")


@dataclass(frozen=True, slots=True)
class Early:
    """What the inbox's transaction took: the lease (None when another live
    instance holds it) and the messages that waited for the conversation."""

    held: Held | None
    waiting: tuple[Taken, ...] = ()
    created: bool = False
    """the same transaction created the conversation: its first run has nothing
    to read of it (`Conversations.created_state`)"""
    user_id: int | None = None
    """whom the lease says it runs for: the sender's user id as last known here
    (the run corrects it when the account changed since, `take_conversation`)"""
    unfinished: bool = False
    """an earlier message of the conversation is unfinished on another
    instance (`bot.pipeline.waiting.UNFINISHED`): the run must wait"""


NOTHING = Early(None)


@dataclass(slots=True)
class Attempt:
    """One message's try at taking its conversation's lease at intake."""

    key: str
    user_id: int
    future: asyncio.Future[Early]
    took: Early = NOTHING
    stored: bool = False
    """(`for_account`) the account's transaction, which took the lease, committed"""


class EarlyLeases:
    def __init__(
        self, leases: Leases, inbox: Inbox, identity: Identity, control: RunControl
    ) -> None:
        self._leases = leases
        self._inbox = inbox
        self._identity = identity
        self._control = control
        self._by_key: dict[str, asyncio.Future[Early]] = {}

    def at_intake(self, msg: IncomingMessage) -> Attempt | None:
        """The attempt for a message (not a command) to take its
        conversation's lease in the inbox's transaction: a returning user's
        message (the sender seen here lately, their record perhaps no longer
        fresh) to a conversation not being worked on here; else None."""
        user_id = self._identity.last_id(msg)  # seen lately: a returning user
        if msg.source != "user" or user_id is None or self._control.busy(msg.conversation_key):
            return None
        if _OFF:
            return None
        return self.attempt(msg.conversation_key, user_id)

    def attempt(self, key: str, user_id: int) -> Attempt | None:
        """Claim the right to take `key`'s lease at intake; None when a message
        on its way already did. `settle` the attempt whatever happens."""
        if key in self._by_key:
            return None
        future: asyncio.Future[Early] = asyncio.get_running_loop().create_future()
        self._by_key[key] = future
        return Attempt(key, user_id, future)

    def at_accept(self, attempt: Attempt) -> WithMessage:
        """What the message's INSERT takes with it (`Inbox.accept(also=…)`): on
        PostgreSQL the lease and the claim of the messages waiting, joined to
        the INSERT (one statement, one round trip); else `step`."""
        if not self._inbox.joins:
            return self.step(attempt)
        return Joined(*self._joint(attempt))

    def step(self, attempt: Attempt) -> Callable[[AsyncSession], Awaitable[None]]:
        """What the inbox's (or the new account's) transaction does too: take
        the lease and, with it, the messages that waited; on PostgreSQL in one
        statement."""

        async def take(session: AsyncSession) -> None:
            if self._inbox.joins:
                write, took = self._joint(attempt)
                took(list((await execute(session, *write)).all()))
                return
            held, waiting, unfinished = await take_with_waiting(
                session, self._leases, self._inbox, attempt.key, attempt.user_id
            )
            attempt.took = Early(held, tuple(waiting), False, attempt.user_id, unfinished)

        return take

    def _joint(
        self, attempt: Attempt, first: Write | None = None
    ) -> tuple[Write, Callable[[list[Any]], None]]:
        """`joint_take` for the attempt: what records the outcome sets its `took`."""
        write, outcome = joint_take(self._leases, self._inbox, attempt.key, attempt.user_id, first)

        def took(rows: list[Any]) -> None:
            early = outcome(rows)
            if early is not None:
                attempt.took = early

        return write, took

    def for_account(
        self, msg: IncomingMessage, conversations: Conversations
    ) -> tuple[Also, Attempt | None]:
        """For `msg` (not a command), what the transaction that would create
        its sender's account (`Identity.resolve`) does too: create the
        conversation and, for a conversation not being worked on here, take
        its lease (and what waited for it); on PostgreSQL as one statement,
        the account's rows riding on it. Returns that, and the attempt (None:
        no lease taken): `settle` it with `attempt.stored` once `resolve`
        returned or failed (the account may have been there after all: no
        transaction)."""

        async def resolve_in(session: AsyncSession, _user_id: int) -> Callable[[], None]:
            return (await conversations.resolve_in(session, msg))[0]

        key = msg.conversation_key
        if msg.source != "user" or self._identity.known(msg) is not None:
            return resolve_in, None  # no account to create
        if self._control.busy(key) or _OFF:
            return resolve_in, None
        attempt = self.attempt(key, 0)
        if attempt is None:
            return resolve_in, None
        take = self.step(attempt)

        async def with_lease(session: AsyncSession, user_id: int) -> Callable[[], None]:
            attempt.user_id = user_id
            upsert = conversations.upserting(msg) if self._inbox.joins else None
            if upsert is not None:  # the conversation, the lease and the claim
                write, took = self._joint(attempt, first=upsert)
                rows = list((await execute(session, *write)).all())
                committed, new = conversations.stored(rows[0]), created(rows[0])
                took([row[RECORD_WIDTH:] for row in rows if row[RECORD_WIDTH] is not None])
            else:
                committed, new = await conversations.resolve_in(session, msg)
                await take(session)
            if new and attempt.took.held is not None:
                attempt.took = dataclasses.replace(attempt.took, created=True)

            def stored() -> None:
                attempt.stored = True
                committed()

            return stored

        return with_lease, attempt

    def settle(self, attempt: Attempt, committed: bool) -> None:
        """The transaction that took the lease ended: committed (and the
        message stored, or the account created) or not."""
        if not committed:
            attempt.took = NOTHING
        early = attempt.took
        if not attempt.future.done():
            attempt.future.set_result(early)
        if early.held is None and self._by_key.get(attempt.key) is attempt.future:
            del self._by_key[attempt.key]  # nothing to hand over

    async def take(self, key: str) -> Early | None:
        """For the run about to answer `key` here: the lease a message took at
        intake (waiting for that intake's transaction if it is under way)."""
        future = self._by_key.pop(key, None)
        if future is None:
            return None
        early = await asyncio.shield(future)
        return early if early.held is not None else None

    def leftover(self, attempt: Attempt) -> Early | None:
        """What the message took at intake and no run took over (it ended
        without one): the caller releases the lease and resumes the messages."""
        if self._by_key.get(attempt.key) is not attempt.future:
            return None
        del self._by_key[attempt.key]
        early = attempt.took if attempt.future.done() else NOTHING
        return early if early.held is not None else None

    async def release(self, early: Early) -> None:
        if early.held is not None:
            try:
                await self._leases.release(early.held)
            except Exception:
                log.warning("lease.release_failed lease=%s (it expires)", early.held.name)


_JOINT: dict[tuple[int, int, int], tuple[Any, Any, Any, Any]] = {}


def lease_then_claim(lease: Write, claim: Write, first: Write | None = None) -> Write:
    """PostgreSQL: the lease's upsert (returning its token when taken) and,
    only when it takes the lease, the claim (returning the messages taken), as
    one statement. Its rows: none when the lease was not taken; else one per
    message claimed, (the lease's columns…, the message's columns…), or one with NULLs for
    the message when none waited. With `first` (a statement returning one
    row, run as a part too) every row starts with that row's columns, and
    there is one row with NULLs after them when the lease was not taken.
    Built once per set of statements."""
    key = (id(lease[0]), id(claim[0]), id(first[0]) if first else 0)
    known = _JOINT.get(key)
    parts = (lease[0], claim[0], first[0] if first else None)
    if known is None or any(a is not b for a, b in zip(known, parts, strict=False)):
        taken_lease = lease[0].cte("lease")
        claimed = claim[0].where(exists(select(taken_lease.c.token))).cte("claimed")
        columns = [*taken_lease.c, *claimed.c]
        joined = taken_lease.outerjoin(claimed, true())
        if first is not None:
            made = first[0].cte("first")
            columns = [*(c.label(f"first_{c.key}") for c in made.c), *columns]
            joined = made.outerjoin(joined, true())
        known = _JOINT[key] = (*parts, select(*columns).select_from(joined))
    params = {**lease[1], **claim[1]}
    if first is not None:
        params |= first[1]
    return known[3], params


def joint_take(
    leases: Leases,
    inbox: Inbox,
    key: str,
    user_id: int | None,
    first: Write | None = None,
) -> tuple[Write, Callable[[list[Any]], Early | None]]:
    """PostgreSQL: conversation `key`'s lease, the claim of the messages
    waiting for it and whether an earlier one is unfinished elsewhere, as one
    statement (`lease_then_claim`, with `first` when given); and what reads
    their outcome from its rows (without `first`'s columns): None when the
    lease was not taken."""
    (statement, params), held = leases.acquiring(
        CONVERSATION_LEASE + key, user_id=user_id, also=UNFINISHED
    )
    lease = (statement, params | unfinished_params(inbox, key))

    def outcome(rows: list[Any]) -> Early | None:
        # the lease was taken: (token, unfinished, the message's columns…),
        # a row per message claimed (none: NULLs)
        if not rows:
            return None
        claimed = taken(row[2:] for row in rows if row[2] is not None)
        return Early(held, tuple(claimed), False, user_id, bool(rows[0][1]))

    return lease_then_claim(lease, inbox.claiming(key), first), outcome
