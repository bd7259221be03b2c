"""A user's budget row and budget holds, in storage: the statements (built
once: building them costs more than running them) and the storage
operations `bot.accounts.budgets` and `bot.accounts.holds` ask for — read a
budget, lock it, take, release and settle holds, charge — with values in and
out, run in the caller's transaction (a session of `Store.write()` or
`Store.read()`). The rules (what a call may hold, when it waits, who is told)
stay in `bot.accounts`; what the database is asked, and which write is held
back (`release_hold`), is here."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    String,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store.columns import UTCDateTime
from bot.store.models import Budget, BudgetHold
from bot.store.rows import NewRow, Write, execute, insert_rows

TokenLogRow = NewRow
"""A call's token log as a row (`bot.pipeline.turns.token_log`), written with
its settlement (`release_hold`)."""

ChargeWrite = Write
"""The charge's statement and parameters (`charge_write`), for a caller that
runs it as a part of a larger statement (a turn's write)."""


async def read_status(
    session: AsyncSession, user_id: int
) -> tuple[str, str, int | None, int, int, int] | None:
    """The user's budget row: (period, limit mode, limit tokens, granted,
    used, overage); None when the user has none."""
    row = (await execute(session, STATUS, {"s_user_id": user_id})).first()
    return None if row is None else tuple(row)


async def held_tokens(session: AsyncSession, user_id: int, now: datetime) -> int:
    """The tokens the user's live holds hold."""
    return int((await execute(session, HELD, {"k_user": user_id, "k_now": now})).scalar() or 0)


async def lock_budget(
    session: AsyncSession, user_id: int
) -> tuple[str, int, int, str, int | None] | None:
    """The user's budget row, locked until the transaction commits
    (PostgreSQL; SQLite's write transaction holds the database): (period,
    used, granted, limit mode, limit tokens); None when there is none."""
    row = (await execute(session, LOCK, {"k_user": user_id})).first()
    return None if row is None else tuple(row)


@dataclass(frozen=True, slots=True)
class WantedHold:
    """A hold to take (`take_hold`)."""

    user_id: int
    run_id: str
    instance: str
    conversation_key: str
    input_tokens: int
    room: int
    """What the allowance leaves for this call's input and output, before the
    live holds."""
    max_tokens: int
    least: int
    """The least output the call needs."""
    now: datetime
    expires_at: datetime


async def take_hold(session: AsyncSession, wanted: WantedHold) -> tuple[int, int] | None:
    """Insert the hold when what the live holds leave covers the least the
    call needs: its (id, tokens held); None when it does not fit."""
    params = {
        "k_user": wanted.user_id,
        "k_now": wanted.now,
        "k_run": wanted.run_id,
        "k_instance": wanted.instance,
        "k_key": wanted.conversation_key,
        "k_input": wanted.input_tokens,
        "k_room": wanted.room,
        "k_max": wanted.max_tokens,
        "k_least": wanted.least,
        "k_expires": wanted.expires_at,
    }
    taken = (await execute(session, TAKE, params)).first()
    return None if taken is None else (int(taken[0]), int(taken[1]))


async def mark_awaited(session: AsyncSession, user_id: int, until: datetime) -> None:
    """A message waits for the user's holds until `until`: settlements tell
    the other instances meanwhile."""
    await execute(session, AWAITED, {"k_user": user_id, "k_until": until})


async def release_hold(
    session: AsyncSession, hold_id: int, log_row: TokenLogRow | None = None
) -> None:
    """Release one hold in the caller's transaction, and write the settled
    call's token log when given, both held back (nobody reads their outcome;
    a failure is raised by the next statement or the commit)."""
    await execute(session, RELEASE_ONE, {"r_hold": hold_id}, wait=False)
    if log_row is not None:
        await insert_rows(session, [log_row], wait=False)


def release_run_write(run_id: str) -> Write:
    """The statement that releases every hold of a run and its parameters,
    for its turn's write."""
    return RELEASE_RUN, {"r_run": run_id}


async def release_dead_holds(
    session: AsyncSession, pairs: list[tuple[str, str]], now: datetime
) -> set[int]:
    """Release the holds of the runs taken over — (instance, conversation
    key) of each — and every hold past its backstop; the users whose holds
    went."""
    rows = await session.exec(release_dead(pairs), params={"r_now": now})
    return {int(row[0]) for row in rows.all()}


def charge_write(
    user_id: int, period: str, tokens: int, role_limit: int | None, now: datetime
) -> ChargeWrite:
    """The charge of `tokens` to the user's budget of `period` (`role_limit`:
    the allowance of a budget that follows its role), as one statement and
    its parameters; its row goes to `charge`'s caller as (used, overage,
    awaited_until)."""
    params = {
        "b_user_id": user_id,
        "b_period": period,
        "tokens": tokens,
        "role_limit": role_limit,
        "b_now": now,
    }
    return CHARGE, params


async def charge(session: AsyncSession, write: ChargeWrite) -> Any:
    """Run `charge_write`'s statement in the caller's transaction: its row
    (used, overage, awaited_until), None when the user has no budget row."""
    return (await execute(session, *write)).first()


# -- statements (built once) ----------------------------------------------------

LOCK = (
    select(
        col(Budget.period),
        col(Budget.used),
        col(Budget.granted),
        col(Budget.limit_mode),
        col(Budget.limit_tokens),
    )
    .where(col(Budget.user_id) == bindparam("k_user"))
    .with_for_update()
)
"""The user's budget row, locked until the reservation commits (PostgreSQL;
SQLite's write transaction holds the database)."""


def _live_held() -> Any:
    return (
        select(func.coalesce(func.sum(col(BudgetHold.tokens)), 0).label("held"))
        .where(
            col(BudgetHold.user_id) == bindparam("k_user"),
            col(BudgetHold.expires_at) > bindparam("k_now", type_=UTCDateTime),
        )
        .subquery("live")
    )


HELD = select(_live_held().c.held)
"""The tokens the user's live holds hold."""


def _take() -> Any:
    """The hold's INSERT, made only when what the live holds leave (`room`
    less the live holds) covers the least the call needs (`least`): the
    tokens held are the input and the call's `max_tokens` lowered to that."""
    live = _live_held()
    room = bindparam("k_room", type_=BigInteger) - live.c.held
    wanted = bindparam("k_max", type_=BigInteger)
    output = case((room < wanted, room), else_=wanted)
    chosen = select(
        bindparam("k_user", type_=BigInteger),
        bindparam("k_run", type_=String),
        bindparam("k_instance", type_=String),
        bindparam("k_key", type_=String),
        bindparam("k_input", type_=BigInteger) + output,
        bindparam("k_expires", type_=UTCDateTime),
        bindparam("k_now", type_=UTCDateTime),
    ).where(room >= bindparam("k_least", type_=BigInteger))
    columns = ["user_id", "run_id", "instance", "conversation_key", "tokens"]
    return (
        insert(BudgetHold)
        .from_select([*columns, "expires_at", "created_at"], chosen)
        .returning(col(BudgetHold.id), col(BudgetHold.tokens))
    )


TAKE = _take()

AWAITED = (
    update(Budget)
    .where(col(Budget.user_id) == bindparam("k_user"))
    .values(awaited_until=bindparam("k_until", type_=UTCDateTime))
)
"""A message waits for the user's holds until `k_until`: settlements tell the
other instances meanwhile."""

RELEASE_ONE = delete(BudgetHold).where(col(BudgetHold.id) == bindparam("r_hold"))
RELEASE_RUN = delete(BudgetHold).where(col(BudgetHold.run_id) == bindparam("r_run"))
"""Every hold of a run (its turn is written: none of its calls is in flight)."""


def release_dead(pairs: list[tuple[str, str]]) -> Any:
    """The holds of the runs taken over — (instance, conversation key): the
    run of that conversation on that instance, which died — and every hold
    past its backstop; returning the users whose holds went."""
    taken = (
        and_(col(BudgetHold.instance) == instance, col(BudgetHold.conversation_key) == key)
        for instance, key in pairs
    )
    gone = or_(col(BudgetHold.expires_at) <= bindparam("r_now", type_=UTCDateTime), *taken)
    return delete(BudgetHold).where(gone).returning(col(BudgetHold.user_id))


def _cap(role_limit: Any, granted: Any = None) -> ColumnElement[Any]:
    """allowance + granted, computed by the database (NULL = unlimited)."""
    allowance = case(
        (col(Budget.limit_mode) == "unlimited", None),
        (col(Budget.limit_mode) == "fixed", col(Budget.limit_tokens)),
        else_=role_limit,
    )
    return allowance + (col(Budget.granted) if granted is None else granted)


def _charge_statement() -> Any:
    """The charge, built once (building this expression costs more than running
    it): `used` climbs to the cap, the rest goes to `overage`. A row whose
    period is over starts the current one first (used, overage and granted
    from 0, as `_roll_period`), in the same statement, so a month's first
    charge is no extra round trip. It returns `awaited_until` too: whether a
    message waits for this user's holds (`settle` tells other instances)."""
    same = col(Budget.period) == bindparam("b_period")

    def this_period(column: Any) -> Any:
        return case((same, column), else_=0)

    used, overage, granted = (
        this_period(col(Budget.used)),
        this_period(col(Budget.overage)),
        this_period(col(Budget.granted)),
    )
    cap = _cap(bindparam("role_limit", type_=BigInteger), granted)
    tokens = bindparam("tokens", type_=BigInteger)
    fits = cap.is_(None) | (used + tokens <= cap)
    already_full = used >= cap
    return (
        update(Budget)
        .where(col(Budget.user_id) == bindparam("b_user_id"))
        .values(
            used=case((fits, used + tokens), (already_full, used), else_=cap),
            overage=overage + case((fits, 0), (already_full, tokens), else_=used + tokens - cap),
            granted=granted,
            period=bindparam("b_period"),
            updated_at=bindparam("b_now"),
        )
        .returning(col(Budget.used), col(Budget.overage), col(Budget.awaited_until))
    )


CHARGE = _charge_statement()

STATUS = select(
    col(Budget.period),
    col(Budget.limit_mode),
    col(Budget.limit_tokens),
    col(Budget.granted),
    col(Budget.used),
    col(Budget.overage),
).where(col(Budget.user_id) == bindparam("s_user_id"))
"""What `status` reads of a user's budget row, built once: a Core statement
(the driver path on SQLite and PostgreSQL), no ORM object."""
