"""After a run: how its replies' deliveries ended, the messages other
instances left for the conversation meanwhile, and the conversation's lease,
in one atomic write.

The three touch different rows of different tables (outbox rows by id, the
conversation's waiting inbox rows, its lease row) and none reads what another
writes, so on PostgreSQL they go as one statement: the claim of the waiting
messages with the outbox updates and the lease's DELETE as data-modifying
CTEs, in autocommit. One round trip instead of five (BEGIN, three statements,
COMMIT). On SQLite they are one transaction, the writes queued without a round
trip each (`bot.store.rows.execute`'s `wait=False`).
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.pipeline.delivery import Ended
from bot.pipeline.intake import Taken, taken
from bot.pipeline.services import Services
from bot.pipeline.waiting import free_with_waiting
from bot.store.leases import Held
from bot.store.rows import Write, combined, execute


async def hand_back(s: Services, key: str, held: Held, ended: Sequence[Ended]) -> list[Taken]:
    """Record `ended`; unless a message of the conversation waits in this
    process (its run adopts them first), take the messages waiting for it in
    the inbox (returned: they run next, here); free `held`. All or nothing."""
    writes: list[Write] = [
        s.outbox.finished(end.outbox_id, end.state, end.parts, end.error) for end in ended
    ]
    writes.append(s.leases.releasing(held))
    wanted = not s.control.queued(key)
    if s.store.is_sqlite:
        async with s.store.write() as session:
            for statement, params in writes[:-1]:
                await execute(session, statement, params, wait=False)
            if wanted:
                return await free_with_waiting(session, s.leases, s.inbox, key, held)
            await execute(session, *writes[-1], wait=False)
            return []
    claim = s.inbox.claiming(key) if wanted else None
    main, others = (claim, writes) if claim is not None else (writes[-1], writes[:-1])
    statement, params = combined(main, others)
    async with s.store.write_one() as session:
        result = await execute(session, statement, params)
        return taken(result.all()) if claim is not None else []
