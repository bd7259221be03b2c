"""PostgreSQL: the writes of a turn whose outcome it reads, as one statement.

`bot.pipeline.turns.write_turn` is the one copy of what a turn writes. On
PostgreSQL, a live turn that fits (`fits`) reads its three outcomes from one
statement built here, the turn's other rows riding on it as data-modifying
CTEs (`bot.store.rows.execute`, `wait=False`), in one transaction:

- the inbox's end: how many of the turn's messages it finished (the fence:
  fewer than the turn's messages means another instance took one over, and
  `write_turn` raises `LeaseLost`, which rolls the transaction back);
- the charge's `used` and `overage` (`Budgets.charge_write`: one UPDATE that
  also starts a new month);
- the new outbox ids, in the replies' order (as text: see `statement`).

The parts see the database as it was before the statement and touch
different rows, which is what `bot.store.rows.combined` requires."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, literal_column, select

_STATEMENTS: dict[tuple[int, int, int], tuple[Any, Any, Any, Any]] = {}


def statement(finish: Any, charge: Any, added: Any) -> Any:
    """The main SELECT over the parts whose outcome the turn reads: the inbox's
    end (`finish`, its UPDATE: the count of rows it finished, `finished`), the
    charge (`charge`, its UPDATE: `used`, `overage`), the outbox ids (`added`,
    the replies' multi-row INSERT: `outbox`); any may be None. Built once per
    form."""
    form = (id(finish), id(charge), id(added))
    known = _STATEMENTS.get(form)
    if known is not None and known[:3] == (finish, charge, added):
        return known[3]
    columns: list[Any] = []
    if finish is not None:
        finished = finish.returning(literal_column("1").label("one")).cte("finished")
        columns.append(
            select(func.count()).select_from(finished).scalar_subquery().label("finished")
        )
    else:
        columns.append(literal_column("NULL").label("finished"))
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
    built = select(*columns)
    _STATEMENTS[form] = (finish, charge, added, built)
    return built
