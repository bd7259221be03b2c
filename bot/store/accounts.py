"""An account's rows at first sight: find a platform account's user and link
(with what the caches want of the user's other rows), or create the user, its
link and its budget in one write.

Storage operations of `bot.accounts.identity`, which decides roles, caches and
who is told: it gives and gets values (`Account`, `NewAccount`), never rows
or statements. The SQLite and PostgreSQL forms differ here only: on
PostgreSQL the read that finds no account draws the new ids from their
sequences in the same query (`find_or_reserve`), and the creation is then
one statement in autocommit, its rows held back to ride on the statement of
the work joined to it (`Also`); on SQLite one transaction of Core INSERTs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import sqlalchemy
from sqlalchemy import bindparam, case, exists, func, literal, true
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store.db import Store
from bot.store.models import Budget, Memory, PlatformLink, User
from bot.store.rows import execute, insert_returning_ids, insert_rows, new_row

Also = Callable[[AsyncSession, int], Awaitable[Callable[[], None]]]
"""Work for the transaction that creates an account (given its session and the
new account's id): it writes, and returns what to call once that transaction
has committed. On PostgreSQL the session is in autocommit: the work runs at
most one statement that waits, which the account's rows ride on
(`create_account`)."""


class Account(NamedTuple):
    """What resolving an account needs of its user and link rows."""

    user_id: int
    role: str
    user_display_name: str | None
    link_id: int
    link_display_name: str | None
    username: str | None
    limit_mode: str | None
    limit_tokens: int | None
    has_memories: bool


@dataclass(frozen=True, slots=True)
class NewAccount:
    """A user seen for the first time: its user, link and budget rows."""

    platform: str
    platform_user_id: str
    display_name: str | None
    username: str | None
    role: str
    period: str
    """The budget row's month ("YYYY-MM")."""


Ids = tuple[int, int]
"""A new account's (user id, link id), drawn ahead (PostgreSQL)."""


async def find_account(store: Store, platform: str, platform_user_id: str) -> Account | None:
    """The account, or None when there is none."""
    params = {"a_platform": platform, "a_user": platform_user_id}
    async with store.read() as session:
        row = (await execute(session, _FIND, params)).first()
    return None if row is None else Account(*row)


async def find_or_reserve(
    store: Store, platform: str, platform_user_id: str
) -> tuple[Account | None, Ids | None]:
    """`find_account`; on PostgreSQL, when there is no such account, with the
    ids its user and link would take (drawn from their sequences in the same
    query), so that creating it needs no id from the database."""
    if store.is_sqlite:
        return await find_account(store, platform, platform_user_id), None
    params = {"a_platform": platform, "a_user": platform_user_id}
    async with store.read() as session:
        row = (await execute(session, _FIND_OR_IDS, params)).one()
    if row[0] is not None:
        return Account(*row[:_COLUMNS]), None
    return None, (int(row[_COLUMNS]), int(row[_COLUMNS + 1]))


async def create_account(
    store: Store, account: NewAccount, ids: Ids | None = None, also: Also | None = None
) -> tuple[Ids, Callable[[], None] | None]:
    """Create the user, its platform link and its budget (and `also`), all or
    nothing: on SQLite one transaction of Core INSERTs (rows as column
    values: a model object costs more to make than its INSERT); on
    PostgreSQL, given the `ids` to use, one statement in autocommit, the
    three rows riding on `also`'s statement (or going alone). Returns the
    new (user id, link id) and what `also` asked to call after the commit.
    Raises `IntegrityError` (nothing written) when the link was created
    concurrently."""
    user = new_row(User, display_name=account.display_name, role=account.role)
    link = new_row(
        PlatformLink,
        user_id=0,  # the new user's id, once made
        platform=account.platform,
        platform_user_id=account.platform_user_id,
        display_name=account.display_name,
        username=account.username,
    )
    if ids is not None:
        user_id, link_id = ids
        user["id"], link["id"], link["user_id"] = user_id, link_id, user_id
        async with store.write_one() as session:
            for row in (user, link, new_row(Budget, user_id=user_id, period=account.period)):
                await insert_rows(session, [row], wait=False)
            committed = await also(session, user_id) if also is not None else None
    else:
        async with store.write() as session:
            (user_id,) = await insert_returning_ids(session, [user])
            link["user_id"] = user_id
            (link_id,) = await insert_returning_ids(session, [link])
            budget = new_row(Budget, user_id=user_id, period=account.period)
            await insert_rows(session, [budget], wait=False)  # the commit raises a failure
            committed = await also(session, user_id) if also is not None else None
    return (user_id, link_id), committed


_COLUMNS = len(Account._fields)

_FIND = (
    sqlalchemy.select(
        col(User.id),
        col(User.role),
        col(User.display_name),
        col(PlatformLink.id),
        col(PlatformLink.display_name),
        col(PlatformLink.username),
        col(Budget.limit_mode),
        col(Budget.limit_tokens),
        exists().where(col(Memory.user_id) == col(User.id)).label("has_memories"),
    )
    .join(PlatformLink, col(PlatformLink.user_id) == col(User.id))
    .outerjoin(Budget, col(Budget.user_id) == col(User.id))
    .where(
        col(PlatformLink.platform) == bindparam("a_platform"),
        col(PlatformLink.platform_user_id) == bindparam("a_user"),
    )
)
"""An account's user and link (`find_account`), built once: it runs for every
message of someone not seen lately, a new user's first one included. The
user's budget limit and whether they have memories ride along."""


def _find_or_ids_statement() -> Any:
    """PostgreSQL: `_FIND`'s row, or when there is none, one with NULLs and
    the next ids of users and platform_links (taken only then)."""
    found = _FIND.subquery("found")

    def next_id(table: str) -> Any:
        return func.nextval(func.pg_get_serial_sequence(table, "id"))

    missing = found.c[0].is_(None)
    return sqlalchemy.select(
        *found.c,
        case((missing, next_id("users"))).label("next_user_id"),
        case((missing, next_id("platform_links"))).label("next_link_id"),
    ).select_from(sqlalchemy.select(literal(1)).subquery("one").outerjoin(found, true()))


_FIND_OR_IDS = _find_or_ids_statement()
