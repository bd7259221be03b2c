"""PostgreSQL: a live turn written as one statement, in autocommit.

`bot.pipeline.turns.write_turn` writes a turn in a transaction: BEGIN, the
inbox's end (the fence), the rows, the budget charge, the outbox, COMMIT; on
PostgreSQL five round trips, each a wait behind whatever else the event loop
is doing. Here the same writes are the parts of one statement, which is atomic
by itself: the run, messages, files, spans and token logs as data-modifying
CTEs (`bot.store.rows.execute`, `wait=False`), and the three writes whose
outcome the turn needs (the inbox's end, the charge, the outbox rows) as CTEs
the statement's main SELECT reads:

- the fence: the main SELECT counts the inbox rows finished, and when fewer
  than the turn's messages were still leased to this instance (another took
  one over), casts a marker text to an integer, which fails, and the failure
  undoes every part; `LeaseLost` is raised, as the transaction would;
- the charge's `used` and `overage` (`Budgets.charge_write`: one UPDATE that
  also starts a new month; the run's budget holds are released by a part of
  their own, `Budgets.release_write`);
- the new outbox ids, in the replies' order (as text: see `_statement`).

The parts see the database as it was before the statement and touch
different rows, which is what `bot.store.rows.combined` requires. A turn with
more rows of one table than are kept back (`rows.MAX_KEPT_ROWS`) is written
the usual way (`fits`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Integer, bindparam, case, cast, func, literal_column, select
from sqlalchemy.exc import DBAPIError
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.accounts.budgets import Budgets
from bot.pipeline.outbox import Outbox, Outgoing
from bot.pipeline.turns import (
    FINISH_INBOX,
    LeaseLost,
    TurnRows,
    TurnSaved,
    finish_params,
    owed,
)
from bot.store.rows import MAX_KEPT_ROWS, execute, insert_rows, keepable, multi_row
from bot.types import Reply

LEASE_LOST = "switchboard: lease lost"
"""The text the fence casts to an integer when the turn is not ours: the error
names it, so it is told from any other failure."""


def fits(rows: TurnRows, replies: Sequence[Reply]) -> bool:
    """Whether the turn can be one statement: a live turn (fenced by its
    lease) whose rows are all kept back."""
    return (
        rows.lease_owner is not None
        and len(replies) <= MAX_KEPT_ROWS
        and all(keepable(group) for group in (rows.messages, rows.files, rows.spans, rows.tokens))
    )


async def write_turn_at_once(
    session: AsyncSession,
    rows: TurnRows,
    budgets: Budgets,
    outbox: Outbox,
    replies: Sequence[Reply],
) -> TurnSaved:
    """Write the turn (`fits`) as one statement in `session`, which is in
    autocommit (`Store.write_one`)."""
    for group in ([rows.run], rows.messages, rows.files, rows.spans, rows.tokens):
        await insert_rows(session, group, wait=False)
    if rows.release_holds:
        await execute(session, *budgets.release_write(rows.run["id"]), wait=False)
    params: dict[str, Any] = {}
    keys = sorted(set(rows.inbox_keys))
    if keys:
        params |= finish_params(rows, keys) | {"f_expected": len(keys)}
    tokens = owed(rows)
    charge = budgets.charge_write(rows.user_id, rows.role, tokens)
    if charge is not None:
        params |= charge[1]
    outgoing, created = outbox.rows(replies, run_id=rows.run["id"])
    added = None
    if outgoing:
        added, values = multi_row(outgoing)
        params |= values
    statement = _statement(bool(keys), charge[0] if charge else None, added)
    try:
        row = (await execute(session, statement, params)).one()
    except DBAPIError as exc:
        if LEASE_LOST in str(exc.orig):
            raise LeaseLost(f"run {rows.run['id']}: a message of this run was taken over") from exc
        raise
    ids = [int(i) for i in row.outbox.split(",")] if row.outbox else []
    if len(ids) != len(outgoing):
        raise RuntimeError(f"outbox: {len(outgoing)} rows written, {len(ids)} ids returned")
    charged = None
    if charge is not None:
        found = None if row.used is None else (row.used, row.overage)
        charged = Budgets.charged(rows.user_id, tokens, found)
    return TurnSaved(
        charged,
        len(rows.messages),
        [Outgoing(i, reply, created_at=created) for i, reply in zip(ids, replies, strict=True)],
    )


_STATEMENTS: dict[tuple[bool, int, int], tuple[Any, Any, Any]] = {}


def _statement(fenced: bool, charge: Any, added: Any) -> Any:
    """The main SELECT over the parts whose outcome the turn reads: the fence,
    the charge (`charge`, its UPDATE), the outbox ids (`added`, the replies'
    multi-row INSERT); built once per form."""
    form = (fenced, id(charge), id(added))
    known = _STATEMENTS.get(form)
    if known is not None and known[0] is charge and known[1] is added:
        return known[2]
    columns: list[Any] = []
    if fenced:
        finished = FINISH_INBOX.returning(literal_column("1").label("one")).cte("finished")
        count = select(func.count()).select_from(finished).scalar_subquery()
        ok = case(
            (count == bindparam("f_expected", type_=Integer), literal_column("'0'")),
            else_=literal_column(f"'{LEASE_LOST}'"),
        )
        columns.append(cast(ok, Integer).label("fence"))
    if charge is not None:
        charged = charge.cte("charge")
        columns.append(select(charged.c.used).scalar_subquery().label("used"))
        columns.append(select(charged.c.overage).scalar_subquery().label("overage"))
    else:
        columns += [literal_column("NULL").label("used"), literal_column("NULL").label("overage")]
    if added is not None:
        new = added.returning(added.table.c.id).cte("added")
        # As text ("4,5"): an integer array would make asyncpg look its type
        # up (a query of its own) on every connection's first turn.
        listed: Any = literal_column("string_agg(CAST(added.id AS TEXT), ',' ORDER BY added.id)")
        columns.append(select(listed).select_from(new).scalar_subquery().label("outbox"))
    else:
        columns.append(literal_column("NULL").label("outbox"))
    statement = select(*columns)
    _STATEMENTS[form] = (charge, added, statement)
    return statement
