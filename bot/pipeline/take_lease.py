"""Before a run: the conversation's lease (one run per conversation across
instances) and, for a message, what other instances left waiting for it.
`bot.pipeline.hand_back` is the other end."""

from __future__ import annotations

import asyncio
import logging

from bot.pipeline.early_lease import EarlyLeases, joint_take
from bot.pipeline.intake import CONVERSATION_LEASE, Taken
from bot.pipeline.services import Services
from bot.pipeline.waiting import take_with_waiting
from bot.store.leases import Held
from bot.store.rows import execute

log = logging.getLogger("switchboard.pipeline")

WAKEUP_LEASE_TRIES = 60
"""A wakeup waits up to ~30 s for its conversation's run on another instance."""


async def take_conversation(
    s: Services, early_leases: EarlyLeases, key: str, user_id: int, source: str
) -> tuple[Held | None, list[Taken], bool, bool]:
    """The conversation's lease. A message gives up at once (it waits in the
    inbox instead) and, once the lease is ours, takes the messages other
    instances left for the conversation in the same transaction; a wakeup,
    which has no inbox row, waits a while for the lease. Then: whether the
    transaction that took the lease created the conversation too; and, for a
    message, whether an earlier message of the conversation is unfinished on
    another instance, asked with the lease (`bot.pipeline.waiting.UNFINISHED`):
    its run must not start then."""
    early = await early_leases.take(key)
    if early is not None:  # taken with a message at intake
        if early.held is not None and early.user_id not in (None, user_id):
            # the sender's account changed since it was last seen here (merged)
            try:
                await s.leases.relabel(early.held, user_id)
            except Exception as exc:  # the lease still guards the run: go on
                log.warning("lease.relabel_failed lease=%s: %s", early.held.name, exc)
        return early.held, list(early.waiting), early.created, early.unfinished
    if source == "user":
        # no lease taken at intake: the message waited for its turn (or came
        # while the conversation's last run here was ending)
        if s.inbox.joins:  # PostgreSQL: one statement, in autocommit
            write, outcome = joint_take(s.leases, s.inbox, key, user_id)
            async with s.store.write_one(urgent=True) as session:
                taken = outcome(list((await execute(session, *write)).all()))
            if taken is None:
                return None, [], False, False
            return taken.held, list(taken.waiting), False, taken.unfinished
        # what another process changed meanwhile (an operator's CLI) is known first
        async with s.store.write(fresh=True) as session:
            held, waiting, unfinished = await take_with_waiting(
                session, s.leases, s.inbox, key, user_id
            )
            return held, waiting, False, unfinished
    name = CONVERSATION_LEASE + key
    for attempt in range(WAKEUP_LEASE_TRIES):
        held = await s.leases.acquire(name, user_id=user_id)
        if held is not None or attempt == WAKEUP_LEASE_TRIES - 1:
            return held, [], False, False
        await asyncio.sleep(0.5)
    return None, [], False, False
